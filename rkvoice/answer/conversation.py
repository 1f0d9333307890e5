"""The LLM's prompt: a system prompt with today's date and time (spoken form), bounded history."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime

from rkvoice.answer.llm.base import Message
from rkvoice.config import Config
from rkvoice.text.cn import cn_date, cn_time


def spoken_now(now: datetime) -> str:
    """二零二六年十月二十一日，星期三，晚上十点零五分."""
    return f"{cn_date(now).replace(' ', '，')}，{cn_time(now)}"


class Conversation:
    """Keeps the last ``llm.history_turns`` question/answer pairs."""

    def __init__(self, cfg: Config, now: Callable[[], datetime]) -> None:
        self.cfg = cfg
        self.now = now
        self.history: deque[tuple[str, str]] = deque(maxlen=max(0, cfg.llm.history_turns))

    def system_prompt(self) -> str:
        template = self.cfg.llm.system_prompt
        return template.replace("{now}", spoken_now(self.now()))

    def messages(self, user_text: str) -> list[Message]:
        msgs: list[Message] = [{"role": "system", "content": self.system_prompt()}]
        for q, a in self.history:
            msgs.append({"role": "user", "content": q})
            msgs.append({"role": "assistant", "content": a})
        msgs.append({"role": "user", "content": user_text})
        return msgs

    def remember(self, user_text: str, answer: str) -> None:
        if self.history.maxlen and answer.strip():
            self.history.append((user_text, answer))

    def clear(self) -> None:
        self.history.clear()
