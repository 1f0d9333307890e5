"""English speakable text: clock times, money, numbers and abbreviations written as words.

Rules, in order (times before numbers, so 9:30 is not read as 9 and 30):
"H:MM a.m./p.m." and 24-hour "HH:MM" -> "two thirty p m"; "$80" -> "eighty dollars";
numbers of three or more digits digit by digit ("911" -> "nine one one"); one- and two-digit
numbers as words; "Dr." -> "Doctor"; "a.m."/"p.m." -> "a m"/"p m".
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_ORD_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)


def words_0_99(n: int) -> str:
    """0..99 as words: 7 seven, 45 forty five."""
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])


def words_int(n: int) -> str:
    """Any integer as words (natural reading): 1200 one thousand two hundred."""
    if n < 0:
        return "minus " + words_int(-n)
    if n < 100:
        return words_0_99(n)
    if n < 1000:
        h, r = divmod(n, 100)
        return _ONES[h] + " hundred" + ("" if r == 0 else " " + words_0_99(r))
    size, name = next(s for s in ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
                      if n >= s[0])
    if n >= size * 1000:
        return digits(str(n))
    q, r = divmod(n, size)
    return words_int(q) + " " + name + ("" if r == 0 else " " + words_int(r))


def digits(s: str) -> str:
    """Digit by digit: "911" -> "nine one one"; other characters are dropped."""
    return " ".join(_ONES[int(c)] for c in s if c.isdigit())


def number(s: str) -> str:
    """A plain digit string by the rules: one or two digits as words, longer digit by digit."""
    return words_0_99(int(s)) if len(s) <= 2 else digits(s)


def ordinal(n: int) -> str:
    head, _, last = words_int(n).rpartition(" ")
    last = _ORD_IRREGULAR.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return (head + " " if head else "") + last


def clock(hour: int, minute: int, suffix: str | None = None) -> str:
    """Spoken clock time; 24-hour input gets a m / p m: (14, 30) two thirty p m, (9, 0) nine o'clock a m."""
    if suffix is None:
        suffix = "a m" if hour < 12 else "p m"
    h12 = hour % 12 or 12
    tail = "o'clock" if minute == 0 else ("oh " if minute < 10 else "") + words_0_99(minute)
    return f"{words_0_99(h12)} {tail} {suffix}"


_AMPM = r"(?:\s*(?P<ap>[aApP])\.?\s?[mM]\.?(?![A-Za-z]))"
_TIME = re.compile(r"(?<![\d:.])(?P<h>[01]?\d|2[0-3]):(?P<m>[0-5]\d)(?![\d:])" + _AMPM + "?")
_HOUR_AMPM = re.compile(r"(?<![\d:.])(?P<h>1[0-2]|0?[1-9])" + _AMPM)
_BARE_AMPM = re.compile(r"(?<![A-Za-z])(?P<ap>[aApP])\.[mM]\.(?![A-Za-z])")
_ISO_DATE = re.compile(r"(?<![\d.])(\d{4})-(0?[1-9]|1[0-2])-(0?[1-9]|[12]\d|3[01])(?![\d])")
_MONEY = re.compile(r"(?<![\w$])(?P<neg>-)?\$\s?(?P<int>\d{1,3}(?:,\d{3})+|\d+)"
                    r"(?:\.(?P<cents>\d{2})(?!\d)|\.(?P<frac>\d+))?(?![\d.]\d)"
                    r"(?P<scale>\s?(?:thousand|million|billion)\b)?")
_PERCENT = re.compile(r"(?<![\d.])(?P<neg>-)?(?P<n>\d+(?:\.\d+)?)\s?%")
_ORDINAL = re.compile(r"(?<![\d.])(\d{1,3})(st|nd|rd|th)\b", re.IGNORECASE)
_RANGE = re.compile(r"(?<![\d.:,-])(\d{1,2})\s?[-–~]\s?(\d{1,2})(?![\d.:,])")
_GROUPED = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])")
_DECIMAL = re.compile(r"(?<![\d.])(?P<neg>-)?(?P<i>\d+)\.(?P<f>\d+)(?![\d.])")
_DOTTED = re.compile(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d])")
_NEGATIVE = re.compile(r"(?<![\w.-])-(?=\d)")
_DIGIT_DASH = re.compile(r"(?<=\d)-(?=\d)")
_INT = re.compile(r"\d+")
_UNITS = {"km": "kilometers", "kg": "kilograms", "mg": "milligrams", "ml": "milliliters",
          "cm": "centimeters", "mm": "millimeters", "lbs": "pounds", "lb": "pounds", "mph": "miles per hour",
          "°F": "degrees Fahrenheit", "°C": "degrees Celsius", "℃": "degrees Celsius", "℉": "degrees Fahrenheit",
          "GB": "gigabytes", "MB": "megabytes", "kHz": "kilohertz", "MHz": "megahertz", "GHz": "gigahertz"}
_UNIT = re.compile(r"(?<=\d)\s?(" + "|".join(sorted(map(re.escape, _UNITS), key=len, reverse=True))
                   + r")(?![A-Za-z])")
_TITLES = [(re.compile(r"\bDr\.(?=\s|$)"), "Doctor"), (re.compile(r"\bMr\.(?=\s|$)"), "Mister"),
           (re.compile(r"\bMrs\.(?=\s|$)"), "Missus"), (re.compile(r"\bMs\.(?=\s|$)"), "Miz"),
           (re.compile(r"\bNo\.\s?(?=\d)"), "number ")]
_SYMBOLS = [(re.compile(r"\s*&\s*"), " and "), (re.compile(r"(?<=\d)\s?[x×]\s?(?=\d)"), " by "),
            (re.compile(r"#(?=\d)"), "number ")]


def _year(y: str) -> str:
    hi, lo = int(y[:2]), int(y[2:])
    if lo == 0:
        return words_0_99(hi) + " hundred" if hi % 10 else words_int(int(y))
    return words_0_99(hi) + " " + ("oh " + _ONES[lo] if lo < 10 else words_0_99(lo))


def _ampm(ap: str) -> str:
    return "a m" if ap in "aA" else "p m"


def _money(m: re.Match[str]) -> str:
    whole = int(m["int"].replace(",", ""))
    cents = int(m["cents"] or 0)
    neg = "minus " if m["neg"] else ""
    if m["scale"] or m["frac"]:
        amount = _decimal_plain(str(whole) + ("." + (m["frac"] or m["cents"]) if m["frac"] or cents else ""))
        return neg + amount + (" " + m["scale"].strip() if m["scale"] else "") + " dollars"
    parts = []
    if whole or not cents:
        parts.append(words_int(whole) + (" dollar" if whole == 1 else " dollars"))
    if cents:
        parts.append(words_0_99(cents) + (" cent" if cents == 1 else " cents"))
    return neg + " and ".join(parts)


def en_speakable(text: str) -> str:
    """Apply the English rules to one run of text (already cleaned of markup and citations)."""
    if not any(c.isdigit() or c in "$.&#%°℃℉" for c in text):
        return text
    text = _ISO_DATE.sub(lambda m: f"{_MONTHS[int(m[2]) - 1]} {ordinal(int(m[3]))}, {_year(m[1])}", text)
    text = _TIME.sub(lambda m: clock(int(m["h"]), int(m["m"]), _ampm(m["ap"]) if m["ap"] else None), text)
    text = _HOUR_AMPM.sub(lambda m: words_0_99(int(m["h"])) + " " + _ampm(m["ap"]), text)
    text = _BARE_AMPM.sub(lambda m: _ampm(m["ap"]), text)
    for pattern, words in _TITLES:
        text = pattern.sub(words, text)
    text = _MONEY.sub(_money, text)
    text = _PERCENT.sub(lambda m: ("minus " if m["neg"] else "") + _decimal_plain(m["n"]) + " percent", text)
    text = _US_DATE.sub(lambda m: f"{_MONTHS[int(m[1]) - 1]} {ordinal(int(m[2]))}, {_year(m[3])}", text)
    text = _FRACTION.sub(_fraction, text)
    text = _UNIT.sub(lambda m: " " + _UNITS[m[1]], text)
    text = _DOTTED.sub(lambda m: " dot ".join(map(number, m.group().split("."))), text)
    text = _ORDINAL.sub(lambda m: ordinal(int(m[1])), text)
    text = _GROUPED.sub(lambda m: _decimal_plain(m.group().replace(",", "")), text)
    text = _DECIMAL.sub(lambda m: ("minus " if m["neg"] else "") + number(m["i"]) + " point " + digits(m["f"]), text)
    text = _RANGE.sub(lambda m: f"{m[1]} to {m[2]}", text)
    for pattern, words in _SYMBOLS:
        text = pattern.sub(words, text)
    text = _NEGATIVE.sub("minus ", text)
    text = _DIGIT_DASH.sub(" ", text)  # 555-1234: a pause, not "minus"
    text = _INT.sub(lambda m: number(m.group()), text)
    return text


def _decimal_plain(s: str) -> str:
    """A quantity (percent): the whole part as a natural number, decimals digit by digit."""
    whole, _, frac = s.partition(".")
    return words_int(int(whole)) + (" point " + digits(frac) if frac else "")


_US_DATE = re.compile(r"(?<![\d/])(0?[1-9]|1[0-2])/(0?[1-9]|[12]\d|3[01])/(\d{4})(?![\d/])")
_FRACTION = re.compile(r"(?<![\d/.])(\d{1,2})/(\d{1,2})(?![\d/])")
_FRACTION_NAMES = {(1, 2): "one half", (1, 3): "one third", (2, 3): "two thirds", (1, 4): "one quarter",
                   (3, 4): "three quarters", (24, 7): "twenty four seven"}


def _fraction(m: re.Match[str]) -> str:
    a, b = int(m[1]), int(m[2])
    return _FRACTION_NAMES.get((a, b)) or f"{words_0_99(a)} over {words_0_99(b)}"
