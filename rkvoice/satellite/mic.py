"""The satellite's microphone side: the thread that reads the microphone and posts its frames to the
core (rkvoice.satellite.core), and ``Hearing``: what the core's hear thread does with each frame.

Frames (16 kHz float32, already echo-cancelled) go to the configured wake engine (the daemon's own,
rkvoice.stages.Hear). On a wake the core asks the peer's pipeline and the audio heard since the wake
phrase ended is sent first (a request may start while the wake is being decided); then every frame,
until the peer has heard the request (``transcript``), failed it, paused or left. With a
``segmenter`` (the board's end of turn, rkvoice.satellite.run.board_vad: the local loop's decision,
``hear.endpoint``) the satellite also ends the request itself: ``audio-stop`` once it has decided the
speech after the wake is over, so HA's speech-to-text starts
without waiting for HA's own VAD (bench/satellite_latency.py compares the two). A request said in the
same breath as the phrase ("小智小智，打开客厅灯") is complete when the wake is decided: its segment is
sent whole and ``audio-stop`` ends it. A request never sends audio from before the wake phrase's
segment, nor more than ``max_request_s`` of it; when the segments do not line up with the wake, it
starts at the phrase's end. A wake while a reply plays is a barge-in: the reply is cut and a new run
starts. All in audio time (sample counts): the same loop runs on the live microphone and on a
recording.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager

import numpy as np

from rkvoice.hear.sources import AudioSource
from rkvoice.hear.vad import Segment, Segmenter
from rkvoice.hear.wake import WakeEngine, WakeHit

from .core import ANSWER_WAIT_S, MAX_REQUEST_S, SatelliteCore
from .playback import Playback
from .sounds import DeviceSounds
from .state import RATE, Heard, Job, Run
from .stop_word import StopWord

log = logging.getLogger(__name__)

KEEP_S = 30.0
"""Microphone audio kept behind the newest frame (a wake decided late still finds the audio since its end)."""
KEEP_SEGMENTS = 4
"""Closed segments remembered (the wake's is the one that ends where the hit ends)."""
ALIGN_S = 0.05
"""How near a segment's end must be to the hit's end to be the wake phrase's segment."""
KEEP_WAKES = 64
"""Wakes remembered (a daemon runs for weeks)."""
DRAIN_S = 5.0
"""When the source ends: longest wait for the frames posted before to be heard."""


class Hearing:
    """Audio-time hearing, on one thread at a time: the wake engine over the frames, the audio kept
    behind them, the closed segments (the wake's), and the board's VAD on a request's audio."""

    def __init__(self, wake: WakeEngine, segmenter: Segmenter | None, max_request_s: float,
                 stop: StopWord | None = None) -> None:
        self.wake = wake
        self.segmenter = segmenter
        self.stop = stop
        """The stop word, heard while the job says something plays."""
        self.max_request_s = max_request_s
        self.samples = 0
        self.wakes: list[WakeHit] = []
        self._kept: deque[tuple[int, np.ndarray]] = deque()
        self._segments: deque[Segment] = deque(maxlen=KEEP_SEGMENTS)
        self.attach()

    def attach(self) -> None:
        """Take the wake engine's segments (asr-match: the segment a one-breath request was said in); again
        after another hearer of the same engine (the daemon's local loop) had them."""
        if hasattr(self.wake, "on_segment"):
            self.wake.on_segment = self._segments.append

    def hear(self, frame: np.ndarray, job: Job) -> Heard:
        start = self.samples
        self.samples += len(frame)
        self._kept.append((start, frame))
        while self._kept and self._kept[0][0] < self.samples - KEEP_S * RATE:
            self._kept.popleft()
        if job.restart_wake:
            self.wake.restart(start)
        if not job.wake:
            end_s = None
            if job.vad_head is not None and self.segmenter is not None:
                self.segmenter.restart(start - len(job.vad_head))
                end_s = self._speech_end(job.vad_head)
            return Heard(start, frame, speech_end_s=end_s if end_s is not None else self._speech_end(frame))
        if self.stop is not None and (stop := self.stop.hear(frame, start, job.stop_word)) is not None:
            self.wake.restart(self.samples)  # the stop phrase is no wake: the wake engine listens on after it
            return Heard(start, frame, stop=stop)
        hit = self.wake.accept(frame)
        if hit is None:
            return Heard(start, frame)
        self.wakes.append(hit)
        del self.wakes[:-KEEP_WAKES]
        head, one_breath = self._head(hit)
        return Heard(start, frame, hit, head, one_breath)

    def _speech_end(self, audio: np.ndarray) -> float | None:
        if self.segmenter is None or not len(audio):
            return None
        segments = self.segmenter.accept(audio)
        return segments[0].end_s if segments else None

    def _head(self, hit: WakeHit) -> tuple[np.ndarray, bool]:
        """The audio a new request starts with, and whether it is the whole request (said in one breath
        with the phrase: ``audio-stop`` follows at once). Never audio from before the wake phrase's
        segment, and at most ``max_request_s`` of it: a one-breath request sends its segment (the phrase
        and the request); a phrase alone, or a request whose segment is not found (the segments do not
        line up with the hit), starts at the phrase's end."""
        cap = round(self.max_request_s * RATE)
        if hit.request:
            seg = next((s for s in reversed(self._segments) if abs(s.end_s - hit.end_s) < ALIGN_S), None)
            if seg is not None:
                return seg.samples[:cap].astype(np.float32, copy=False), True
            log.warning("satellite: the segment of the request said with the wake phrase (%r) was not found; "
                        "only the audio after the phrase is sent", hit.request)
        return self._since(max(hit.end_s, self.samples / RATE - self.max_request_s))[:cap], bool(hit.request)

    def _since(self, t_s: float) -> np.ndarray:
        """Microphone audio kept from stream time ``t_s`` on."""
        at = max(0, round(t_s * RATE))
        parts = [frame[max(0, at - start):] for start, frame in self._kept if start + len(frame) > at]
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


class SatelliteMic:
    """The microphone side of ``link``'s core: ``run_source`` reads an AudioSource until it ends or
    ``interrupt()``, posting each frame to the core; ``accept(frame)`` hears one frame on the calling
    thread (a core without a loop: tests). ``on_run(run)`` is told of each run started (tests, the
    CLI's --file mode)."""

    def __init__(self, wake: WakeEngine, link: object, playback: Playback,
                 on_run: Callable[[Run], None] | None = None, max_request_s: float = MAX_REQUEST_S,
                 answer_wait_s: float = ANSWER_WAIT_S, segmenter: Segmenter | None = None,
                 cue: np.ndarray | None = None,
                 busy: Callable[[str], AbstractContextManager[None]] = lambda _what: contextlib.nullcontext(),
                 stop: StopWord | None = None, sounds: Iterable[str] | None = None) -> None:
        core = getattr(link, "core", None)
        assert isinstance(core, SatelliteCore), "a link over a SatelliteCore"
        self.core = core
        self.hearing = Hearing(wake, segmenter, max_request_s, stop)
        self.busy = busy
        """Marks waiting for one frame (the daemon's watchdog: a microphone that delivers nothing is stuck)."""
        core.feed.hearing = self.hearing
        core.on_run = on_run
        core.max_request_s, core.answer_wait_s = max_request_s, answer_wait_s
        core.cue = cue if cue is not None else np.zeros(0, np.float32)
        """Played on a wake the peer will hear (``hear.ack``, at the player's rate)."""
        if sounds is not None:  # the device's own sounds that are on (``satellite.sounds``); None: all
            core.sounds = DeviceSounds(playback, core.clock, sounds)
        core.feed.busy = busy
        self.wake = wake
        self._stop = threading.Event()
        self._source: AudioSource | None = None

    @property
    def segmenter(self) -> Segmenter | None:
        """The board's end-of-request VAD (None: the peer's VAD alone ends requests)."""
        return self.hearing.segmenter

    @segmenter.setter
    def segmenter(self, value: Segmenter | None) -> None:
        self.hearing.segmenter = value

    @property
    def run(self) -> Run | None:
        return self.core.run

    @property
    def wakes(self) -> list[WakeHit]:
        return self.hearing.wakes

    @property
    def now_s(self) -> float:
        return self.hearing.samples / RATE

    def accept(self, frame: np.ndarray) -> None:
        """One microphone frame, heard and acted on here (the core has no loop)."""
        self.core.on_heard(self.hearing.hear(frame, self.core.job()))

    def interrupt(self) -> None:
        """From any thread: ``run_source`` returns (its source is closed, so a blocked read ends)."""
        self._stop.set()
        source = self._source
        if source is not None:
            source.close()

    def resume(self) -> None:
        """After ``interrupt()``: the next ``run_source`` listens again (an interrupt is never lost to a
        ``run_source`` about to start)."""
        self._stop.clear()

    def run_source(self, source: AudioSource) -> None:
        self._source = source
        if self._stop.is_set():
            source.close()
            return
        self.hearing.attach()
        self.core.post(self.core.listen_afresh)
        frames = self._frames(source)
        posted = False
        try:
            while True:
                with self.busy("hear"):
                    frame = next(frames, None)
                if frame is None:
                    break
                if not self.core.feed.post_frame(frame):
                    self.accept(frame)
                else:
                    posted = True
        finally:
            source.close()
            if posted and self.core.feed.post_frame(None):
                self.core.feed.wait_drained(DRAIN_S)
            else:
                self.core.post(self.core.source_ended)

    def _frames(self, source: AudioSource) -> Iterator[np.ndarray]:
        for frame in source.frames():
            if self._stop.is_set():
                return
            yield frame
