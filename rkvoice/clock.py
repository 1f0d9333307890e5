"""Injected monotonic clocks: real time in the product (``MonotonicClock``); controlled time in tests and
benches (``FakeClock``, tests/support/clock.py)."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Block until ``event`` is set (True) or ``timeout`` seconds of this clock pass (False)."""

    def pause(self, seconds: float, interrupt: threading.Event) -> bool:
        """Let ``seconds`` of this clock's time pass, unless ``interrupt`` is set first (then False).
        The caller's own waiting: a controlled clock moves forward instead."""


class MonotonicClock:
    """The real clock (time.monotonic)."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)

    def pause(self, seconds: float, interrupt: threading.Event) -> bool:
        return not interrupt.wait(max(0.0, seconds))
