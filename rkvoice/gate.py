"""Sharing one set of loaded engines between the local turn and remote (Wyoming) clients.

The engines are not thread-safe, the board has 2 CPU cores and one NPU, and the local turn has
deadlines. Each engine therefore sits behind a ``PriorityGate``: one holder at a time, and a
local caller waiting for the gate always goes before every waiting Wyoming request.

- ASR and TTS: a Wyoming request takes the gate for one engine call only (one transcription, one
  synthesised piece), so a local turn waits at most for the piece being synthesised (about a second).
- Answers: a Wyoming request holds the assistant gate for its whole reply; a local turn that wants
  the assistant aborts that reply (the client gets ``not-handled``) and takes over at once.
- Wake decodes: a detect stream's decode goes on the ASR worker before every queued transcription.

The local loop calls through ``Local``/``LocalAssistant`` views (local priority), remote callers
through ``Engines``; the server alone (``--wyoming`` without the daemon) has no local caller.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


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


ASR_CALLS = ("transcribe", "transcribe_primed", "phrase_logprob")
"""The ASR's decoding calls (the last two: the wake engine's second look, where the engine has them)."""
TTS_CALLS = ("generate",)


class Local:
    """An engine as the local turn sees it: its ``calls`` (ASR_CALLS, TTS_CALLS) take the gate at
    local priority, the rest passes through."""

    def __init__(self, engine: Any, gate: PriorityGate, calls: tuple[str, ...]) -> None:
        self._engine = engine
        self._gate = gate
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._engine, name)
        if name not in self._calls:
            return value

        def gated(*args: Any, **kwargs: Any) -> Any:
            with self._gate.local():
                return value(*args, **kwargs)

        return gated


class LocalAssistant:
    """The assistant as the local turn sees it: ``reply`` preempts a Wyoming answer and holds the gate
    while the LLM answers: until the reply's text stream is consumed or closed, or its turn is
    cancelled (a wedged model must not hold the next turn back). A tool's answer lets go at once."""

    def __init__(self, assistant: Any, gate: PriorityGate) -> None:
        self._assistant = assistant
        self._gate = gate

    def reply(self, text: str, turn: Any) -> Any:
        held = self._gate.local()
        held.__enter__()
        once = threading.Lock()

        def release(*_: Any) -> None:
            if once.acquire(blocking=False):
                held.__exit__(None, None, None)

        try:
            result = self._assistant.reply(text, turn)
        except BaseException:
            release()
            raise
        if getattr(result, "llm", None) is None:
            release()
            return result
        turn.on_cancel(release)
        result.deltas = _then_release(result.deltas, release)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._assistant, name)


def _then_release(deltas: Iterator[str], release: Callable[[], None]) -> Iterator[str]:
    try:
        yield from deltas
    finally:
        release()


WAKE, REMOTE = 0, 1
"""Ranks on a Worker: a wake decode before every other queued remote call."""


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

    def submit(self, call: Callable[[], Any], rank: int = REMOTE) -> Future[Any]:
        done: Future[Any] = Future()
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


@dataclass
class Engines:
    """Loaded engines shared by every connection, each behind its own gate: ``asr``, ``tts`` (the
    default voice; further voices are loaded on first use and kept), ``assistant`` and ``wake_factory``
    (makes a loaded wake engine from an ASR engine: a wake engine keeps stream state, so each detect
    stream borrows its own, transcribing through a ``WakeAsr``). Wyoming calls run on one ``Worker``
    per engine kind; ``close()`` stops them (``serve_wyoming`` calls it only for engines it loaded)."""

    asr: Any
    tts: Any
    assistant: Any
    wake_factory: Callable[[Any], Any]
    voices: dict[str, Any] = field(default_factory=dict)
    """Voice name -> loaded engine (the default voice included once it is known)."""
    asr_gate: PriorityGate = field(default_factory=lambda: PriorityGate("asr"))
    tts_gate: PriorityGate = field(default_factory=lambda: PriorityGate("tts"))
    answer_gate: PriorityGate = field(default_factory=lambda: PriorityGate("answer"))
    voices_lock: threading.Lock = field(default_factory=threading.Lock)
    asr_worker: Worker = field(default_factory=lambda: Worker("wyoming-asr"))
    tts_worker: Worker = field(default_factory=lambda: Worker("wyoming-tts"))
    _idle_wakes: list[Any] = field(default_factory=list)
    _wake_lock: threading.Lock = field(default_factory=threading.Lock)

    def decode(self, call: str, *args: Any, rank: int = REMOTE) -> Future[Any]:
        """The ASR's ``call`` (one of ASR_CALLS) on the ASR worker at Wyoming priority, ``rank``
        saying where it queues on the worker (WAKE: before the queued transcriptions)."""

        def run() -> Any:
            with self.asr_gate.remote():
                return getattr(self.asr, call)(*args)

        return self.asr_worker.submit(run, rank)

    def borrow_wake(self) -> Any:
        """A loaded wake engine for one detect stream (blocking: builds one when none is idle).
        The server bounds how many are out at once (wyoming.max_wake_streams)."""
        with self._wake_lock:
            if self._idle_wakes:
                return self._idle_wakes.pop()
        return self.wake_factory(WakeAsr(self))

    def return_wake(self, engine: Any) -> None:
        with self._wake_lock:
            self._idle_wakes.append(engine)

    def close(self) -> None:
        """Stop the worker threads (the engines themselves belong to whoever loaded them)."""
        self.asr_worker.shutdown()
        self.tts_worker.shutdown()
        with self._wake_lock:
            self._idle_wakes.clear()


class WakeAsr:
    """The ASR engine as a detect stream's wake engine sees it: Wyoming priority at the gate, but its
    decodes go on the ASR worker before every queued transcription."""

    name = "remote-asr"

    def __init__(self, engines: Engines) -> None:
        self._engines = engines

    def load(self) -> None:
        """Already loaded: the shared engine was loaded once at start."""

    def __getattr__(self, name: str) -> Any:
        """The engine's decoding calls (ASR_CALLS), as the class says."""
        if name not in ASR_CALLS or not hasattr(self._engines.asr, name):
            raise AttributeError(name)
        return lambda *args: self._engines.decode(name, *args, rank=WAKE).result()
