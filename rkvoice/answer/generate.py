"""One LLM answer as a stream of deltas, bounded: a timeout, a maximum length, cancel.

The deadline is checked between deltas on the injected clock. An engine that produces nothing (a
stuck prefill) is the answerer's to catch: its guard cancels the turn, which aborts the engine.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from rkvoice.answer.llm.base import LlmEngine, Message
from rkvoice.clock import Clock
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

TIMEOUT_TEXT = "抱歉，这个问题我想得太久了，先说到这里。"
_SENTENCE_END = re.compile(r"[。！？!?；;\n]")


@dataclass(eq=False)
class LlmStream:
    """Iterate to get the deltas; afterwards ``text``, ``timed_out``, ``truncated`` tell what happened."""

    engine: LlmEngine
    messages: list[Message]
    clock: Clock
    timeout_s: float
    max_chars: int
    turn: Turn
    text: str = ""
    timed_out: bool = False
    truncated: bool = False
    cancelled: bool = False
    _done: threading.Event = field(default_factory=threading.Event)

    def _on_cancel(self, _turn: Turn) -> None:
        """The turn was cancelled (barge-in, stop): abort the engine; the answer counts as cancelled."""
        if not self._done.is_set():
            self.cancelled = True
            self.engine.abort()

    def __iter__(self) -> Iterator[str]:
        deadline = self.clock.now() + self.timeout_s
        self.turn.on_cancel(self._on_cancel)
        mark = self.turn.timeline.mark
        mark(Ev.LLM_START)
        gen = iter(self.engine.stream(self.messages))
        try:
            for delta in gen:
                if delta and not self.text:
                    mark(Ev.LLM_FIRST_TOKEN)
                if self.turn.cancelled:
                    break  # counted as cancelled below
                if self.clock.now() > deadline:
                    self.timed_out = True
                    self.engine.abort()
                    break
                over = len(self.text) + len(delta) - self.max_chars
                m = _SENTENCE_END.search(delta) if over > 0 else None
                if m or over > self.max_chars / 2:  # over the limit: finish the sentence in progress, then stop
                    delta = delta[: m.end()] if m else delta
                    self.truncated = True
                    self.engine.abort()
                self.text += delta
                yield delta
                if self.truncated:
                    break
            if self.turn.cancelled:
                self.cancelled = True  # also when the engine ended quietly after its abort
            if self.timed_out and not self.cancelled:
                log.warning("LLM answer timed out after %.1f s; aborted", self.timeout_s)
                mark(Ev.LLM_TIMEOUT, timeout_s=self.timeout_s)
                yield ("。" if self.text and not _SENTENCE_END.search(self.text[-1:]) else "") + TIMEOUT_TEXT
        finally:
            getattr(gen, "close", lambda: None)()  # releases the engine (and stops its run if we left early)
            self._done.set()
            mark(Ev.LLM_DONE, chars=len(self.text), truncated=self.truncated, timed_out=self.timed_out,
                       cancelled=self.cancelled)
