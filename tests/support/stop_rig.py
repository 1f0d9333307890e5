"""The satellite core hearing the stop word inline (no loop: every microphone frame heard and acted on
at once, in audio time), with a reply that plays until it is cleared: what tests/test_stop_word.py and
bench/stop_word.py drive with the real portable models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rkvoice.audio.players import Player
from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.vad import Segment
from rkvoice.hear.wake import AsrMatchWake, WakeHit
from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.mic import SatelliteMic
from rkvoice.satellite.playback import Playback, Stream
from rkvoice.satellite.state import RATE
from rkvoice.satellite.stop_word import StopWord, StopWordEngine
from tests.support.clock import FakeClock

FRAME = 512


class Port:
    """The peer: nothing sent; the streams played kept."""

    def __init__(self) -> None:
        self.streams: list[Stream] = []

    def ask(self, run: object) -> None: ...

    def audio(self, run: object, samples: np.ndarray, at_s: float) -> None: ...

    def stop_audio(self, run: object) -> None: ...

    def played(self, stream: Stream) -> None:
        self.streams.append(stream)


class Link:
    def __init__(self, core: SatelliteCore) -> None:
        self.core = core


class CountingStopEngine(StopWordEngine):
    """The stop word's engine, counting the frames it was given and keeping its hits."""

    def __init__(self, cfg: Config, asr: AsrEngine) -> None:
        super().__init__(cfg, asr)
        self.frames = 0
        self.hits: list[WakeHit] = []
        self.primed = 0
        """Primed looks taken."""

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        self.frames += 1
        hit = super().accept(frame)
        if hit is not None:
            self.hits.append(hit)
        return hit


    def _primed_stop(self, seg: Segment, plain: str) -> tuple[str, Any]:
        self.primed += 1
        return super()._primed_stop(seg, plain)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


def word_end_s(speech: np.ndarray) -> float:
    """The end of the last 10 ms of ``speech`` within 35 dB of its loudest 10 ms (as bench/wake_latency)."""
    hop = RATE // 100
    levels = np.array([np.sqrt(np.mean(np.square(speech[i : i + hop]))) for i in range(0, len(speech) - hop + 1, hop)])
    loud = np.nonzero(levels >= levels.max() * 10 ** (-35 / 20))[0]
    return float((loud[-1] + 1) * hop / RATE)


class StopRig:
    """The core on ``asr`` (loaded) with the real wake engine and the stop word, playing on ``player``
    (default: a null player that takes everything at once); ``stops`` holds the audio time of each stop
    (the end of the frame it was decided at), and each stop also calls ``also_on_stop``'s functions (the
    link's part: a media player's ``stop``)."""

    def __init__(self, cfg: Config, asr: AsrEngine, player: Player | None = None) -> None:
        clock = FakeClock()
        self.playback = Playback(player or NullPlayer(cfg, clock), None, clock=clock)
        self.playback.start()
        self.core = SatelliteCore(Port(), self.playback, clock)
        self.core.run_satellite()
        wake = AsrMatchWake(cfg, asr)
        wake.load()
        self.engine = CountingStopEngine(cfg, asr)
        self.engine.load()
        self.mic = SatelliteMic(wake, Link(self.core), self.playback, stop=StopWord(self.engine))
        self.stops: list[float] = []
        self.also_on_stop: list[Callable[[], None]] = []
        self.core.on_stop = self._stopped

    def _stopped(self) -> None:
        self.stops.append(self.mic.now_s)
        for fn in self.also_on_stop:
            fn()

    def play_reply(self, seconds: float = 30.0) -> Stream:
        """A reply HA streams (its end not come yet): it plays until cleared."""
        self.core.answering("好的，我来讲一个很长的故事")
        stream = self.core.stream_start(16000, 2, 1)
        assert stream is not None
        self.playback.chunk(stream, np.zeros(int(seconds * 16000), "<i2").tobytes())
        return stream

    def hear(self, audio: np.ndarray) -> float:
        """``audio`` as microphone frames; the audio time it began at."""
        at = self.mic.now_s
        for i in range(0, len(audio), FRAME):
            self.mic.accept(audio[i : i + FRAME])
        return at

    def close(self) -> None:
        self.playback.close()
