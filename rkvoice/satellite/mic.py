"""The satellite's microphone side: wake on the board, then the request's audio to Home Assistant.

Frames (16 kHz float32, already echo-cancelled) go to the configured wake engine (the daemon's own,
rkvoice.stages.Hear). On a wake, ``SatelliteLink.begin_run`` asks HA's pipeline and the audio heard
since the wake phrase ended is sent first (a request may start while the wake is being decided);
then every frame, until HA has heard the request (``transcript``), failed it, paused or left. With
a ``segmenter`` (the board's VAD, ``hear.trailing_silence_ms``) the satellite also ends the request
itself: ``audio-stop`` once the VAD closes the speech after the wake, so HA's speech-to-text starts
without waiting for HA's own VAD (bench/satellite_latency.py compares the two). A request said in the same breath as the phrase ("小智小智，打开客厅灯") is complete when the wake is
decided: its segment is sent whole and ``audio-stop`` ends it. A request never sends audio from before
the wake phrase's segment, nor more than ``max_request_s`` of it; when the segments do not line up
with the wake, it starts at the phrase's end. A wake while HA's reply plays is a
barge-in: the reply is cut and a new run starts. All in audio time (sample counts): the same loop
runs on the live microphone and on a recording.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import numpy as np

from rkvoice.hear.sources import AudioSource
from rkvoice.hear.vad import Segment, Segmenter
from rkvoice.hear.wake import WakeEngine, WakeHit

from .link import RATE, Run, SatelliteLink
from .playback import Playback

log = logging.getLogger(__name__)

KEEP_S = 30.0
"""Microphone audio kept behind the newest frame (a wake decided late still finds the audio since its end)."""
KEEP_SEGMENTS = 4
"""Closed segments remembered (the wake's is the one that ends where the hit ends)."""
ALIGN_S = 0.05
"""How near a segment's end must be to the hit's end to be the wake phrase's segment."""
MAX_REQUEST_S = 15.0
"""Longest a request is streamed before the satellite sends ``audio-stop`` itself (HA's VAD normally
ends it first)."""
KEEP_WAKES = 64
"""Wakes remembered (a daemon runs for weeks)."""
ANSWER_WAIT_S = 15.0
"""After ``audio-stop``: how long the satellite waits for HA's transcript before it listens for the wake again."""


class SatelliteMic:
    """Runs over an AudioSource until it ends or ``interrupt()``; ``on_run(run)`` is told of each run
    started (tests, the CLI's --file mode)."""

    def __init__(self, wake: WakeEngine, link: SatelliteLink, playback: Playback,
                 on_run: Callable[[Run], None] | None = None, max_request_s: float = MAX_REQUEST_S,
                 answer_wait_s: float = ANSWER_WAIT_S, segmenter: Segmenter | None = None,
                 cue: np.ndarray | None = None,
                 busy: Callable[[str], AbstractContextManager[None]] = lambda _what: contextlib.nullcontext()) -> None:
        self.wake = wake
        self.busy = busy
        """Marks hearing one frame, its wait included (the daemon's watchdog: a microphone that delivers
        nothing, or a wake engine that hangs, is stuck)."""
        self.cue = cue if cue is not None else np.zeros(0, np.float32)
        """Played on a wake HA will hear (``hear.ack``, at the player's rate)."""
        self.segmenter = segmenter
        self.link = link
        self.playback = playback
        self.on_run = on_run
        self.max_request_s = max_request_s
        self.answer_wait_s = answer_wait_s
        self.samples = 0
        self.run: Run | None = None
        self._run_from = 0  # sample where the current run's streaming began
        self._kept: deque[tuple[int, np.ndarray]] = deque()
        self._segments: deque[Segment] = deque(maxlen=KEEP_SEGMENTS)
        self._stop = threading.Event()
        self._source: AudioSource | None = None
        self.wakes: list[WakeHit] = []
        if hasattr(wake, "on_segment"):  # asr-match: the segment a one-breath request was said in
            wake.on_segment = self._segment_closed

    @property
    def now_s(self) -> float:
        return self.samples / RATE

    def interrupt(self) -> None:
        """From any thread: ``run_source`` returns (its source is closed, so a blocked read ends)."""
        self._stop.set()
        source = self._source
        if source is not None:
            source.close()

    def run_source(self, source: AudioSource) -> None:
        self._stop.clear()
        self._source = source
        self.wake.restart(self.samples)
        frames = self._frames(source)
        try:
            while True:
                with self.busy("hear"):
                    frame = next(frames, None)
                    if frame is None:
                        break
                    self.accept(frame)
        finally:
            source.close()
            if self.run is not None:
                self.link.stop_audio(self.run)

    def _frames(self, source: AudioSource) -> Iterator[np.ndarray]:
        for frame in source.frames():
            if self._stop.is_set():
                return
            yield frame

    def accept(self, frame: np.ndarray) -> None:
        """One microphone frame."""
        start = self.samples
        self.samples += len(frame)
        self._kept.append((start, frame))
        while self._kept and self._kept[0][0] < self.samples - KEEP_S * RATE:
            self._kept.popleft()
        if self.run is not None:
            self._stream(frame)
            return
        hit = self.wake.accept(frame)
        if hit is not None:
            self._woke(hit)

    def _segment_closed(self, seg: Segment) -> None:
        self._segments.append(seg)

    def _stream(self, frame: np.ndarray) -> None:
        run = self.run
        assert run is not None
        streamed_s = (self.samples - self._run_from) / RATE
        if run.over.is_set():
            log.info("satellite: run %d over (%s) after %.1f s of audio", run.id, run.ended, run.sent_s)
            self._listen()
        elif not run.audio_stopped and streamed_s > self.max_request_s:
            log.info("satellite: run %d: %.0f s of request audio; audio-stop", run.id, self.max_request_s)
            self.link.stop_audio(run)
        elif run.audio_stopped and streamed_s > self.max_request_s + self.answer_wait_s:
            log.warning("satellite: run %d: Home Assistant sent no transcript within %.0f s of the request's end; "
                        "listening for the wake phrase again", run.id, self.answer_wait_s)
            run.finish("no transcript")
            self._listen()
        else:
            self.link.audio(run, frame)
            self._heard(run, frame)

    def _heard(self, run: Run, audio: np.ndarray) -> None:
        """The board's VAD on the request's audio: ``audio-stop`` when it closes the speech."""
        if self.segmenter is None or run.audio_stopped:
            return
        segments = self.segmenter.accept(audio)
        if segments:
            log.info("satellite: run %d: end of speech at %.2f s (the board's VAD); audio-stop", run.id,
                     segments[0].end_s)
            self.link.stop_audio(run)

    def _listen(self) -> None:
        if self.run is not None and not self.run.audio_stopped:
            self.link.stop_audio(self.run)
        self.run = None
        self.wake.restart(self.samples)

    def _woke(self, hit: WakeHit) -> None:
        self.wakes.append(hit)
        del self.wakes[:-KEEP_WAKES]
        if self.playback.playing:
            self.playback.clear("barge-in")
        head, one_breath = self._head(hit)
        log.info("satellite: wake %r at %.2f s%s", hit.text, hit.at_s, f", request {hit.request!r}" if hit.request else "")
        run = self.link.begin_run(head)
        if run is None:
            self.wake.restart(self.samples)
            return
        self.run, self._run_from = run, self.samples
        self.playback.cue(self.cue)
        if one_breath:
            self.link.audio(run, np.zeros(RATE // 4, np.float32))  # a little silence: HA's VAD sees the end
            self.link.stop_audio(run)
        elif self.segmenter is not None:
            self.segmenter.restart(self.samples - len(head))
            self._heard(run, head)
        if self.on_run is not None:
            self.on_run(run)

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
        return self._since(max(hit.end_s, self.now_s - self.max_request_s))[:cap], bool(hit.request)

    def _since(self, t_s: float) -> np.ndarray:
        """Microphone audio kept from stream time ``t_s`` on."""
        at = max(0, round(t_s * RATE))
        parts = [frame[max(0, at - start):] for start, frame in self._kept if start + len(frame) > at]
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
