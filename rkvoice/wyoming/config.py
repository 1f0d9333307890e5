"""The Wyoming server's settings: the ``wyoming`` section of the config, with command-line overrides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from rkvoice.config import Config, WyomingConfig, zone


def from_cfg(cfg: Config | WyomingConfig, **overrides: Any) -> WyomingConfig:
    """The ``wyoming`` section of ``cfg`` (or ``cfg`` itself), then the ``overrides`` that are not None."""
    base = cfg if isinstance(cfg, WyomingConfig) else cfg.wyoming
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **given) if given else base


def clock(time_zone: str) -> Callable[[], datetime]:
    """The answers' clock: now in ``time_zone``, or in the system's zone when it is empty."""
    if not time_zone:
        return lambda: datetime.now().astimezone()
    tz = zone(time_zone)
    return lambda: datetime.now(tz)
