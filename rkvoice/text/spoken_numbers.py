"""Chinese readings of numbers, dates and clock times, written in Chinese characters.

A Chinese TTS front end reads ASCII digits badly (or drops them), so tools and the normaliser
write numbers out: cn_int(3893) -> 三千八百九十三, cn_time(22:05) -> 晚上十点零五分.
"""

from __future__ import annotations

import logging
import re
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation

from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

DIGITS = "零一二三四五六七八九"
_SMALL_UNITS = ("", "十", "百", "千")
_BIG_UNITS = ("", "万", "亿", "万亿")
_WEEKDAYS = "一二三四五六日"


def _under_10000(n: int) -> str:
    """Reading of 1..9999 without leading 零; inner zero runs read as one 零."""
    read = "".join(DIGITS[int(c)] + _SMALL_UNITS[3 - i] if c != "0" else "零" for i, c in enumerate(f"{n:04d}"))
    return re.sub("零+", "零", read).strip("零")


def cn_int(n: int) -> str:
    """Integer in Chinese: 10 十, 105 一百零五, 100200 十万零二百, 120000000 一亿二千万, -7 负七."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise RkvoiceError(Stage.TEXT, "bad-number", f"cn_int needs an int, got {n!r}; convert it first")
    if n < 0:
        return "负" + cn_int(-n)
    if n == 0:
        return "零"
    if n >= 10000 ** len(_BIG_UNITS):
        return cn_digits(str(n))
    groups: list[int] = []
    while n:
        groups.append(n % 10000)
        n //= 10000
    out: list[str] = []
    need_zero = False  # a zero digit sits between the last group read and the next one
    for i in range(len(groups) - 1, -1, -1):
        g = groups[i]
        if g == 0:
            need_zero = bool(out)
            continue
        if out and (need_zero or g < 1000):
            out.append("零")
        out.append(_under_10000(g) + _BIG_UNITS[i])
        need_zero = g % 10 == 0
    text = "".join(out)
    return text[1:] if text.startswith("一十") else text  # 一十五 -> 十五


def cn_count(n: int) -> str:
    """A count before a measure word or 点: 2 -> 两 (两小时, 两条, 两点), else the plain reading."""
    return "两" if n == 2 else cn_int(n)


def cn_digits(s: str) -> str:
    """Digit by digit; '.' reads 点, anything else is dropped: "192.168.0.103" -> 一九二点一六八点零点一零三."""
    return "".join(DIGITS[int(c)] if c.isdecimal() else "点" if c == "." else "" for c in str(s))


def cn_dec(x: float | str) -> str:
    """Decimal in Chinese: 45.2 四十五点二, "3.50" 三点五, -5.5 负五点五, 0.05 零点零五, "12.0" 十二."""
    try:
        d = Decimal(str(x).strip())
    except InvalidOperation:
        raise RkvoiceError(Stage.TEXT, "bad-number", f"cn_dec needs a decimal number, got {x!r}") from None
    if not d.is_finite():
        raise RkvoiceError(Stage.TEXT, "bad-number", f"cn_dec needs a finite number, got {x!r}")
    sign = "负" if d < 0 else ""
    whole, _, frac = format(abs(d), "f").partition(".")
    text = cn_int(int(whole))
    frac = frac.rstrip("0")
    if frac:
        text += "点" + cn_digits(frac)
    elif text == "零":
        sign = ""  # -0.0 reads 零
    return sign + text


def cn_date(d: date | datetime) -> str:
    """Date with weekday: 2026-10-21 -> 二零二六年十月二十一日 星期三."""
    if not isinstance(d, date):
        raise RkvoiceError(Stage.TEXT, "bad-date", f"cn_date needs a date or datetime, got {d!r}")
    return f"{cn_digits(str(d.year))}年{cn_int(d.month)}月{cn_int(d.day)}日 星期{_WEEKDAYS[d.weekday()]}"


_PERIODS = ((4, "凌晨"), (8, "早上"), (11, "上午"), (12, "中午"), (17, "下午"))
"""Parts of the day, each with its last 24-hour clock hour (after 17: 晚上)."""


def clock_hm(hour: int, minute: int) -> str:
    """12-hour reading with period: (22, 5) -> 晚上十点零五分, (14, 0) -> 下午两点整."""
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise RkvoiceError(Stage.TEXT, "bad-time", f"clock time {hour}:{minute:02d} is out of range 0:00-23:59")
    tail = "整" if minute == 0 else ("零" if minute < 10 else "") + cn_int(minute) + "分"
    period = next((name for last, name in _PERIODS if hour <= last), "晚上")
    return period + cn_count(hour % 12 or 12) + "点" + tail


def cn_time(t: time | datetime) -> str:
    """Clock time: 22:05 晚上十点零五分, 14:30 下午两点三十分, 00:30 凌晨十二点三十分."""
    if not isinstance(t, (time, datetime)):
        raise RkvoiceError(Stage.TEXT, "bad-time", f"cn_time needs a time or datetime, got {t!r}")
    return clock_hm(t.hour, t.minute)
