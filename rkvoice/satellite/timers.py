"""The satellite's timers: Home Assistant runs them (its timer intents, for this device) and tells the
satellite with ``timer-started/-updated/-cancelled/-finished``; ``TimerTable`` mirrors them so the board
knows what runs and for how long. A finished one rings (``TimerRing``): the board says it aloud, then
the timer sound (rkvoice.satellite.sounds) plays again and again, ``RING_GAP_S`` apart, until the stop
word, a wake, or ``RING_MAX_S``. With the timer sound off (``satellite.sounds``) the words are said once
and the ring ends with them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rkvoice.clock import Clock, MonotonicClock

from .playback import Playback
from .sounds import timer_sound

log = logging.getLogger(__name__)

FINISHED_WORDS = "计时器时间到了"
"""What the board says when a timer finishes (with the timer's name in front when it has one)."""
RING_MAX_S = 15 * 60.0
"""A finished timer rings this long at most when nobody stops it."""
RING_GAP_S = 1.0
"""Silence between two rings."""
SOUND_WAIT_S = 90.0
"""Longest wait for one ring to be handed to the player (the words of a slow voice included)."""


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


@dataclass(eq=False)
class Ringing:
    """One finished timer ringing."""

    words: str
    since: float
    sound: np.ndarray
    """Played after the words and after each gap; empty: the words once, then the ring ends."""
    stopped: threading.Event = field(default_factory=threading.Event)
    pending: threading.Event = field(default_factory=threading.Event)
    """Set once the ring queued last was handed to the player (or by ``stop``)."""
    rings: int = 0
    thread: threading.Thread | None = None


class TimerRing:
    """A finished timer's ring on ``playback``: ``start(words, sound)`` says ``words``, then plays ``sound``
    (by default the timer sound; empty: none, the ring ends once the words are said) every ``gap_s`` (on a
    thread of its own) until ``stop(why)`` or ``max_s`` of ``clock``. A timer that finishes while one rings
    takes its place. ``on_change()`` is told (from either thread) when it starts
    or ends; ``ringing`` says which."""

    def __init__(self, playback: Playback, clock: Clock | None = None, on_change: Callable[[], None] | None = None,
                 max_s: float = RING_MAX_S, gap_s: float = RING_GAP_S) -> None:
        self.playback = playback
        self.clock = clock or MonotonicClock()
        self.on_change = on_change
        self.max_s = max_s
        self.gap_s = gap_s
        self.last: Ringing | None = None
        """The ring now or the one before (``rings``, its ``thread``)."""
        self._ring: Ringing | None = None
        self._lock = threading.Lock()

    @property
    def ringing(self) -> bool:
        with self._lock:
            return self._ring is not None

    def start(self, words: str, sound: np.ndarray | None = None) -> None:
        ring = Ringing(words, self.clock.now(), timer_sound(self.playback.player.rate) if sound is None else sound)
        ring.thread = threading.Thread(target=self._run, args=(ring,), name="rkvoice-timer-ring", daemon=True)
        with self._lock:
            old, self._ring, self.last = self._ring, ring, ring
            if old is not None:
                old.stopped.set()
                old.pending.set()
        log.info("timer: ringing (%r) until the stop word, a wake or %.0f min", words, self.max_s / 60)
        ring.thread.start()
        self._changed()

    def stop(self, why: str, only: Ringing | None = None) -> bool:
        """Stop ringing (``only``: if that ring is the one ringing); False if nothing was stopped."""
        with self._lock:
            ring = self._ring
            if ring is None or (only is not None and ring is not only):
                return False
            self._ring = None
            ring.stopped.set()
            ring.pending.set()
        log.info("timer: ringing stopped (%s) after %d ring(s)", why, ring.rings)
        self._changed()
        return True

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _run(self, ring: Ringing) -> None:
        # no sound: one block of silence after the words tells when they are said
        sound = ring.sound if len(ring.sound) else np.zeros(self.playback.block, np.float32)
        while self.clock.now() - ring.since < self.max_s:
            with self._lock:
                if ring.stopped.is_set():
                    return
                ring.pending = done = threading.Event()
            if ring.rings == 0:
                self.playback.say(ring.words)
            self.playback.cue(sound, done=done.set)
            ring.rings += 1
            if not self.clock.wait(done, SOUND_WAIT_S):
                log.warning("timer: the ring was not played within %.0f s; ringing on", SOUND_WAIT_S)
            if not len(ring.sound):
                self.stop("its words said (the timer sound is off)", only=ring)
                return
            if not self.clock.pause(self.gap_s, ring.stopped):
                return
        self.stop(f"{self.max_s / 60:g} min without a stop", only=ring)
