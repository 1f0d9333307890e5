"""Reminders and alarms from speech: set, list and cancel them through the ReminderScheduler."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.when import parse_when
from rkvoice.text.normalize import speakable
from rkvoice.text.spoken_numbers import clock_hm, cn_count, cn_int

NAME = "reminder"

_TRIGGERS = ("提醒我", "提醒", "叫我", "叫醒我", "喊我", "闹钟", "叫醒")
_LIST = re.compile(r"(?:有哪些|有什么|有几个|查看|看看|看一下|列出|都有)(?:的)?(?:提醒|闹钟)|(?:提醒|闹钟)(?:有哪些|有什么|有几个|是什么)")
_CANCEL = re.compile(r"(?:取消|删除|删掉|关掉|关闭|去掉|不要)(?:所有|全部)?(?:的)?(?:提醒|闹钟)")


def spoken_due(due: datetime, now: datetime) -> str:
    days = (due.date() - now.date()).days
    day = {0: "今天", 1: "明天", 2: "后天"}.get(days, f"{cn_int(due.month)}月{cn_int(due.day)}日")
    return day + clock_hm(due.hour, due.minute)


def spoken_delta(delta: timedelta) -> str:
    s = round(delta.total_seconds())
    if s < 60:
        return f"{cn_int(s)}秒"
    h, m = divmod(s // 60, 60)
    if m == 30:
        return f"{cn_count(h)}个半小时" if h else "半小时"
    return (f"{cn_count(h)}个小时" if h else "") + (f"{cn_count(m)}分钟" if m else "")


def _content(text: str, span: tuple[int, int]) -> str:
    rest = text[: span[0]] + " " + text[span[1]:]
    trig = next((t for t in ("提醒我", "叫醒我", "叫我", "喊我", "提醒") if t in rest), None)
    if trig is None:
        return ""
    rest = re.sub(r"\s+", "", rest.split(trig, 1)[1])
    return re.sub(r"^(?:一下|一声|你)+|(?:吧|哦|啊|呀|好吗|可以吗|好不好)$", "", rest)


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    if not any(t in text for t in _TRIGGERS):
        return None
    sched = ctx.scheduler
    now = ctx.now()
    if _CANCEL.search(text):
        kind = None if ("所有" in text or "全部" in text) else ("alarm" if "闹钟" in text else "reminder")
        n = sched.cancel(kind)
        what = "闹钟" if kind == "alarm" else "提醒"
        return ToolAnswer(NAME, f"好的，已取消{cn_count(n)}个{what}。" if n else f"现在没有{what}。")
    if _LIST.search(text):
        items = sched.items()
        if not items:
            return ToolAnswer(NAME, "你现在没有提醒和闹钟。")
        parts = [f"{spoken_due(datetime.fromtimestamp(r['due'], tz=now.tzinfo), now)}，"
                 f"{speakable(r['text']) if r['text'] else '闹钟'}" for r in items]
        return ToolAnswer(NAME, f"你有{cn_count(len(items))}个提醒：" + "；".join(parts) + "。")
    when = parse_when(text, now)
    if when is None:
        return ToolAnswer(NAME, "要在什么时候提醒你？比如说，二十分钟后提醒我吃药。")
    content = _content(text, when.span)
    is_alarm = "闹钟" in text or "叫醒" in text or (content in ("起床", "") and "叫我" in text)
    kind = "alarm" if is_alarm else "reminder"
    sched.add(when.due, content, kind)
    at = spoken_delta(when.relative) + "后" if when.relative is not None else spoken_due(when.due, now)
    if content:
        verb = "叫你" if "叫" in text or "喊" in text else "提醒你"
        return ToolAnswer(NAME, f"好的，{at}{verb}{speakable(content)}。")
    return ToolAnswer(NAME, f"好的，闹钟定在{at}。" if kind == "alarm" else f"好的，{at}提醒你。")
