"""One LLM answer as a stream of deltas, bounded: a timeout, a maximum length, cancel.

The deadline is checked between deltas on the injected clock (testable on FakeClock); with
the real clock a timer also aborts an engine that produces nothing at all (stuck prefill).
A cancel event (barge-in) aborts the engine from a watcher thread.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator

from rkvoice.answer.llm.base import LlmEngine, Message
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.timeline import Timeline

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
        timeline: Timeline | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.engine = engine
        self.messages = messages
        self.clock = clock
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.timeline = timeline
        self.cancel = cancel
        self.text = ""
        self.timed_out = False
        self.truncated = False
        self.cancelled = False
        self._done = threading.Event()

    def _mark(self, name: str, **data: object) -> None:
        if self.timeline is not None:
            self.timeline.mark(name, **data)

    def abort(self) -> None:
        """Stop this answer (barge-in, stop): the engine is aborted and the answer counts as cancelled."""
        self.cancelled = True
        self.engine.abort()

    def _on_timer(self) -> None:
        if not self._done.is_set():
            self.timed_out = True
            self.engine.abort()

    def _watch_cancel(self) -> None:
        assert self.cancel is not None
        while not self._done.is_set():
            if self.cancel.wait(0.05):
                if not self._done.is_set():
                    self.cancelled = True
                    self.engine.abort()
                return

    def __iter__(self) -> Iterator[str]:
        deadline = self.clock.now() + self.timeout_s
        timer = None
        if isinstance(self.clock, MonotonicClock):
            timer = threading.Timer(self.timeout_s, self._on_timer)
            timer.daemon = True
            timer.start()
        if self.cancel is not None:
            threading.Thread(target=self._watch_cancel, name="llm-cancel", daemon=True).start()
        self._mark("llm_start")
        first = True
        gen = iter(self.engine.stream(self.messages))
        try:
            for delta in gen:
                if first and delta:
                    first = False
                    self._mark("llm_first_token")
                if self.cancel is not None and self.cancel.is_set():
                    self.cancelled = True
                    self.engine.abort()
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
            if self.cancel is not None and self.cancel.is_set():
                self.cancelled = True  # the engine may have ended quietly after its abort
            # The engine may have stopped because the timer aborted it.
            if self.timed_out and not self.cancelled:
                log.warning("LLM answer timed out after %.1f s; aborted", self.timeout_s)
                self._mark("llm_timeout", timeout_s=self.timeout_s)
                yield ("。" if self.text and not _SENTENCE_END.search(self.text[-1:]) else "") + TIMEOUT_TEXT
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                close()  # releases the engine (and stops its run if we left early)
            self._done.set()
            if timer is not None:
                timer.cancel()
            self._mark("llm_done", chars=len(self.text), truncated=self.truncated, timed_out=self.timed_out,
                       cancelled=self.cancelled)
