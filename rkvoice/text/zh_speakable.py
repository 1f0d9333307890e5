"""Chinese speakable text: the project's own rules, applied before the wetext normaliser.

The Baker voice drops Latin letters and symbols, so all it says is written in Chinese characters.
wetext (WeNet's FSTs) reads most numbers well; these rules cover what it gets wrong or leaves:
clock times with a part of the day (22:05 晚上十点零五分), trailing decimal zeros (3.50 三点五),
units (kg 公斤), dotted numbers (IP, versions), phone and service numbers, 零下, long digit strings.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable

from rkvoice.text.spoken_numbers import clock_hm, cn_dec, cn_digits, cn_int

log = logging.getLogger(__name__)

_PERIOD_WORDS = "凌晨|早上|早晨|清晨|上午|中午|下午|傍晚|晚上|夜里|半夜|午夜"
_NUM = r"\d+(?:\.\d+)?"
_GROUPED_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?"

UNITS = {
    "km/h": "公里每小时", "m/s": "米每秒", "km": "公里", "kg": "公斤", "mg": "毫克", "g": "克",
    "cm": "厘米", "mm": "毫米", "nm": "纳米", "m": "米", "mL": "毫升", "ml": "毫升", "L": "升",
    "TB": "太字节", "GB": "吉字节", "MB": "兆字节", "KB": "千字节", "kB": "千字节",
    "Mbps": "兆比特每秒", "Gbps": "吉比特每秒", "GHz": "吉赫兹", "MHz": "兆赫兹", "kHz": "千赫兹",
    "Hz": "赫兹", "kWh": "千瓦时", "kW": "千瓦", "W": "瓦", "mAh": "毫安时", "mA": "毫安", "V": "伏",
    "ms": "毫秒", "min": "分钟", "s": "秒", "h": "小时", "dB": "分贝", "℉": "华氏度", "°F": "华氏度",
}
_UNIT_RE = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))

_SERVICE_CODES = {"110", "112", "114", "119", "120", "122", "12110", "12306", "12315", "12345",
                  "12358", "12369", "10086", "10010", "10000", "95588", "95533", "95555",
                  "95566", "95599", "95559"}
_PHONE_BEFORE = "(?:" + "|".join(sorted(
    ["拨打", "拨", "打", "致电", "呼叫", "电话", "号码", "热线", "联系", "报警", "急救", "火警", "匪警", "客服", "手机", "手机号", "短信"],
    key=len, reverse=True)) + ")"
_MEASURE = "分元块个次下岁人件条本张只名位天年月日号号楼层室米克斤%"


def _phone(s: str) -> str:
    return cn_digits(s).replace("一", "幺")


def _num(s: str) -> str:
    """A decimal, an integer, or digit by digit (a leading zero, more than 12 digits)."""
    s = s.replace(",", "")
    if "." in s:
        return cn_dec(s)
    if len(s) > 1 and s[0] == "0" or len(s) > 12:
        return cn_digits(s)
    return cn_int(int(s))


def _date(m: re.Match[str]) -> str:
    y, mo, d = m["y"], int(m["mo"]), int(m["d"])
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return m.group()
    year = cn_digits(str(int(y))) + "年" if y else ""
    return year + cn_int(mo) + "月" + cn_int(d) + ("号" if m["hao"] == "号" else "日")


def _clock(m: re.Match[str]) -> str:
    reading = clock_hm(int(m["h"]), int(m["m"]))
    if m["p"]:  # 下午 14:30 / 下午2:30: keep the written part of the day, drop ours
        reading = m["p"] + m["sp"] + reading[2:]
    if m["s"] and int(m["s"]):
        reading = reading.removesuffix("整") + cn_int(int(m["s"])) + "秒"
    return reading


def _temperature(m: re.Match[str]) -> str:
    name = "华氏度" if m["unit"] in ("℉", "°F") else "度" if m["unit"] == "度" else "摄氏度"
    return ("零下" if m["neg"] else "") + _num(m["n"]) + name


def _percent(m: re.Match[str]) -> str:
    return ("负" if m["neg"] else "") + ("千分之" if m["pc"] == "‰" else "百分之") + _num(m["n"])


_CURRENCY = {"¥": "元", "￥": "元", "$": "美元", "€": "欧元", "£": "英镑"}


# A number after a phone word, or after a phone number read out and 或/和/、 (拨打 110 或 120). It
# runs again while it reads something (at most PHONE_PASSES times): each pass reads the next number
# of a chain, whose context is the number the pass before read out.
PHONE_PASSES = 8
_PHONE_IN_CONTEXT = re.compile(
    rf"(?P<c>(?:{_PHONE_BEFORE}\s*[:：是为]?|[幺零二三四五六七八九]{{3,}}\s?(?:或者|或|和|、|/))\s*)"
    rf"(?P<n>\d{{3,}}(?:[- ]\d{{3,}})*)(?![\d.]|\s?[{_MEASURE}])")

# (pattern, replacement) in order; each turns digits into Chinese characters.
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (re.compile(r"(?<![\d.])(?P<y>\d{4})\s*(?P<sep>[-/.])\s*(?P<mo>\d{1,2})\s*(?P=sep)\s*(?P<d>\d{1,2})"
                r"(?P<hao>)(?![\d:/]|\.\d)"), _date),
    (re.compile(r"(?<!\d)(?P<y>\d{4})\s*年\s*(?P<mo>\d{1,2})\s*月\s*(?P<d>\d{1,2})\s*(?P<hao>[日号])"), _date),
    (re.compile(r"(?<!\d)(?P<y>)(?P<mo>\d{1,2})\s*月\s*(?P<d>\d{1,2})\s*(?P<hao>[日号])"), _date),
    (re.compile(r"(?<!\d)(\d{4})\s*年"), lambda m: cn_digits(m[1]) + "年"),
    (re.compile(r"(?<!\d)(\d{1,2})\s*月(?!份?[\d])"), lambda m: cn_int(int(m[1])) + "月"
     if 1 <= int(m[1]) <= 12 else m.group()),
    (re.compile(r"(?<![\d:.])(\d{1,2}[:：]\d{2})\s?[-~～—至]\s?(\d{1,2}[:：]\d{2})(?![\d:])"), lambda m: f"{m[1]}到{m[2]}"),
    (re.compile(rf"(?:(?P<p>{_PERIOD_WORDS})(?P<sp>\s?))?(?<![\d:.])(?P<h>[01]?\d|2[0-3])[:：](?P<m>[0-5]\d)"
                r"(?::(?P<s>[0-5]\d))?(?![\d:])"), _clock),
    (re.compile(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d]|\.\d)"), lambda m: cn_digits(m.group())),
    (re.compile(r"(?<!\d)(?:\+?86[- ]?)?1[3-9]\d[- ]?\d{4}[- ]?\d{4}(?!\d)"), lambda m: _phone(m.group())),
    (re.compile(r"(?<!\d)(?:0\d{2,3}-\d{7,8}|[48]00-?\d{3}-?\d{4})(?!\d)"), lambda m: _phone(m.group())),
    (_PHONE_IN_CONTEXT, lambda m: m["c"] + _phone(m["n"])),
    (re.compile(r"(?<![\d.])(?P<n>\d{3,5})(?![\d.])(?=\s?(?:急救|报警|火警|匪警|热线|服务|求助|电话))"),
     lambda m: _phone(m["n"]) if m["n"] in _SERVICE_CODES else m.group()),
    (re.compile(rf"(?<![\d.])(?P<a>{_NUM})\s?[~～—至]\s?(?P<b>{_NUM})"), lambda m: m["a"] + "到" + m["b"]),
    (re.compile(r"(?<![\d.-])(?P<a>[1-9]\d{0,3}(?:\.\d+)?)-(?P<b>[1-9]\d{0,3}(?:\.\d+)?|0)(?![\d-]|\.\d)"),
     lambda m: m["a"] + "到" + m["b"]),
    (re.compile(rf"(?:(?P<neg>(?<![\dA-Za-z.])[-−]|零下\s?)|(?<![\d.,]))(?P<n>{_NUM})\s?(?P<unit>℃|°C|°c|℉|°F|摄氏度|度(?=[^数]|$))"),
     _temperature),
    (re.compile(rf"(?:(?P<neg>(?<![\dA-Za-z.])[-−])|(?<![\d.,]))(?P<n>{_GROUPED_NUM}|{_NUM})\s?(?P<pc>[%％‰])"), _percent),
    (re.compile(rf"(?P<neg>(?<![\dA-Za-z.])[-−])?(?P<cur>[¥￥$€£])\s?(?P<n>{_GROUPED_NUM}|{_NUM})"
                r"(?P<scale>[万亿]?)(?![\d])"),
     lambda m: ("负" if m["neg"] else "") + _num(m["n"]) + m["scale"] + _CURRENCY[m["cur"]]),
    (re.compile(rf"(?<![\d.,])(?P<n>{_GROUPED_NUM}|{_NUM})\s?(?P<u>{_UNIT_RE})(?![A-Za-z])"),
     lambda m: _num(m["n"]) + UNITS[m["u"]]),
    (re.compile(r"(?<![\d.])(?P<n>\d{3,5})(?![\d.])"),
     lambda m: _phone(m["n"]) if m["n"] in _SERVICE_CODES and _alone(m) else m.group()),
    (re.compile(r"(?<![\d.])\d{13,}(?![\d.])"), lambda m: cn_digits(m.group())),
    (re.compile(r"(?<![\d.第])2(?=\s?点(?![\d零一二三四五六七八九]))"), lambda m: "两"),  # 下午2点 两点
]

# Standalone numbers not part of an expression wetext knows (fraction, ratio, arithmetic, range).
_EXPR_CHARS = "/:+=×÷*^~～-<>"
_PLAIN_NUMBER = re.compile(rf"(?<![\d.,])(?P<neg>[-−](?=\d))?(?P<n>{_GROUPED_NUM}|{_NUM})(?![\d])")


def _alone(m: re.Match[str]) -> bool:
    """A service code written on its own: nothing but spaces or punctuation around it."""
    before, after = m.string[: m.start()].rstrip(), m.string[m.end() :].lstrip()
    return not before[-1:].isalnum() and not after[:1].isalnum()


def _plain(m: re.Match[str]) -> str:
    prev, nxt = m.string[m.start() - 1 : m.start()], m.string[m.end() : m.end() + 1]
    if (prev and prev in _EXPR_CHARS and not m["neg"]) or (nxt and nxt in _EXPR_CHARS):
        return m.group()  # left to wetext: 3/4, 1:2, 1+1=2
    return ("负" if m["neg"] else "") + _num(m["n"])


_wetext_lock = threading.Lock()
_wetext = None


def _normalizer():
    global _wetext
    if _wetext is None:
        with _wetext_lock:
            if _wetext is None:
                from wetext import Normalizer

                log.debug("loading wetext zh TN normaliser")
                _wetext = Normalizer(lang="zh", operator="tn")
    return _wetext


_LEFTOVER_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_SYMBOL_WORDS = [(re.compile(r"(?<=[\u4e00-\u9fff])\s?[&＆]\s?(?=[\u4e00-\u9fff])"), "和"),
                 (re.compile(r"#(?=[零一二三四五六七八九十])"), "第")]


def zh_speakable(text: str) -> str:
    """Apply the Chinese rules to one run, then wetext to whatever still has digits."""
    if not any(c.isdigit() for c in text):
        return text
    for pattern, repl in _RULES:
        for _ in range(PHONE_PASSES if pattern is _PHONE_IN_CONTEXT else 1):
            text, n = pattern.subn(repl, text)
            if not n:
                break
    text = _PLAIN_NUMBER.sub(_plain, text)
    if any(c.isdigit() for c in text):
        text = _wetext_pieces(text)
        text = _LEFTOVER_DIGITS.sub(lambda m: _num(m.group()), text)
    for pattern, words in _SYMBOL_WORDS:
        text = pattern.sub(words, text)
    return text


def _wetext_pieces(text: str, size: int = 96) -> str:
    """wetext on bounded pieces that still hold digits. Its FST search grows fast with input
    length, so an unbreakable stretch longer than two pieces is left to the fallback reading."""
    from rkvoice.text.split import split_for_tts

    pieces = split_for_tts(text, size, size) if len(text) > size else [text]
    out = []
    for p in pieces:
        if len(p) <= 2 * size and any(c.isdigit() for c in p):
            core = p.strip()  # wetext reads the core; the whitespace at its ends stays
            start = p.find(core)
            try:
                p = p[:start] + _normalizer().normalize(core) + p[start + len(core) :]
            except RuntimeError as exc:  # no normalisation path: keep our own fallback
                log.debug("wetext gave no path for %r: %s", p, exc)
        out.append(p)
    return "".join(out)
