"""One LLM answer as a stream of deltas, bounded: a timeout, a maximum length, cancel.

The deadline is checked between deltas on the injected clock (testable on FakeClock). An engine
that produces nothing at all (a stuck prefill) is the caller's deadline to catch: the answerer's
guard cancels the turn, and the turn's cancel aborts the engine (``turn.on_cancel``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator

from rkvoice.answer.llm.base import LlmEngine, Message
from rkvoice.clock import Clock
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

TIMEOUT_TEXT = "抱歉，这个问题我想得太久了，先说到这里。"
_SENTENCE_END = re.compile(r"[。！？!?；;\n]")


class LlmStream:
    """Iterate to get the deltas; afterwards ``text``, ``timed_out``, ``truncated`` tell what happened."""

    def __init__(
        self,
        engine: LlmEngine,
        messages: list[Message],
        clock: Clock,
        timeout_s: float,
        max_chars: int,
        turn: Turn | None = None,
    ) -> None:
        self.engine = engine
        self.messages = messages
        self.clock = clock
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.turn = turn
        self.text = ""
        self.timed_out = False
        self.truncated = False
        self.cancelled = False
        self._done = threading.Event()

    def _mark(self, name: Ev, **data: object) -> None:
        if self.turn is not None:
            self.turn.timeline.mark(name, **data)

    def _on_cancel(self, _turn: Turn) -> None:
        if not self._done.is_set():
            self.abort()

    def abort(self) -> None:
        """Stop this answer (barge-in, stop): the engine is aborted and the answer counts as cancelled."""
        self.cancelled = True
        self.engine.abort()

    def __iter__(self) -> Iterator[str]:
        deadline = self.clock.now() + self.timeout_s
        if self.turn is not None:
            self.turn.on_cancel(self._on_cancel)
        self._mark(Ev.LLM_START)
        first = True
        gen = iter(self.engine.stream(self.messages))
        try:
            for delta in gen:
                if first and delta:
                    first = False
                    self._mark(Ev.LLM_FIRST_TOKEN)
                if self.turn is not None and self.turn.cancelled:
                    self.cancelled = True
                    break
                if self.clock.now() > deadline:
                    self.timed_out = True
                if self.timed_out:
                    self.engine.abort()
                    break
                if len(self.text) + len(delta) > self.max_chars:
                    # over the limit: finish the sentence in progress, then stop
                    m = _SENTENCE_END.search(delta)
                    hard = len(self.text) + len(delta) > self.max_chars * 1.5
                    if m or hard:
                        delta = delta[: m.end()] if m else delta
                        self.text += delta
                        self.truncated = True
                        self.engine.abort()
                        yield delta
                        break
                self.text += delta
                yield delta
            if self.turn is not None and self.turn.cancelled:
                self.cancelled = True  # the engine may have ended quietly after its abort
            # The engine may have stopped because the timer aborted it.
            if self.timed_out and not self.cancelled:
                log.warning("LLM answer timed out after %.1f s; aborted", self.timeout_s)
                self._mark(Ev.LLM_TIMEOUT, timeout_s=self.timeout_s)
                yield ("。" if self.text and not _SENTENCE_END.search(self.text[-1:]) else "") + TIMEOUT_TEXT
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                close()  # releases the engine (and stops its run if we left early)
            self._done.set()
            self._mark(Ev.LLM_DONE, chars=len(self.text), truncated=self.truncated, timed_out=self.timed_out,
                       cancelled=self.cancelled)
