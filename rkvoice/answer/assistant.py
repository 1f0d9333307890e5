"""The assistant's brain: tools first, then the LLM; owns state, reminders and the conversation.
``reply(text)`` returns at once with the route and a lazy stream of text deltas (generate.LlmStream)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from rkvoice.answer.conversation import Conversation
from rkvoice.answer.generate import LlmStream
from rkvoice.answer.llm.base import LlmEngine
from rkvoice.answer.llm.registry import create_llm
from rkvoice.answer.tools.base import ToolAnswer, ToolContext, local_now
from rkvoice.answer.tools.router import route
from rkvoice.answer.tools.scheduler import ReminderScheduler
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.state import StateStore
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

log = logging.getLogger(__name__)


@dataclass
class Reply:
    route: str
    """"tool:<name>" or "llm"."""
    deltas: Iterator[str]
    tool: ToolAnswer | None = None
    llm: LlmStream | None = None

    @property
    def text(self) -> str:
        if self.llm is not None:
            return self.llm.text
        return self.tool.text if self.tool is not None else ""


class Assistant:
    def __init__(
        self,
        cfg: Config,
        clock: Clock | None = None,
        llm: LlmEngine | None = None,
        now: Callable[[], datetime] = local_now,
        store: StateStore | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self.now = now
        self._llm = llm
        self.store = store or StateStore(cfg.state.path)
        self.scheduler = ReminderScheduler(self.store, now)
        self.ctx = ToolContext(now=now, store=self.store, scheduler=self.scheduler, name=cfg.hear.name)
        self.conversation = Conversation(cfg, now)

    @property
    def llm(self) -> LlmEngine:
        if self._llm is None:
            self._llm = create_llm(self.cfg)
        return self._llm

    def load(self) -> None:
        """Load the LLM (seconds) and start the reminder thread."""
        self.llm.load()
        prime = getattr(self.llm, "prime", None)
        if prime is not None:  # the system prompt's cache is ready before the first question
            prime([{"role": "system", "content": self.conversation.system_prompt()}])
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.stop()
        getattr(self._llm, "close", lambda: None)()

    def reply(self, text: str, turn: Turn) -> Reply:
        """Route ``text``; the LLM's generation stops when ``turn`` is cancelled."""
        tool = route(text, self.ctx)
        name = f"tool:{tool.tool}" if tool is not None else "llm"  # the one spelling: event, Reply, metrics
        turn.timeline.mark(Ev.ROUTE, route=name)
        if tool is not None:
            return Reply(name, iter([tool.text] if tool.text else []), tool=tool)
        self.llm.load()  # no-op once loaded (the product loads at start)
        stream = LlmStream(self.llm, self.conversation.messages(text), self.clock, self.cfg.llm.timeout_s,
                           self.cfg.llm.max_answer_chars, turn)

        def deltas() -> Iterator[str]:
            yield from stream
            if not stream.cancelled and not stream.timed_out:
                self.conversation.remember(text, stream.text)

        return Reply(name, deltas(), llm=stream)
