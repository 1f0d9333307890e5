"""Microphone stand-ins for tests and benches: samples or a WAV fed at real-time pace on a clock
(``RealtimeSource``), or frame by frame on a ManualClock that the microphone moves once the threads
under test are still (``SteppedSource``); ``paced`` is the pacing both build on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from rkvoice.hear.sources import WavFileSource
from tests.support.clock import ManualClock, SleepingClock, SleepyClock

FRAME = 512
RATE = 16000


def paced(
    frames: Iterable[np.ndarray], clock: SleepyClock, start: float, frame_s: float, closed: threading.Event
) -> Iterator[np.ndarray]:
    """Yield frame ``i`` at ``start + (i + 1) * frame_s`` on ``clock`` (a frame exists once all its
    samples were "heard"), like a microphone; stop as soon as ``closed`` is set."""
    for i, frame in enumerate(frames, 1):
        wait = start + i * frame_s - clock.now()
        if wait > 0:
            clock.sleep(wait)
        if closed.is_set():
            return
        yield frame


class RealtimeSource(WavFileSource):
    """Feeds samples (or a WAV) at real-time pace on ``clock``: a microphone stand-in.

    With a FakeClock the pacing costs no wall time. ``tail_s`` of silence follows the audio so the
    last request can end.
    """

    def __init__(self, audio: np.ndarray | str | Path, clock: SleepyClock | None = None, tail_s: float = 1.0) -> None:
        super().__init__(audio)
        self.samples = np.concatenate([self.samples, np.zeros(int(tail_s * RATE), dtype=np.float32)])
        self.clock: SleepyClock = clock or SleepingClock()

    def frames(self) -> Iterator[np.ndarray]:
        yield from paced(super().frames(), self.clock, self.clock.now(), FRAME / RATE, self._closed)


class SteppedSource:
    """A microphone on a ManualClock that it alone moves, one frame at a time: frame ``i`` (``frame(tick)``,
    its first sample at ``tick = tick0 + i * FRAME``; None ends the source) is made once ``settle()`` returns
    (the threads under test are still), and handed over once the clock has moved to its end and they are
    still again. However slowly they run, they hear the same audio at the same clock time on every run.

    The frames are ``samples`` from the first tick on, then silence until ``until(tick)`` holds (a
    microphone hears on while the last answer plays out); subclasses make their own ``frame``."""

    sample_rate = RATE

    def __init__(self, clock: ManualClock, settle: Callable[[], None], samples: np.ndarray | None = None,
                 until: Callable[[int], bool] = lambda _tick: True) -> None:
        self.clock = clock
        self.settle = settle
        self.samples = np.zeros(0, np.float32) if samples is None else np.asarray(samples, np.float32)
        self.until = until
        self.tick = self.tick0 = 0
        self.delivered = 0
        """Frames handed over."""
        self.closed = threading.Event()

    def frame(self, tick: int) -> np.ndarray | None:
        lo = tick - self.tick0
        if lo >= len(self.samples) and self.until(tick):
            return None
        out = np.zeros(FRAME, np.float32)
        part = self.samples[lo : lo + FRAME]
        out[: len(part)] = part
        return out

    def frames(self) -> Iterator[np.ndarray]:
        tick0 = self.tick0 = round(self.clock.now() * RATE)
        i = 0
        while not self.closed.is_set():
            self.delivered = i
            self.settle()
            t = self.tick = tick0 + i * FRAME
            frame = self.frame(t)
            if frame is None:
                return
            self.clock.advance_to((t + FRAME) / RATE)
            self.settle()  # what the clock's move set going (a turn's audio played out, its end) comes first
            i += 1
            yield frame

    def close(self) -> None:
        self.closed.set()
