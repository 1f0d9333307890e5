"""Transcript clean-up for matching: punctuation out, common ASR homophones mapped back."""

from __future__ import annotations

import re

_CLOCK_COLON = re.compile(r"(\d{1,2})[:：](\d{2})")
_PUNCT = re.compile(r"[\s，。！？、；：“”‘’\"'!?,;:（）()《》【】\[\]…~～·-]+")

# Whole-word mishearings seen from Chinese ASR, mapped to what the user most likely said.
HOMOPHONES: tuple[tuple[str, str], ...] = (
    ("鸡点", "几点"), ("挤点", "几点"), ("几店", "几点"), ("几电", "几点"), ("几点种", "几点钟"),
    ("己点", "几点"), ("即点", "几点"),
    ("几好", "几号"), ("几耗", "几号"), ("几毫", "几号"),
    ("心期", "星期"), ("星其", "星期"), ("新期", "星期"), ("行期", "星期"),
    ("代办", "待办"), ("待半", "待办"), ("带办", "待办"), ("呆办", "待办"),
    ("题醒", "提醒"), ("提行", "提醒"), ("体醒", "提醒"), ("提星", "提醒"),
    ("闹种", "闹钟"), ("闹中", "闹钟"), ("脑钟", "闹钟"),
    ("稳度", "温度"), ("文度", "温度"), ("问度", "温度"),
    ("内纯", "内存"), ("内村", "内存"),
    ("乘已", "乘以"), ("乘与", "乘以"), ("成以", "乘以"), ("程以", "乘以"), ("乘于", "乘以"),
    ("除于", "除以"), ("除已", "除以"), ("出以", "除以"), ("初以", "除以"),
    ("加尚", "加上"), ("减区", "减去"),
)

_TRAD = str.maketrans("點鐘號週幾溫記憶體鬧腦辦時間還讓請問運計算減乘於兩萬億", "点钟号周几温记忆体闹脑办时间还让请问运计算减乘于两万亿")


def clean(text: str) -> str:
    """Lower-case, simplified, no punctuation or spaces, homophones fixed."""
    s = _CLOCK_COLON.sub(r"\1点\2", text.translate(_TRAD))  # 7:30 -> 7点30 before ':' goes
    s = _PUNCT.sub("", s).lower()
    for wrong, right in HOMOPHONES:
        s = s.replace(wrong, right)
    return s


def has_any(text: str, words: tuple[str, ...] | list[str]) -> bool:
    return any(w in text for w in words)
