"""What the daemon hosts: the turn loop and the stages it is made of.

The supervisor (service.py) only knows ``TurnLoop``: load once, then ``run_once`` again
and again. ``StagedLoop`` (turn.py) is a TurnLoop built from three stages -- hear,
answer, speak -- each an object with ``load()`` and ``close()``; tests and the soak pass
scripted fakes, the product passes adapters over rkvoice.hear / rkvoice.answer /
rkvoice.speaker (product.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError


@dataclass(frozen=True)
class Heard:
    """One request, transcribed."""

    text: str
    speech_end: float
    """Clock time (seconds) at which the user stopped speaking: the latency clock starts here."""
    asr_ms: float | None = None
    woke: bool = True
    """False for a follow-up heard without the wake phrase."""


@dataclass(frozen=True)
class Answer:
    route: str
    """Which answerer handled it: "tool:time", "llm", ..."""
    deltas: Iterable[str]
    """The answer text as it arrives (a tool's answer is one delta, an LLM streams many)."""


@dataclass(frozen=True)
class Spoken:
    first_audio: float | None
    """Clock time at which the first PCM reached the player (None if nothing played)."""
    audio_s: float = 0.0
    cancelled: bool = False


class Listener(Protocol):
    def load(self) -> None:
        """Load and warm up the wake/VAD/ASR models. Must NOT require the microphone."""

    def listen(self, stop: threading.Event) -> Heard | None:
        """Wait for a request. Returns None when ``stop`` is set or about half a second
        passes with nothing heard, so the host stays responsive. Raises
        ``RkvoiceError("audio", "device-...")`` when the microphone is missing or lost,
        and an RkvoiceError of its stage when a model fails."""

    def close(self) -> None: ...


class Answerer(Protocol):
    def load(self) -> None: ...

    def answer(self, text: str, cancel: threading.Event) -> Answer:
        """Route the request; ``deltas`` stops soon after ``cancel`` is set."""

    def close(self) -> None:
        """Flush user state (todos, reminders) and free the model."""


class Speaker(Protocol):
    def load(self) -> None: ...

    def speak(self, deltas: Iterable[str], cancel: threading.Event) -> Spoken:
        """Speak a stream of text deltas; returns when the audio has played or on cancel.
        An exception raised by ``deltas`` (e.g. an answer timeout) propagates."""

    def cancel(self) -> None:
        """Stop synthesis and playback now (barge-in, SIGTERM)."""

    def close(self) -> None: ...


@dataclass
class TurnReport:
    """What one turn did, for the per-turn INFO line and the soak."""

    transcript: str
    route: str = ""
    answer_chars: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    cancelled: bool = False


class Host(Protocol):
    """What the supervisor offers the loop it hosts."""

    def report(self, result: TurnReport | BaseException) -> None:
        """A turn ended (a report) or failed (the exception): logged, counted, apologised for.
        For loops that run turns on their own threads; ``run_once`` may instead return/raise."""

    def busy(self, what: str) -> AbstractContextManager[None]:
        """Marks work that must finish: stuck in it for ``daemon.stall_s`` -> no watchdog pings.
        Waiting for the microphone or a wake is not busy."""


class TurnLoop(Protocol):
    """What the supervisor hosts. Engines are loaded by the supervisor (StageSet), not here."""

    def run_once(self, stop: threading.Event) -> TurnReport | None:
        """Wait (briefly) for a request and run one whole turn. None: nothing happened.
        Raises RkvoiceError (stage-tagged) when a stage fails; the turn is then over.
        A loop that runs until ``stop`` (reporting through ``Host.report``) is fine too."""

    def stop_speaking(self) -> None: ...

    def apologise(self, text: str) -> None:
        """Say a short apology after a failed turn (must not raise)."""


@dataclass(frozen=True)
class StageSpec:
    """One resident engine: which config it depends on and how to build it (unloaded)."""

    name: str
    key: Callable[[Config], Any]
    """The part of the config the engine depends on; a change reloads it on SIGHUP."""
    build: Callable[[Config], Any]
    """Returns the engine, not yet loaded (``load()`` does the heavy work)."""


@dataclass(frozen=True)
class Plan:
    """Everything the daemon runs: the engines and how to make a turn loop from them."""

    stages: tuple[StageSpec, ...]
    make_loop: Callable[[dict[str, Any], Config, Host], TurnLoop]


def is_device_error(exc: BaseException) -> bool:
    """A missing/busy/unplugged microphone: retried with backoff, not a failed turn."""
    return (
        isinstance(exc, RkvoiceError)
        and exc.stage == "audio"
        and exc.code.startswith("device")
    )
