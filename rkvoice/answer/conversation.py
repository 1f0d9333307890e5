"""The LLM's prompt: stable instructions, bounded history, the date and time in the newest question.

Laid out for the llama engine's prefix cache: the system prompt never changes and the history keeps
each question as sent, so only the new question is evaluated; a full history drops its older half at
once (a sliding window would change everything after the system prompt every turn).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from rkvoice.answer.llm.base import Message
from rkvoice.config import Config
from rkvoice.text.spoken_numbers import cn_date, cn_time

TIME_NOTE = "用户的话开头方括号里是说话时的日期和时间，需要时才用。"
"""Appended to the system prompt: what the bracketed time before each question is."""


def spoken_now(now: datetime) -> str:
    """二零二六年十月二十一日，星期三，晚上十点零五分."""
    return f"{cn_date(now).replace(' ', '，')}，{cn_time(now)}"


class Conversation:
    """Keeps the last ``llm.history_turns`` question/answer pairs, as they were sent to the LLM."""

    def __init__(self, cfg: Config, now: Callable[[], datetime]) -> None:
        self.cfg = cfg
        self.now = now
        self.max_turns = cfg.llm.history_turns
        self.history: list[tuple[str, str]] = []
        self._asked: tuple[str, str] = ("", "")  # (user text, the question as sent) of the last messages()

    def system_prompt(self) -> str:
        """llm.system_prompt (``{name}``: the assistant's name) and TIME_NOTE; a custom prompt with
        ``{now}`` gets the time there instead of in the questions (recomputed each new minute)."""
        template = self.cfg.llm.system_prompt.replace("{name}", self.cfg.hear.name)
        if "{now}" in template:
            return template.replace("{now}", spoken_now(self.now()))
        return template + TIME_NOTE

    def question(self, user_text: str) -> str:
        """The user turn as sent: ``[date and time] text``."""
        return user_text if "{now}" in self.cfg.llm.system_prompt else f"[{spoken_now(self.now())}] {user_text}"

    def messages(self, user_text: str) -> list[Message]:
        asked = self.question(user_text)
        self._asked = (user_text, asked)
        msgs: list[Message] = [{"role": "system", "content": self.system_prompt()}]
        for q, a in self.history:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        msgs.append({"role": "user", "content": asked})
        return msgs

    def remember(self, user_text: str, answer: str) -> None:
        """Keep a finished pair; the question as ``messages()`` sent it, so the next prompt's prefix
        is the one already computed. Past ``llm.history_turns`` pairs only the newest half stays."""
        if self.max_turns < 1 or not answer.strip():
            return
        sent = self._asked[1] if self._asked[0] == user_text else self.question(user_text)
        self.history.append((sent, answer))
        if len(self.history) > self.max_turns:
            del self.history[: len(self.history) - max(1, self.max_turns // 2)]
