"""Spoken arithmetic: "12乘以8等于多少", "三百六十五除以七" -> a Chinese answer; exact (Fraction), never eval.
The whole utterance (minus polite prefixes and "等于多少" suffixes) must be an expression, else the LLM answers.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from fractions import Fraction

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.numerals import NUMBER_RE, parse_number
from rkvoice.text.spoken_numbers import cn_dec, cn_int

NAME = "arithmetic"

_LEAD = ("请问", "请", "你", "帮我", "麻烦", "给我")

_SUFFIX = re.compile(
    r"(?:等于|是|得|得到|结果是|的结果是|结果)?(?:多少|几|啥|什么)?(?:呢|啊|呀|吗|嘛|了)*$"
)
_OPS = {
    "加上": "+", "加": "+", "+": "+",
    "减去": "-", "减掉": "-", "减": "-", "−": "-", "-": "-",
    # 成以/成已/乘已: ASR mishearings of 乘以 (Whisper wrote "九乘以九" as "九成已九"); only ever read
    # between two numbers of a whole-utterance expression, so "八成已经好了" stays no arithmetic
    "乘以": "*", "乘上": "*", "乘已": "*", "成以": "*", "成已": "*",
    "乘": "*", "×": "*", "*": "*", "x": "*", "✕": "*",
    "除以": "/", "÷": "/", "/": "/", "^": "^",
}
_OP_RE = re.compile("|".join(map(re.escape, _OPS)))  # tried in order: 加上 before 加
OP_WORDS = {"+": "加", "-": "减", "*": "乘以", "/": "除以", "^": "的"}
_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_POWERS = ((re.compile(r"的平方"), "^2"), (re.compile(r"的立方"), "^3"),
           (re.compile(r"的([零一二两三四五六七八九十百\d]+)次方"), r"^\1"))
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**16
"""Results beyond this are not read out (and huge powers are never computed)."""


Token = Fraction | str
"""A number, or an operator (+ - * / ^)."""


class _Parser:
    """+ and - over * and / over ^ (one exponent per number), left to right."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens: list[Token | None] = [*tokens, None]  # None marks the end
        self.i = 0

    def _op(self, ops: str) -> str | None:
        """The next token, consumed, if it is one of ``ops``."""
        tok = self.tokens[self.i]
        if not isinstance(tok, str) or tok not in ops:
            return None
        self.i += 1
        return tok

    def _number(self) -> Fraction:
        tok = self.tokens[self.i]
        if not isinstance(tok, Fraction):
            raise ValueError("expected a number")
        self.i += 1
        return tok

    def _power(self) -> Fraction:
        base = self._number()
        if self._op("^") is None:
            return base
        exp = self._number()
        if exp.denominator != 1 or (base == 0 and exp < 0):
            raise ValueError("exponent out of range")
        if abs(exp) > MAX_EXPONENT and abs(base) != 1:
            raise OverflowError
        return base ** int(exp)

    def _chain(self, ops: str, operand: Callable[[], Fraction]) -> Fraction:
        value = operand()
        while op := self._op(ops):
            value = _APPLY[op](value, operand())  # Fraction division by zero raises ZeroDivisionError
        return value

    def parse(self) -> Fraction:
        value = self._chain("+-", lambda: self._chain("*/", self._power))
        if self.tokens[self.i] is not None:
            raise ValueError("trailing tokens")
        return value


def tokenize(expr: str) -> list[Token] | None:
    """Numbers and operators, or None if anything else is in the text."""
    tokens: list[Token] = []
    i = 0
    while i < len(expr):
        m = NUMBER_RE.match(expr, i) if not tokens or isinstance(tokens[-1], str) else None
        if m and m.end() > i:
            try:
                tokens.append(parse_number(m.group()))
            except (ValueError, KeyError):
                return None
        elif m := _OP_RE.match(expr, i):
            tokens.append(_OPS[m.group()])
        else:
            return None
        i = m.end()
    return tokens


def speak_number(x: Fraction) -> tuple[str, bool]:
    """(reading, exact): integers exactly, other values to at most two decimals."""
    if x.denominator == 1:
        return cn_int(int(x)), True
    rounded = round(x, 2)
    return cn_dec(f"{float(rounded):.2f}"), rounded == x


@functools.lru_cache(maxsize=4)
def _prefix(name: str) -> re.Pattern[str]:
    """Polite words and the assistant's ``name`` before the sum, then the verb (算一下)."""
    lead = "|".join((*_LEAD, re.escape(name)) if name else _LEAD)
    return re.compile(rf"^(?:{lead})*(?:算一下|算算|计算一下|计算|算一算|算)?")


def evaluate(text: str, name: str = "") -> tuple[list[Token], Fraction] | None:
    expr = _SUFFIX.sub("", _prefix(name).sub("", text, count=1), count=1)
    for pat, rep in _POWERS:
        expr = pat.sub(rep, expr)
    tokens = tokenize(expr)
    if not tokens or not any(isinstance(t, str) for t in tokens):
        return None
    return tokens, _Parser(tokens).parse()


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    try:
        result = evaluate(text, ctx.name)
    except ZeroDivisionError:
        return ToolAnswer(NAME, "零不能做除数，这道题没有答案。")
    except OverflowError:
        return ToolAnswer(NAME, "这个结果太大了，我读不出来。")
    except ValueError:
        return None
    if result is None:
        return None
    tokens, value = result
    if abs(value) >= MAX_MAGNITUDE:
        return ToolAnswer(NAME, "这个结果太大了，我读不出来。")
    spoken = ""
    for prev, tok in zip(["", *tokens], tokens):
        if isinstance(tok, str):
            spoken += OP_WORDS[tok]
        elif prev == "^":  # 的 + 平方 / 立方 / N次方
            spoken += "平方" if tok == 2 else "立方" if tok == 3 else f"{cn_int(int(tok))}次方"
        else:
            spoken += speak_number(tok)[0]
    answer, exact = speak_number(value)
    return ToolAnswer(NAME, f"{spoken}{'等于' if exact else '约等于'}{answer}。")
