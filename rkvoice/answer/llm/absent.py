"""The LLM a board runs without: its model is not installed (it is optional: the user converts it),
so a question for it gets one spoken sentence saying so and naming what the assistant does answer."""

from __future__ import annotations

from collections.abc import Iterator

from rkvoice.answer.llm.base import LlmEngine, Message
from rkvoice.config import Config

RECIPE = ("make it on an x86_64 PC with models/convert_rkllm.py (docs/rkllm-model.md), then "
          "./install.sh --profile board --rkllm FILE_OR_HTTPS_URL [--rkllm-sha256 HEX]")
"""The one next step for a board without its LLM (the install's table, ``--check``)."""
CAN_DO = "报时和日期、定闹钟和提醒、记待办、算算术、查设备状态和IP地址"
"""What the local tools answer (rkvoice.answer.tools.router.HANDLERS: clock, reminders, todos,
arithmetic, device, network; stop and weather need no mention)."""


def not_installed_sentence(cfg: Config) -> str:
    """The one sentence: no language model, and what the assistant can do (with Home Assistant when set)."""
    home = "，也能通过Home Assistant控制家里的设备" if cfg.home_assistant.url else ""
    return f"语言模型还没有安装，这个问题我答不了，我现在可以{CAN_DO}{home}。"


class NotInstalledLlm(LlmEngine):
    """Stands in for ``engine`` whose model is missing (``lack`` says which file): loads at once, and
    every answer is ``not_installed_sentence``."""

    def __init__(self, cfg: Config, engine: str, lack: str) -> None:
        self.name = f"{engine} (not installed)"
        self.engine = engine
        self.lack = lack
        self.sentence = not_installed_sentence(cfg)

    def load(self) -> None:
        return None

    def stream(self, messages: list[Message]) -> Iterator[str]:
        yield self.sentence

    def abort(self) -> None:
        return None
