"""The Wyoming server's settings: the ``wyoming`` section of the config, with command-line overrides."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rkvoice.config import Config, WyomingConfig


def from_cfg(cfg: Config | WyomingConfig, **overrides: Any) -> WyomingConfig:
    """The ``wyoming`` section of ``cfg`` (or ``cfg`` itself), then the ``overrides`` that are not None."""
    base = cfg if isinstance(cfg, WyomingConfig) else cfg.wyoming
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **given) if given else base
