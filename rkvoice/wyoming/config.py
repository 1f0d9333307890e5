"""The Wyoming server's settings: the ``wyoming`` section of the config, with command-line overrides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, tzinfo
from typing import Any

from rkvoice.config import Config, WyomingConfig
from rkvoice.errors import RkvoiceError


def from_cfg(cfg: Config | WyomingConfig, **overrides: Any) -> WyomingConfig:
    """The ``wyoming`` section of ``cfg`` (or ``cfg`` itself), then the ``overrides`` that are not None."""
    base = cfg if isinstance(cfg, WyomingConfig) else cfg.wyoming
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **given) if given else base


def zone(name: str) -> tzinfo:
    """The IANA time zone ``name``, or an RkvoiceError naming the key and an example."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise RkvoiceError("config", "bad-value", f"wyoming.time_zone {name!r} is not a known IANA time zone "
                                                  "(e.g. Asia/Shanghai, Europe/Berlin); empty = the system's") from exc


def clock(time_zone: str) -> Callable[[], datetime]:
    """The answers' clock: now in ``time_zone``, or in the system's zone when it is empty."""
    if not time_zone:
        return lambda: datetime.now().astimezone()
    tz = zone(time_zone)
    return lambda: datetime.now(tz)
