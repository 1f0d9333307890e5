"""The satellite's own sounds (``satellite.sounds``), each of which can be off:

- ``wake``: the wake acknowledgement (``hear.ack``: a chime or 我在) when a request begins;
- ``thinking``: a brief soft blip (80 ms) when the board has ended the request and waits for Home
  Assistant's answer; a reply that begins while it still sounds cuts it (``thinking_sounds``), so the
  answer never waits for it;
- ``timer``: two rising beeps, again and again, after a finished timer's words (rkvoice.satellite.timers);
  off, the words are said once and the timer is over;
- ``error``: two descending notes (300 ms) when a run fails: Home Assistant's pipeline error, no event or
  no transcript in time.

All are generated here at the player's rate: short, soft, and with fades so they never click.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from rkvoice.clock import Clock, MonotonicClock

from .playback import Playback

log = logging.getLogger(__name__)


class Sound(enum.StrEnum):
    WAKE = "wake"
    THINKING = "thinking"
    TIMER = "timer"
    ERROR = "error"


FADE_S = 0.008
"""Fade in and out of every note (no click at either end)."""
NONE = np.zeros(0, np.float32)
ALL = tuple(Sound)


def note(hz: float, seconds: float, rate: int, level: float) -> np.ndarray:
    """A sine of ``seconds`` at ``level`` with linear fades of ``FADE_S`` (shorter for a very short note)."""
    t = np.arange(int(seconds * rate)) / rate
    fade_s = min(FADE_S, seconds / 4)
    envelope = np.minimum(1.0, np.minimum(t, t[::-1]) / fade_s) if len(t) else t
    return (level * envelope * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def silence(seconds: float, rate: int) -> np.ndarray:
    return np.zeros(int(seconds * rate), np.float32)


def thinking_sound(rate: int) -> np.ndarray:
    """80 ms at 660 Hz under a raised-cosine envelope, quiet: "heard, now thinking"."""
    t = np.arange(int(0.08 * rate)) / rate
    envelope = 0.5 - 0.5 * np.cos(2 * np.pi * t / (len(t) / rate))
    return (0.12 * envelope * np.sin(2 * np.pi * 660.0 * t)).astype(np.float32)


def error_sound(rate: int) -> np.ndarray:
    """Two descending notes, 587 Hz then 440 Hz, 300 ms in all: "that did not work"."""
    return np.concatenate([note(587.3, 0.13, rate, 0.25), silence(0.03, rate), note(440.0, 0.14, rate, 0.25)])


def timer_sound(rate: int) -> np.ndarray:
    """The timer sound at ``rate`` (float32): two short rising beeps."""
    beep = np.arange(int(0.15 * rate)) / rate
    fade = np.minimum(1.0, np.minimum(beep, beep[::-1]) / 0.01)
    gap = np.zeros(int(0.08 * rate))
    parts = [0.35 * fade * np.sin(2 * np.pi * hz * beep) for hz in (880.0, 1320.0)]
    return np.concatenate([parts[0], gap, parts[1]]).astype(np.float32)


@dataclass
class Blip:
    """One thinking sound queued: when (clock time), and when it was handed to the player."""

    at: float
    out: float | None = None


class DeviceSounds:
    """The sounds named in ``on`` (``satellite.sounds``; default all) on ``playback``, rendered once at its
    player's rate. Every method but ``thinking_sounds`` runs on the core's loop."""

    def __init__(self, playback: Playback, clock: Clock | None = None, on: Iterable[str] = ALL) -> None:
        self.playback = playback
        self.clock = clock or MonotonicClock()
        self.on = frozenset(Sound(name) for name in on)
        rate = playback.player.rate
        self.thinking = thinking_sound(rate) if Sound.THINKING in self.on else NONE
        self.error = error_sound(rate) if Sound.ERROR in self.on else NONE
        self.timer = timer_sound(rate) if Sound.TIMER in self.on else NONE
        """The finished timer's ring (empty: its words once, no ring)."""
        self._blip: Blip | None = None
        self._lock = threading.Lock()

    def wake(self, cue: np.ndarray) -> None:
        """A request begins: ``cue`` (``hear.ack``'s, at the player's rate), unless the wake sound is off."""
        if Sound.WAKE in self.on:
            self.playback.cue(cue)

    def think(self) -> None:
        """The request's audio ended: the thinking sound, after what is queued."""
        if not len(self.thinking):
            return
        blip = Blip(self.clock.now())
        with self._lock:
            self._blip = blip
        self.playback.cue(self.thinking, done=lambda: self._handed(blip))

    def _handed(self, blip: Blip) -> None:  # on the playing thread
        with self._lock:
            blip.out = self.clock.now()

    def thinking_sounds(self) -> bool:
        """Whether the last thinking sound may still sound: queued and not yet with the player, or handed
        to it less than its length ago (all of it may wait in the device's buffer)."""
        with self._lock:
            blip = self._blip
            if blip is None:
                return False
            if blip.out is not None and self.clock.now() >= blip.out + len(self.thinking) / self.playback.player.rate:
                self._blip = None
                return False
            return True

    def failed(self) -> None:
        """A run failed: the error sound, after what is queued."""
        self.playback.cue(self.error)
