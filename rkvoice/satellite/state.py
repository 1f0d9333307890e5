"""The satellite core's records: its state, a pipeline run, what the hear thread is told to do with a
frame (``Job``) and what it heard (``Heard``), and the two interfaces the core meets (``Hearing`` on the
hear thread, ``SatellitePort`` for its protocol adapter)."""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .playback import Stream

RATE = 16000


class SatelliteState(enum.StrEnum):
    IDLE = "idle"
    """Listening for the wake phrase."""
    STREAMING = "streaming"
    """A request's audio goes to the peer."""
    AWAITING_REPLY = "awaiting the reply"
    """The request's audio is complete (``audio-stop``); the peer has not said what it heard yet (the
    wake engine listens again once it has, while the reply comes)."""
    RESPONDING = "responding"
    """The reply plays."""
    ANNOUNCING = "announcing"
    """Audio no run waits for plays (an announcement)."""
    RINGING = "ringing"
    """A finished timer is said."""
    MUTED = "muted"
    """The peer does not run the satellite (paused, or not connected): a wake is dropped."""


@dataclass
class Run:
    """One pipeline run the satellite asked for."""

    id: int
    started_at: float
    over: threading.Event = field(default_factory=threading.Event)
    """Set when the peer has heard the request (``transcript``), failed it (``error``), paused or left."""
    ended: str = ""
    """Why the streaming ended: transcript, error, paused, disconnected, replaced, no transcript."""
    transcript: str | None = None
    error: str | None = None
    transcribing: bool = False
    """The peer's pipeline started its speech-to-text (``transcribe`` came)."""
    audio_stopped: bool = False
    sent_s: float = 0.0
    """Seconds of audio sent."""
    speech_end_at: float | None = None
    """Clock time the peer's VAD said the speech ended (``voice-stopped``) or the satellite stopped the audio."""
    heard_at: float | None = None
    """Clock time the transcript came."""
    reply: Stream | None = None

    def finish(self, why: str) -> bool:
        """End the run (the first reason stays); False if it was over already."""
        if self.over.is_set():
            return False
        self.ended = why
        self.over.set()
        return True


@dataclass(frozen=True)
class Job:
    """What the hear thread does with the next frame (decided on the loop)."""

    wake: bool
    """Listen for the wake phrase (else the frame is the request's audio)."""
    restart_wake: bool = False
    """The wake engine starts afresh at this frame."""
    vad_head: np.ndarray | None = None
    """A request began: the board's VAD starts at its head (then hears this frame)."""
    stop_word: bool = False
    """Something plays: listen for a stop phrase too (rkvoice.satellite.stop_word)."""


@dataclass(frozen=True)
class Heard:
    """One frame heard."""

    start: int
    """Stream sample of the frame's first sample."""
    frame: np.ndarray
    hit: Any = None
    """The WakeHit decided at this frame."""
    head: np.ndarray | None = None
    """With a hit: the audio the request starts with."""
    one_breath: bool = False
    """With a hit: the head is the whole request."""
    speech_end_s: float | None = None
    """The board's VAD closed the request's speech (audio time of its end)."""
    stop: Any = None
    """The stop phrase's WakeHit decided at this frame."""

    @property
    def end(self) -> int:
        return self.start + len(self.frame)


class Hearing(Protocol):
    """What hears the frames on the hear thread (rkvoice.satellite.mic.Hearing)."""

    def hear(self, frame: np.ndarray, job: Job) -> Heard: ...


class SatellitePort(Protocol):
    """What the core asks of its protocol adapter (on the loop)."""

    def ask(self, run: Run) -> None:
        """The peer's pipeline for ``run`` (Wyoming: detection, run-pipeline asr -> tts, audio-start)."""

    def audio(self, run: Run, samples: np.ndarray, at_s: float) -> None:
        """Request audio (16 kHz float32) at ``at_s`` seconds into the run."""

    def stop_audio(self, run: Run) -> None:
        """The request's audio is complete."""

    def played(self, stream: Stream) -> None:
        """A stream of the peer's has played out (or was cut)."""
