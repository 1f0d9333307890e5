"""The satellite's ``--satellite URI --file rec.wav [--out reply.wav]`` mode: a recording played as the
microphone in real time, Home Assistant's reply played (and written), the run returned."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.sources import FRAME_SAMPLES, SAMPLE_RATE, WavFileSource
from rkvoice.stages import Hear, Speak

from .link import Run
from .run import Satellite, board_vad

PIPELINE_WAIT_S = 30.0
"""How long after Home Assistant connected the satellite waits for its pipeline to run."""
REPLY_WAIT_S = 60.0
"""How long after the request was heard the satellite waits for the reply to play."""


class RealtimeWav:
    """A recording played as the microphone: frames at real-time pace on ``clock``, then silence until
    closed (a microphone stays open while HA listens)."""

    sample_rate = SAMPLE_RATE

    def __init__(self, path: str | Path, clock: Clock | None = None) -> None:
        self.samples = WavFileSource(path).samples
        self.clock = clock or MonotonicClock()
        self._closed = threading.Event()
        self.ended_at: float | None = None
        """Clock time the recording's last frame was delivered."""

    def frames(self) -> Iterator[np.ndarray]:
        t0, n = self.clock.now(), 0
        silence = np.zeros(FRAME_SAMPLES, np.float32)
        while not self._closed.is_set():
            frame = self.samples[n : n + FRAME_SAMPLES] if n < len(self.samples) else silence
            n += FRAME_SAMPLES
            due = t0 + n / SAMPLE_RATE
            if not self.clock.pause(due - self.clock.now(), self._closed):
                return
            if n >= len(self.samples) and self.ended_at is None:
                self.ended_at = self.clock.now()
            yield frame

    def close(self) -> None:
        self._closed.set()


def file_player(cfg: Config, out: str | None) -> Callable[[Config], Any]:
    """``--file``'s player: a real-time null sink, with ``--out`` also a WAV of everything played."""
    from rkvoice.audio.sinks import NullPlayer, TeePlayer, WavPlayer

    def make(c: Config) -> Any:
        player: Any = NullPlayer(c) if out is None else TeePlayer(NullPlayer(c), WavPlayer(c, path=out))
        player.open()
        return player

    return make


def serve_file(cfg: Config, uri: str, wav: str, out: str | None, pipeline_wait_s: float = PIPELINE_WAIT_S,
               ready: Callable[[Satellite], None] | None = None, stages: tuple[Hear, Speak] | None = None) -> Run:
    """``--satellite URI --file WAV``: wait for HA, play ``wav`` as the microphone in real time, return the
    run once HA's reply has played (and ``played`` was sent). Raises a one-line RkvoiceError when HA never
    ran the pipeline within ``pipeline_wait_s`` of connecting, failed it, or sent no reply."""
    source = RealtimeWav(wav)  # a bad file fails before anything loads
    own = stages is None
    hear, speak = stages or (Hear(cfg), Speak(cfg, player=file_player(cfg, out), cue=False))
    if own:
        hear.load()
        speak.load()
    runs: list[Run] = []
    quiet = replace(cfg, satellite=replace(cfg.satellite, sounds=""))  # the file gets the reply alone (no cue either)
    sat = Satellite(quiet, hear, speak, uri=uri, on_run=runs.append, segmenter=board_vad(cfg, hear.heard) if own else None)
    ok = False
    try:
        sat.start()
        if ready is not None:
            ready(sat)
        sat.link.running.wait()
        mic = threading.Thread(target=sat.run, args=(source, False), name="rkvoice-satellite-mic", daemon=True)
        mic.start()
        run = _wait_for_reply(sat, runs, source, pipeline_wait_s)
        ok = True
        return run
    finally:
        sat.close()
        if own:
            if not ok and speak.player is not None and hasattr(speak.player, "abort"):
                speak.player.abort()
            speak.close()
            hear.close()


def _wait_for_reply(sat: Satellite, runs: list[Run], source: RealtimeWav, wait_s: float) -> Run:
    t0 = time.monotonic()
    while not any(r.transcribing for r in runs):
        if time.monotonic() - t0 > wait_s:
            heard = "no wake phrase was heard in the recording" if not sat.mic.wakes else "it never transcribed"
            raise RkvoiceError(Stage.WYOMING, "no-pipeline", f"satellite: Home Assistant did not run its pipeline "
                               f"within {wait_s:.0f} s ({heard}); check the recording and HA's assistant settings")
        time.sleep(0.05)
    run = next(r for r in runs if r.transcribing)
    if not run.over.wait(REPLY_WAIT_S):
        raise RkvoiceError(Stage.WYOMING, "no-transcript", "satellite: Home Assistant sent no transcript")
    if run.error is not None:
        raise RkvoiceError(Stage.WYOMING, "pipeline-error", f"satellite: Home Assistant's pipeline failed: {run.error}")
    t1 = time.monotonic()
    while run.reply is None or not run.reply.ended.is_set():
        if time.monotonic() - t1 > REPLY_WAIT_S:
            raise RkvoiceError(Stage.WYOMING, "no-reply", f"satellite: Home Assistant heard {run.transcript!r} but "
                               f"sent no reply audio within {REPLY_WAIT_S:.0f} s (does its pipeline have a TTS?)")
        time.sleep(0.05)
    source.close()
    time.sleep(0.2)  # ``played`` leaves through the writer task
    return run
