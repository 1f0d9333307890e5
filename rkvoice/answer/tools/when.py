"""Spoken times for reminders: "20分钟后", "一个半小时后", "明天早上七点", "下午三点半"."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from rkvoice.answer.tools.numerals import parse_int

_N = r"[零一二两三四五六七八九十百\d]+"
RELATIVE = re.compile(
    r"(?:过)?(?P<n>" + _N + r"|半)?(?:个)?(?P<half1>半)?(?P<unit>秒钟|秒|分钟|分|小时|钟头|天)(?P<half2>半)?"
    r"(?:以后|之后|后)"
)
ABSOLUTE = re.compile(
    r"(?P<day>今天|明天|后天|大后天|今晚|明早|明晚|今早)?(?P<period>早上|早晨|清晨|上午|中午|下午|傍晚|晚上|夜里|半夜|凌晨)?"
    r"(?P<h>" + _N + r")(?:点|时|:)(?:钟)?(?P<m>" + _N + r"(?:分)?|半|一刻|三刻|整)?"
)
_DAY_OFFSET = {"今天": 0, "今晚": 0, "今早": 0, "明天": 1, "明早": 1, "明晚": 1, "后天": 2, "大后天": 3}
_DAY_PERIOD = {"今晚": "晚上", "明晚": "晚上", "明早": "早上", "今早": "早上"}
_MINUTE_WORDS = {"半": 30, "一刻": 15, "三刻": 45, "整": 0}
_UNIT_SECONDS = {"秒钟": 1, "秒": 1, "分钟": 60, "分": 60, "小时": 3600, "钟头": 3600, "天": 86400}


@dataclass(frozen=True)
class When:
    due: datetime
    span: tuple[int, int]
    """Where the time expression sits in the text (to cut it out of the reminder's content)."""
    relative: timedelta | None = None


def _hour24(h: int, period: str | None) -> int:
    if h == 12 and period in ("凌晨", "半夜", "夜里"):
        return 0
    pm = period in ("下午", "傍晚", "晚上") or (period in ("夜里", "半夜") and h >= 6) or (period == "中午" and h < 6)
    return h + 12 if pm and h < 12 else h


def parse_when(text: str, now: datetime) -> When | None:
    m = RELATIVE.search(text)
    if m:
        unit = _UNIT_SECONDS[m.group("unit")]
        n = m.group("n")
        amount = 0.5 if n == "半" else float(parse_int(n)) if n else 1.0
        if (m.group("half1") or m.group("half2")) and n != "半":
            amount += 0.5
        delta = timedelta(seconds=amount * unit)
        return When(now + delta, m.span(), delta) if delta.total_seconds() > 0 else None
    m = ABSOLUTE.search(text)
    if not m:
        return None
    h = parse_int(m.group("h"))
    mm = m.group("m")
    minute = _MINUTE_WORDS[mm] if mm in _MINUTE_WORDS else parse_int(mm.rstrip("分")) if mm else 0
    day = m.group("day")
    period = m.group("period") or _DAY_PERIOD.get(day or "")
    hour = _hour24(h, period)
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        return None
    base = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if day is not None:
        return When(base + timedelta(days=_DAY_OFFSET[day]), m.span())
    # the next such time; "三点提醒我": the next 3 o'clock, morning or afternoon, whichever comes first
    later = (0, 12, 24) if period is None and hour < 12 else (0, 24)
    return When(next(t for t in (base + timedelta(hours=h) for h in later) if t > now), m.span())
