"""Stop speaking: "停" / "别说了" / "闭嘴" (only when that is the whole request)."""

from __future__ import annotations

from rkvoice.answer.tools.base import ToolAnswer, ToolContext

NAME = "stop"
_STOP = ("停", "停下", "停止", "停一下", "停停", "别说了", "不要说了", "不用说了", "闭嘴", "安静", "安静点",
         "好了好了", "够了", "行了别说了", "暂停", "别讲了", "不要讲了", "别念了", "打住", "算了", "停吧",
         "别说", "停止播放", "不要再说了", "别再说了", "好了别说了")


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    core = text.removeprefix(ctx.name).rstrip("吧啊呀了吗")
    if text in _STOP or core in _STOP or core.rstrip("吧啊呀了吗哦") in _STOP:
        return ToolAnswer(NAME, "", action="stop")
    return None
