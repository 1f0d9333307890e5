"""Sharing one set of loaded engines between the local turn and remote (Wyoming) clients.

The engines are not thread-safe, the board has 2 CPU cores and one NPU, and the local turn has
deadlines. Each engine therefore sits behind a ``PriorityGate``: one holder at a time, and a
local caller waiting for the gate always goes before every waiting Wyoming request.

- ASR and TTS: a Wyoming request takes the gate for one engine call only (one transcription, one
  synthesised piece or one part of a streamed piece), so a local turn waits at most for that call.
- Answers: a Wyoming request holds the assistant gate for its whole reply; a local turn that wants
  the assistant aborts that reply (the client gets ``not-handled``) and takes over at once.

Callers reach an engine through a gated view that implements the engine's own protocol
(``GatedAsr``/``GatedPrimedAsr`` for ``AsrEngine``/``PrimedAsr``, ``GatedTts`` for ``TtsEngine`` and
``StreamingTts``): every call of the protocol runs through the view's ``Runner`` (the gate at local
or remote priority, or a Wyoming worker), written out method by method. A call added to a protocol
is a mypy error where a view stands for that protocol, and tests/test_gate.py (which finds every call
of each protocol by introspection and checks it runs through the Runner) fails, until it is gated. The local
loop's assistant goes through ``LocalAssistant``. The Wyoming server's shared engines and worker
threads are rkvoice.wyoming.engines.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TypeVar, cast

import numpy as np

from rkvoice.answer.assistant import Reply
from rkvoice.answer.respond import Replier
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.wake import PrimedAsr, can_prime
from rkvoice.tts.base import StreamingTts, TtsEngine, streams
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

T = TypeVar("T")
Samples = np.ndarray[tuple[int], np.dtype[np.float32]]
"""Mono float32 audio, as the engines take and give it."""


class PriorityGate:
    """A lock whose waiters are admitted ``local()`` callers first, then ``remote()`` callers first come,
    first served."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._held_by: str | None = None
        self._on_preempt: Callable[[], None] | None = None
        self._waiting: list[tuple[bool, int]] = []  # (remote?, ticket): the least goes first
        self._tickets = itertools.count()

    def local(self) -> AbstractContextManager[None]:
        return self._hold("local")

    def remote(self, on_preempt: Callable[[], None] | None = None) -> AbstractContextManager[None]:
        """``on_preempt`` is called (under the gate's lock, so it must only signal) when a local caller
        arrives while this one holds the gate."""
        return self._hold("remote", on_preempt)

    @contextmanager
    def _hold(self, who: str, on_preempt: Callable[[], None] | None = None) -> Iterator[None]:
        with self._cond:
            me = (who == "remote", next(self._tickets))
            self._waiting.append(me)
            if who == "local" and self._held_by == "remote" and self._on_preempt is not None:
                log.info("%s: the local turn preempts a Wyoming request", self.name)
                self._on_preempt()
            try:
                while self._held_by is not None or min(self._waiting) != me:
                    self._cond.wait()
            finally:  # admitted, or gave up waiting: either way out of the queue
                self._waiting.remove(me)
                self._cond.notify_all()
            self._held_by, self._on_preempt = who, on_preempt
        try:
            yield
        finally:
            with self._cond:
                self._held_by = self._on_preempt = None
                self._cond.notify_all()


class Runner(Protocol):
    """Runs one engine call where it may run (behind a gate, on a worker) and returns its result."""

    def __call__(self, call: Callable[[], T]) -> T: ...


class Local:
    """A Runner taking ``gate`` at local priority for each call."""

    def __init__(self, gate: PriorityGate) -> None:
        self.gate = gate

    def __call__(self, call: Callable[[], T]) -> T:
        with self.gate.local():
            return call()


class Remote:
    """A Runner taking ``gate`` at Wyoming priority for each call."""

    def __init__(self, gate: PriorityGate) -> None:
        self.gate = gate

    def __call__(self, call: Callable[[], T]) -> T:
        with self.gate.remote():
            return call()


class GatedAsr:
    """An AsrEngine whose every call runs through ``run``."""

    def __init__(self, engine: AsrEngine, run: Runner) -> None:
        self.engine = engine
        self.run = run
        self.name = engine.name
        self.languages = engine.languages

    def load(self) -> None:
        self.run(self.engine.load)

    def transcribe(self, samples: Samples) -> str:
        return self.run(lambda: self.engine.transcribe(samples))


class _PrimedEngine(AsrEngine, PrimedAsr, Protocol):
    """An ASR engine with the wake engine's second look."""


class GatedPrimedAsr(GatedAsr):
    """A GatedAsr of an engine that has the PrimedAsr calls: those run through ``run`` too."""

    engine: _PrimedEngine

    def __init__(self, engine: _PrimedEngine, run: Runner) -> None:
        super().__init__(engine, run)

    def transcribe_primed(self, samples: Samples, phrase: str) -> str:
        return self.run(lambda: self.engine.transcribe_primed(samples, phrase))

    def phrase_logprob(self, samples: Samples, phrase: str) -> float:
        return self.run(lambda: self.engine.phrase_logprob(samples, phrase))


def gated_asr(engine: AsrEngine, run: Runner) -> GatedAsr:
    """``engine`` behind ``run``: with the PrimedAsr calls when the engine has them (rkvoice.hear.wake
    asks ``can_prime`` whether a second look can be had)."""
    if can_prime(engine):
        return GatedPrimedAsr(engine, run)  # type: ignore[arg-type]  # can_prime checked the calls
    return GatedAsr(engine, run)


class GatedTts:
    """A TtsEngine (and StreamingTts) whose every synthesis call runs through ``run``: ``generate``
    whole, ``stream`` one part at a time (a local turn waits at most for one part, not a piece)."""

    def __init__(self, engine: TtsEngine, run: Runner) -> None:
        self.engine = engine
        self.run = run
        self.name = engine.name
        self.languages = engine.languages

    @property
    def sample_rate(self) -> int:
        return self.engine.sample_rate

    @property
    def piece_chars(self) -> tuple[int, int] | None:
        """The engine's own piece sizes (rkvoice.pieces.piece_chars), None when it has none."""
        own: tuple[int, int] | None = getattr(self.engine, "piece_chars", None)
        return own

    @property
    def streaming(self) -> bool:
        return streams(self.engine)

    def load(self) -> None:
        self.run(self.engine.load)

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[Samples, int]:
        return self.run(lambda: self.engine.generate(text, sid, speed))

    def stream(self, text: str, sid: int = 0, speed: float = 1.0) -> Iterator[tuple[Samples, bool]]:
        if not streams(self.engine):
            raise TypeError(f"{self.name} does not stream now")
        engine = cast(StreamingTts, self.engine)
        parts = self.run(lambda: engine.stream(text, sid, speed))
        end = (np.zeros(0, dtype=np.float32), True)
        while True:
            part = self.run(lambda: next(parts, end))
            yield part
            if part is end or part[1]:
                return


class LocalAssistant:
    """The assistant as the local turn sees it: ``reply`` preempts a Wyoming answer and holds the gate
    while the LLM answers: until the reply's text stream is consumed or closed, or its turn is
    cancelled (a wedged model must not hold the next turn back). A tool's answer lets go at once."""

    def __init__(self, assistant: Replier, gate: PriorityGate) -> None:
        self.assistant = assistant
        self.gate = gate

    def reply(self, text: str, turn: Turn) -> Reply:
        held = self.gate.local()
        held.__enter__()
        once = threading.Lock()

        def release(*_: object) -> None:
            if once.acquire(blocking=False):
                held.__exit__(None, None, None)

        try:
            result = self.assistant.reply(text, turn)
        except BaseException:
            release()
            raise
        if result.llm is None:
            release()
            return result
        turn.on_cancel(release)
        result.deltas = _then_release(result.deltas, release)
        return result


def _then_release(deltas: Iterator[str], release: Callable[[], None]) -> Iterator[str]:
    try:
        yield from deltas
    finally:
        release()
