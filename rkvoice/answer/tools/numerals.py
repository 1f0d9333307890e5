"""Numbers as spoken or written in Chinese transcripts -> exact values (Fraction). No eval."""

from __future__ import annotations

import re
from fractions import Fraction

DIGIT_VALUES = dict(zip("零〇一幺二两三四五六七八九", (0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9))) | {d: int(d) for d in "0123456789"}
SMALL_UNITS = {"十": 10, "百": 100, "千": 1000}

# One number: optional sign, an integer part in digits or Chinese, an optional fraction (点/.)
NUMBER_RE = re.compile(
    r"(?:负|-)?(?:百分之)?(?:\d+(?:\.\d+)?|[零〇一幺二两三四五六七八九十百千万亿\d]+(?:点[零〇一二三四五六七八九\d]+)?)"
)


def parse_int(s: str) -> int:
    """'三百六十五' -> 365, '十二' -> 12, '一万零五' -> 10005, '二零二六' -> 2026, '3万' -> 30000."""
    if not s:
        raise ValueError("empty number")
    if all(c in DIGIT_VALUES for c in s):
        # digits only: one digit, or a digit string read one by one (二零二六, 12)
        return int("".join(str(DIGIT_VALUES[c]) for c in s))
    # completed 亿 part, completed 万 part below it, the part below 万, the number just read
    total = section = group = num = 0
    ascii_run = ""  # ASCII digits written together (12万) make one number
    for c in s:
        if c in DIGIT_VALUES:
            ascii_run = ascii_run + c if c.isascii() else ""
            num = int(ascii_run) if ascii_run else DIGIT_VALUES[c]
            continue
        ascii_run = ""
        if c in SMALL_UNITS:
            group += (num or (1 if c == "十" else 0)) * SMALL_UNITS[c]
        elif c == "万":
            section += (group + num) * 10_000
            group = 0
        elif c == "亿":
            total += (section + group + num) * 100_000_000
            section = group = 0
        else:
            raise ValueError(f"not a number character: {c!r}")
        num = 0
    return total + section + group + num


def parse_number(s: str) -> Fraction:
    """A whole number token from NUMBER_RE -> exact value: '负五点五' -> -11/2, '3.25' -> 13/4."""
    sign = -1 if s.startswith(("负", "-")) else 1
    s = s[1:] if sign < 0 else s
    if s.startswith("百分之"):
        return sign * parse_number(s[3:]) / 100
    whole, _, frac = s.partition("." if "." in s else "点")
    value = Fraction(parse_int(whole)) if whole else Fraction(0)
    if frac:
        value += Fraction("0." + "".join(str(DIGIT_VALUES[c]) for c in frac))
    return sign * value
