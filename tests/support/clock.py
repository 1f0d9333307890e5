"""Controlled clocks for tests and benches (the product runs on rkvoice.clock.MonotonicClock): ``FakeClock``
moves when a waiting thread sleeps, ``ManualClock`` only when its driver moves it, ``ScaledClock`` is real
time run faster, ``SleepingClock`` the real clock with a real ``sleep``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from rkvoice.clock import Clock, MonotonicClock


class SleepyClock(Clock, Protocol):
    """A clock a scripted engine or microphone can take time on (every clock here)."""

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of this clock pass (a FakeClock moves instead of waiting)."""


class SleepingClock(MonotonicClock):
    """The real clock, with the ``sleep`` a scripted engine takes real time with (the product never
    sleeps on its clock; FakeClock's ``sleep`` moves fake time instead)."""

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ScaledClock(MonotonicClock):
    """Real time running ``pace`` times faster (pace 1 = real time): a scripted microphone and a null
    player on it run a long soak in less wall time."""

    def __init__(self, pace: float = 1.0) -> None:
        if pace <= 0:
            raise ValueError(f"pace must be above 0, got {pace}")
        self.pace = pace

    def now(self) -> float:
        return time.monotonic() * self.pace

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.pace)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(None if timeout is None else max(0.0, timeout) / self.pace)

    def pause(self, seconds: float, interrupt: threading.Event) -> bool:
        return not interrupt.wait(max(0.0, seconds) / self.pace)


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it instead of waiting.

    Thread-safe: ``sleep`` from a worker thread advances the shared time, so a scripted
    engine that "takes 200 ms" costs no wall time in tests. ``blocked()`` lets a test move the
    clock only once the threads under test wait on it, so no real-time race decides an outcome.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._t = start
        self._cond = threading.Condition()
        self._waiting: dict[object, tuple[threading.Event, float | None]] = {}

    def now(self) -> float:
        with self._cond:
            return self._t

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._cond:
            self._t += seconds

    sleep = advance

    def pause(self, seconds: float, interrupt: threading.Event) -> bool:
        if interrupt.is_set():
            return False
        self.advance(max(0.0, seconds))
        return True

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Returns when ``event`` is set, or once the test has advanced the clock past the timeout.

        The fake time only moves when the test says so, so this checks it between short real waits
        (test clock only: the product's MonotonicClock waits on the event itself)."""
        token = object()
        with self._cond:
            deadline = None if timeout is None else self._t + timeout
            self._waiting[token] = (event, deadline)
            self._cond.notify_all()
        try:
            while not event.wait(0.002):
                if deadline is not None and self.now() >= deadline:
                    return event.is_set()
            return True
        finally:
            with self._cond:
                del self._waiting[token]
                self._cond.notify_all()

    def blocked(self, n: int = 1, timeout: float = 10.0, unless: Callable[[], bool] | None = None) -> bool:
        """Block (in real time) until at least ``n`` threads wait on this clock for an event not yet
        set and a time not yet reached: then only moving the clock can let them go on. False after
        ``timeout`` real seconds, or as soon as ``unless()`` holds (e.g. the thread under test ended)."""
        end = time.monotonic() + timeout
        with self._cond:
            while sum(not ev.is_set() and (d is None or d > self._t) for ev, d in self._waiting.values()) < n:
                if unless is not None and unless() or time.monotonic() >= end:
                    return False
                self._cond.wait(0.005)
            return True


class ManualClock:
    """A clock that only its driver moves (``advance_to``); ``sleep``, ``pause`` and ``wait`` block (in real
    time) until it has moved past their deadline or their event is set, so the threads under test take
    none of its time and a driver that moves it only once they are all still decides every outcome.

    ``blocked(name)``: whether a thread of that name waits on this clock for an event not yet set and a
    time not yet reached (only the driver or another thread can let it go on)."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = start
        self._cond = threading.Condition()
        self._waiting: dict[object, tuple[str, threading.Event | None, float | None]] = {}

    def now(self) -> float:
        with self._cond:
            return self._t

    def advance_to(self, t: float) -> None:
        with self._cond:
            if t < self._t:
                raise ValueError("a clock cannot go backwards")
            self._t = t
            self._cond.notify_all()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._block(None, seconds)

    def pause(self, seconds: float, interrupt: threading.Event) -> bool:
        return not self._block(interrupt, max(0.0, seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return self._block(event, timeout)

    def blocked(self, name: str) -> bool:
        with self._cond:
            return any(n == name and (ev is None or not ev.is_set()) and (d is None or d > self._t)
                       for n, ev, d in self._waiting.values())

    def _block(self, event: threading.Event | None, timeout: float | None) -> bool:
        """True once ``event`` is set, False once ``timeout`` of this clock has passed (event unset)."""
        token = object()
        with self._cond:
            deadline = None if timeout is None else self._t + timeout
            self._waiting[token] = (threading.current_thread().name, event, deadline)
        try:
            while True:
                if event is not None and event.is_set():
                    return True
                with self._cond:
                    if deadline is not None and self._t >= deadline:
                        return False
                    if event is None:
                        self._cond.wait()
                        continue
                event.wait(0.002)  # set by threads that do not notify this clock
        finally:
            with self._cond:
                del self._waiting[token]
