"""The engines a Wyoming server shares between its connections, each behind the stages' own priority
gate (rkvoice.gate), and the worker threads its calls run on.

- Transcriptions go on the ASR worker (``Engines.transcribe``); a detect stream's wake engine decodes
  through ``wake_asr()``, a GatedAsr whose calls go on the same worker before every queued
  transcription.
- Synthesis goes on the TTS worker, through ``voice_view()``: a GatedTts at Wyoming priority.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

import numpy as np

from rkvoice.answer.assistant import Assistant
from rkvoice.config import Config
from rkvoice.gate import GatedAsr, GatedTts, PriorityGate, Remote, gated_asr
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.wake import WakeEngine
from rkvoice.stages import Stages, wake_factory
from rkvoice.tts.base import TtsEngine

log = logging.getLogger(__name__)

T = TypeVar("T")


class Rank(IntEnum):
    """Where a call queues on a Worker: a wake decode before every other queued remote call."""

    WAKE = 0
    REMOTE = 1


class Worker:
    """One thread running submitted calls by rank, then in the order they came (one thread per engine
    kind keeps the engines' per-thread caches and arenas few). Started on the first call."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._queue: list[tuple[int, int, Callable[[], Any], Future[Any]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, call: Callable[[], T], rank: Rank = Rank.REMOTE) -> Future[T]:
        done: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self.name} is shut down")
            heapq.heappush(self._queue, (rank, next(self._order), call, done))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return done

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                _, _, call, done = heapq.heappop(self._queue)
            if done.set_running_or_notify_cancel():  # skipped when its caller has given up
                try:
                    done.set_result(call())
                except BaseException as exc:
                    done.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel the queued calls, let the running one finish, stop the thread."""
        with self._cond:
            self._closed = True
            for *_, done in self._queue:
                done.cancel()
            self._queue.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


class WakeDecode:
    """A Runner for a detect stream's wake engine: the call at Wyoming priority at the ASR gate, on the
    ASR worker before every queued transcription, waited for."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines

    def __call__(self, call: Callable[[], T]) -> T:
        gated = Remote(self.engines.asr_gate)
        return self.engines.asr_worker.submit(lambda: gated(call), Rank.WAKE).result()


@dataclass
class Engines:
    """Loaded engines shared by every connection, each behind its own gate: ``asr``, ``tts`` (the
    default voice; further voices are loaded on first use and kept), ``assistant`` and ``wake_factory``
    (makes a loaded wake engine from an ASR engine: a wake engine keeps stream state, so each detect
    stream borrows its own, transcribing through ``wake_asr()``). Wyoming calls run on one ``Worker``
    per engine kind; ``close()`` stops them (``serve_wyoming`` calls it only for engines it loaded)."""

    asr: AsrEngine
    tts: TtsEngine
    assistant: Assistant
    wake_factory: Callable[[AsrEngine], WakeEngine]
    voices: dict[str, TtsEngine] = field(default_factory=dict)
    """Voice name -> loaded engine (the default voice included once it is known)."""
    asr_gate: PriorityGate = field(default_factory=lambda: PriorityGate("asr"))
    tts_gate: PriorityGate = field(default_factory=lambda: PriorityGate("tts"))
    answer_gate: PriorityGate = field(default_factory=lambda: PriorityGate("answer"))
    voices_lock: threading.Lock = field(default_factory=threading.Lock)
    asr_worker: Worker = field(default_factory=lambda: Worker("wyoming-asr"))
    tts_worker: Worker = field(default_factory=lambda: Worker("wyoming-tts"))
    _idle_wakes: list[WakeEngine] = field(default_factory=list)
    _wake_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, cfg: Config, stages: Stages, answer_gate: PriorityGate | None = None) -> Engines:
        """The loaded stages for remote callers: the same engines behind the same gates (and the local
        loop's answer gate, when there is a local loop)."""
        hear, speak = stages.hear, stages.speak
        assert hear.asr is not None and speak.tts is not None, "load() first"
        return cls(asr=hear.asr, tts=speak.tts, assistant=stages.answer, wake_factory=wake_factory(cfg),
                   asr_gate=hear.gate, tts_gate=speak.gate, answer_gate=answer_gate or PriorityGate("answer"))

    def transcribe(self, samples: np.ndarray) -> Future[str]:
        """A transcription on the ASR worker at Wyoming priority, after the calls queued before it."""
        gated = Remote(self.asr_gate)
        return self.asr_worker.submit(lambda: gated(lambda: self.asr.transcribe(samples)))

    def wake_asr(self) -> GatedAsr:
        """The ASR as a detect stream's wake engine sees it: its calls go before queued transcriptions."""
        return gated_asr(self.asr, WakeDecode(self))

    def voice_view(self, engine: TtsEngine) -> GatedTts:
        """A loaded voice as a Wyoming synthesis sees it: each call at Wyoming priority at the TTS gate."""
        return GatedTts(engine, Remote(self.tts_gate))

    def borrow_wake(self) -> WakeEngine:
        """A loaded wake engine for one detect stream (blocking: builds one when none is idle).
        The server bounds how many are out at once (wyoming.max_wake_streams)."""
        with self._wake_lock:
            if self._idle_wakes:
                return self._idle_wakes.pop()
        return self.wake_factory(self.wake_asr())

    def return_wake(self, engine: WakeEngine) -> None:
        with self._wake_lock:
            self._idle_wakes.append(engine)

    def close(self) -> None:
        """Stop the worker threads (the engines themselves belong to whoever loaded them)."""
        self.asr_worker.shutdown()
        self.tts_worker.shutdown()
        with self._wake_lock:
            self._idle_wakes.clear()
