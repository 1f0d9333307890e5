"""A microphone stand-in for tests and benches: samples or a WAV fed at real-time pace on a clock."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from bench.fake_clock import SleepingClock
from rkvoice.clock import Clock
from rkvoice.hear.sources import WavFileSource

FRAME = 512
RATE = 16000


def paced(
    frames: Iterable[np.ndarray], clock: Clock, start: float, frame_s: float, closed: threading.Event
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
    """Feeds samples (or a WAV) at real-time pace on ``clock``: a microphone stand-in (tests, benches).

    With a FakeClock the pacing costs no wall time. ``tail_s`` of silence follows the audio so the
    last request can end.
    """

    def __init__(
        self,
        audio: np.ndarray | str | Path,
        clock: Clock | None = None,
        tail_s: float = 1.0,
    ) -> None:
        super().__init__(audio)
        self.samples = np.concatenate([self.samples, np.zeros(int(tail_s * RATE), dtype=np.float32)])
        self.clock = clock or SleepingClock()

    def frames(self) -> Iterator[np.ndarray]:
        yield from paced(super().frames(), self.clock, self.clock.now(), FRAME / RATE, self._closed)


