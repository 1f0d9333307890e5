"""The satellite's timer table: Home Assistant runs the timers (its timer intents, for this device) and
tells the satellite with ``timer-started/-updated/-cancelled/-finished``; the table mirrors them so the
board knows what runs and for how long, and says a finished one aloud."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from rkvoice.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)

FINISHED_WORDS = "计时器时间到了"
"""What the board says when a timer finishes (with the timer's name in front when it has one)."""


@dataclass
class Timer:
    id: str
    total_s: float
    """Seconds the timer ran for when it was last (re)started or updated."""
    name: str = ""
    active: bool = True
    since: float = 0.0
    """Clock time of the last start or update."""

    def remaining_s(self, now: float) -> float:
        return max(0.0, self.total_s - (now - self.since)) if self.active else self.total_s


class TimerTable:
    """Timers by id, on an injected clock (``remaining_s`` counts down on it)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or MonotonicClock()
        self._timers: dict[str, Timer] = {}
        self._lock = threading.Lock()

    def started(self, timer_id: str, total_seconds: float, name: str | None = None) -> Timer:
        timer = Timer(timer_id, float(total_seconds), (name or "").strip(), True, self.clock.now())
        with self._lock:
            self._timers[timer_id] = timer
        log.info("timer %s started: %.0f s%s", timer_id, timer.total_s, f" ({timer.name})" if timer.name else "")
        return timer

    def updated(self, timer_id: str, is_active: bool, total_seconds: float) -> Timer:
        """``total_seconds`` is what is left (HA's paused/resumed/added/removed time)."""
        with self._lock:
            timer = self._timers.get(timer_id)
            if timer is None:  # started before we were connected: take it from here
                timer = self._timers[timer_id] = Timer(timer_id, 0.0)
            timer.total_s, timer.active, timer.since = float(total_seconds), bool(is_active), self.clock.now()
        log.info("timer %s %s: %.0f s left", timer_id, "running" if is_active else "paused", timer.total_s)
        return timer

    def cancelled(self, timer_id: str) -> Timer | None:
        with self._lock:
            timer = self._timers.pop(timer_id, None)
        log.info("timer %s cancelled%s", timer_id, "" if timer else " (not known here)")
        return timer

    def finished(self, timer_id: str) -> str:
        """Forget the timer; returns the words to say."""
        with self._lock:
            timer = self._timers.pop(timer_id, None)
        log.info("timer %s finished", timer_id)
        name = timer.name if timer is not None else ""
        return f"{name}，{FINISHED_WORDS}" if name else FINISHED_WORDS

    def remaining_s(self, timer_id: str) -> float | None:
        with self._lock:
            timer = self._timers.get(timer_id)
            return None if timer is None else timer.remaining_s(self.clock.now())

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._timers)
