"""Time, date and weekday questions: 现在几点 / 今天几号 / 星期几 / 明天星期几."""

from __future__ import annotations

from datetime import timedelta

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.match import has_any
from rkvoice.text.spoken_numbers import cn_date, cn_time

TIME_WORDS = ("几点", "多少点", "现在时间", "什么时间", "时间是多少", "时间多少", "看看时间", "看一下时间",
              "几点钟", "几时了", "报时", "什么时候了", "钟点")
DATE_WORDS = ("几号", "几月", "几日", "日期", "多少号", "哪一天", "哪天", "什么日子", "号数", "年月日")
WEEKDAY_WORDS = ("星期几", "礼拜几", "周几", "星期多少", "是星期", "是礼拜", "是周")
_DAY_OFFSETS = (("大后天", 3), ("后天", 2), ("明天", 1), ("明儿", 1), ("大前天", -3), ("前天", -2),
                ("昨天", -1), ("今天", 0), ("今儿", 0))
_WEEKDAYS = "一二三四五六日"
# Phrases that mention time words but ask something else.
_NOT_CLOCK = ("提醒", "叫我", "闹钟", "待办", "多长时间", "多久", "时间管理", "花时间", "时间表", "时差")


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    if has_any(text, _NOT_CLOCK) or len(text) > 20:
        return None
    wants_time = has_any(text, TIME_WORDS)
    wants_date = has_any(text, DATE_WORDS)
    wants_weekday = has_any(text, WEEKDAY_WORDS)
    if not (wants_time or wants_date or wants_weekday):
        return None
    now = ctx.now()
    offset, day_word = next(((off, word) for word, off in _DAY_OFFSETS if word in text), (0, "今天"))
    day = now + timedelta(days=offset)
    said = cn_date(day).replace(" ", "，") if wants_date else f"星期{_WEEKDAYS[day.weekday()]}" if wants_weekday else ""
    if offset:  # "明天几点日出" (no date or weekday asked): not a clock question
        return ToolAnswer("date", f"{day_word}是{said}。") if said else None
    parts = [f"今天是{said}"] if said else []
    if wants_time or not parts:
        parts.append(f"现在是{cn_time(now)}")
    return ToolAnswer("time" if wants_time else "date", "，".join(parts) + "。")
