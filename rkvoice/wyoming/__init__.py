"""rkvoice as a Wyoming server: wake, ASR, TTS and answers for Home Assistant (see server.py)."""

from __future__ import annotations

from .config import WyomingConfig, from_cfg
from .gate import Engines
from .server import WyomingServer, load_engines, serve_wyoming, serve_wyoming_async

__all__ = ["Engines", "WyomingConfig", "WyomingServer", "from_cfg", "load_engines", "serve_wyoming",
           "serve_wyoming_async"]
