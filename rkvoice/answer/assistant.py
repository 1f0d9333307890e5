"""The assistant's brain: tools first, then Home Assistant (``home_assistant.url`` set), then the LLM;
owns state, reminders and the conversation. ``reply(text)`` returns with the route and a lazy stream of
text deltas (generate.LlmStream) as soon as the route is known (HA's answer within its timeout)."""

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
from rkvoice.home.route import ROUTE as HOME, HomeAnswer, HomeRoute
from rkvoice.home_names import CACHE_FILE
from rkvoice.state import StateStore
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

log = logging.getLogger(__name__)


@dataclass
class Reply:
    route: str
    """"tool:<name>", "home" or "llm"."""
    deltas: Iterator[str]
    tool: ToolAnswer | None = None
    llm: LlmStream | None = None
    home: HomeAnswer | None = None

    @property
    def text(self) -> str:
        if self.llm is not None:
            return self.llm.text
        if self.home is not None:
            return self.home.text
        return self.tool.text if self.tool is not None else ""


class Assistant:
    def __init__(
        self,
        cfg: Config,
        clock: Clock | None = None,
        llm: LlmEngine | None = None,
        now: Callable[[], datetime] = local_now,
        store: StateStore | None = None,
        home: HomeRoute | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self.now = now
        self._llm = llm
        self.store = store or StateStore(cfg.state.path)
        self.scheduler = ReminderScheduler(self.store, now)
        self.ctx = ToolContext(now=now, store=self.store, scheduler=self.scheduler, name=cfg.hear.name)
        self.conversation = Conversation(cfg, now)
        ha = cfg.home_assistant
        self.home = home if home is not None or not ha.url else HomeRoute(ha, ha.token_path(cfg.state.path), self.clock,
                                                                          name=cfg.hear.name,
                                                                          cache=cfg.state.path / CACHE_FILE)

    @property
    def llm(self) -> LlmEngine:
        if self._llm is None:
            self._llm = create_llm(self.cfg)
        return self._llm

    def load(self) -> None:
        """Load the LLM (seconds) and start the reminder thread (and the home route's name reading)."""
        if self.home is not None:
            self.home.load()
        self.llm.load()
        # the system prompt's cache is ready before the first question (engines that keep one)
        self.llm.prime([{"role": "system", "content": self.conversation.system_prompt()}])
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.stop()
        if self.home is not None:
            self.home.close()
        if self._llm is not None:  # never asked for: never loaded
            self._llm.close()

    def reply(self, text: str, turn: Turn) -> Reply:
        """Route ``text``; the LLM's generation stops when ``turn`` is cancelled. Home Assistant is asked
        after the tools, or before them when ``text`` names something it exposed."""
        home, asked, tool = self.home, None, None
        if home is not None and home.claims(text):
            asked = home.ask(text, turn)
        if asked is None or asked.answer is None:
            tool = route(text, self.ctx)
        if tool is None and asked is None and home is not None and text.strip():
            asked = home.ask(text, turn)
        answer = asked.answer if asked is not None and tool is None else None
        # the one spelling: event, Reply, metrics
        name = f"tool:{tool.tool}" if tool is not None else HOME if answer is not None else "llm"
        ha = {} if asked is None else {"home": str(asked.outcome), "home_ms": asked.ms}
        turn.timeline.mark(Ev.ROUTE, route=name, **ha)
        if tool is not None:
            return Reply(name, iter([tool.text] if tool.text else []), tool=tool)
        if answer is not None:
            return Reply(name, iter([answer.text]), home=answer)
        self.llm.load()  # no-op once loaded (the product loads at start)
        stream = LlmStream(self.llm, self.conversation.messages(text), self.clock, self.cfg.llm.timeout_s,
                           self.cfg.llm.max_answer_chars, turn)

        def deltas() -> Iterator[str]:
            yield from stream
            if not stream.cancelled and not stream.timed_out:
                self.conversation.remember(text, stream.text)

        return Reply(name, deltas(), llm=stream)
