"""Weather questions: the assistant is offline, so it says so instead of letting the LLM invent a forecast."""

from __future__ import annotations

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.match import has_any

NAME = "weather"
WEATHER_WORDS = ("天气", "下雨", "下雪", "气温", "刮风", "雾霾", "空气质量", "预报", "带伞", "降温", "升温",
                 "外面温度", "外面冷", "外面热", "室外温度")
_NOT = ("天气预报员", "天气之子")


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    if len(text) > 24 or not has_any(text, WEATHER_WORDS) or has_any(text, _NOT):
        return None
    return ToolAnswer(NAME, "我是离线运行的助手，连不上网，查不到天气。可以看看窗外，或者用手机查一下。")
