"""Numbers as spoken or written in Chinese transcripts -> exact values (Fraction). No eval."""

from __future__ import annotations

import re
from fractions import Fraction

DIGIT_VALUES = {
    "零": 0, "〇": 0, "一": 1, "幺": 1, "二": 2, "两": 2, "三": 3, "四": 4,
    "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
}
for _d in "0123456789":
    DIGIT_VALUES[_d] = int(_d)
SMALL_UNITS = {"十": 10, "百": 100, "千": 1000}
BIG_UNITS = {"万": 10_000, "亿": 100_000_000}

CN_INT_CHARS = "零〇一幺二两三四五六七八九十百千万亿0123456789"
# One number: optional sign, an integer part in digits or Chinese, an optional fraction (点/.)
NUMBER_RE = re.compile(
    r"(?:负|-)?(?:百分之)?(?:\d+(?:\.\d+)?|[零〇一幺二两三四五六七八九十百千万亿\d]+(?:点[零〇一二三四五六七八九\d]+)?)"
)


def parse_int(s: str) -> int:
    """'三百六十五' -> 365, '十二' -> 12, '一万零五' -> 10005, '二零二六' -> 2026, '3万' -> 30000."""
    if not s:
        raise ValueError("empty number")
    if s.isdigit() and s.isascii():
        return int(s)
    if all(c in DIGIT_VALUES for c in s):
        # digits only: one digit, or a digit string read one by one (二零二六, 12)
        return int("".join(str(DIGIT_VALUES[c]) for c in s))
    total = 0  # completed 亿 part
    section = 0  # completed 万 part below the current 亿
    group = 0  # below 万
    num = 0
    digits_run = ""
    for c in s:
        if c in DIGIT_VALUES:
            digits_run += str(DIGIT_VALUES[c])
            num = int(digits_run) if c.isascii() else DIGIT_VALUES[c]
            if not c.isascii():
                digits_run = ""
        elif c in SMALL_UNITS:
            digits_run = ""
            if num == 0 and c == "十":
                num = 1
            group += num * SMALL_UNITS[c]
            num = 0
        elif c == "万":
            digits_run = ""
            section += (group + num) * 10_000
            group = num = 0
        elif c == "亿":
            digits_run = ""
            total += (section + group + num) * 100_000_000
            section = group = num = 0
        else:
            raise ValueError(f"not a number character: {c!r}")
    return total + section + group + num


def parse_number(s: str) -> Fraction:
    """A whole number token from NUMBER_RE -> exact value: '负五点五' -> -11/2, '3.25' -> 13/4."""
    neg = s.startswith(("负", "-"))
    if neg:
        s = s[1:]
    if s.startswith("百分之"):
        value = parse_number(s[3:]) / 100
        return -value if neg else value
    if "." in s:
        whole, frac = s.split(".", 1)
    elif "点" in s:
        whole, frac = s.split("点", 1)
    else:
        whole, frac = s, ""
    value = Fraction(parse_int(whole)) if whole else Fraction(0)
    if frac:
        digits = "".join(str(DIGIT_VALUES[c]) for c in frac)
        value += Fraction(int(digits), 10 ** len(digits))
    return -value if neg else value
