"""Spoken arithmetic: "12乘以8等于多少", "三百六十五除以七" -> a Chinese answer. Never eval.

A tiny recursive-descent parser over tokens (numbers and + - × ÷), exact with Fraction.
The whole utterance (minus polite prefixes and "等于多少" suffixes) must be an expression,
otherwise the tool declines and the LLM answers.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.numerals import NUMBER_RE, parse_number
from rkvoice.text.cn import cn_dec, cn_int

NAME = "arithmetic"

_PREFIX = re.compile(r"^(?:请问|请|你|帮我|麻烦|给我|小智)*(?:算一下|算算|计算一下|计算|算一算|算)?")
_SUFFIX = re.compile(
    r"(?:等于|是|得|得到|结果是|的结果是|结果)?(?:多少|几|啥|什么)?(?:呢|啊|呀|吗|嘛|了)*$"
)
_OPS: tuple[tuple[str, str], ...] = (
    ("加上", "+"), ("加", "+"), ("+", "+"),
    ("减去", "-"), ("减掉", "-"), ("减", "-"), ("−", "-"), ("-", "-"),
    # 成以/成已/乘已: ASR mishearings of 乘以 (Whisper wrote "九乘以九" as "九成已九"); only ever read
    # between two numbers of a whole-utterance expression, so "八成已经好了" stays no arithmetic
    ("乘以", "*"), ("乘上", "*"), ("乘已", "*"), ("成以", "*"), ("成已", "*"),
    ("乘", "*"), ("×", "*"), ("*", "*"), ("x", "*"), ("✕", "*"),
    ("除以", "/"), ("÷", "/"), ("/", "/"), ("^", "^"),
)
OP_WORDS = {"+": "加", "-": "减", "*": "乘以", "/": "除以"}
_POWERS = ((re.compile(r"的平方"), "^2"), (re.compile(r"的立方"), "^3"),
           (re.compile(r"的([零一二两三四五六七八九十百\d]+)次方"), r"^\1"))
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**16
"""Results beyond this are not read out (and huge powers are never computed)."""


class _Parser:
    def __init__(self, tokens: list[tuple[str, object]]) -> None:
        self.tokens = tokens
        self.i = 0

    def _peek(self) -> tuple[str, object] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _number(self) -> Fraction:
        tok = self._peek()
        if tok is None or tok[0] != "num":
            raise ValueError("expected a number")
        self.i += 1
        return tok[1]  # type: ignore[return-value]

    def _power(self) -> Fraction:
        base = self._number()
        tok = self._peek()
        if tok is None or tok[1] != "^":
            return base
        self.i += 1
        exp = self._number()
        if exp.denominator != 1 or (base == 0 and exp < 0):
            raise ValueError("exponent out of range")
        if abs(exp) > MAX_EXPONENT and abs(base) != 1:
            raise OverflowError
        return base ** int(exp)

    def _term(self) -> Fraction:
        value = self._power()
        while (tok := self._peek()) is not None and tok[1] in ("*", "/"):
            self.i += 1
            rhs = self._power()
            if tok[1] == "*":
                value *= rhs
            else:
                if rhs == 0:
                    raise ZeroDivisionError
                value /= rhs
        return value

    def parse(self) -> Fraction:
        value = self._term()
        while (tok := self._peek()) is not None and tok[1] in ("+", "-"):
            self.i += 1
            rhs = self._term()
            value = value + rhs if tok[1] == "+" else value - rhs
        if self.i != len(self.tokens):
            raise ValueError("trailing tokens")
        return value


def tokenize(expr: str) -> list[tuple[str, object]] | None:
    """Numbers and operators, or None if anything else is in the text."""
    tokens: list[tuple[str, object]] = []
    i = 0
    while i < len(expr):
        expect_number = not tokens or tokens[-1][0] == "op"
        m = NUMBER_RE.match(expr, i) if expect_number else None
        if m and m.end() > i:
            try:
                tokens.append(("num", parse_number(m.group())))
            except (ValueError, KeyError):
                return None
            i = m.end()
            continue
        for word, op in _OPS:
            if expr.startswith(word, i):
                tokens.append(("op", op))
                i += len(word)
                break
        else:
            return None
    return tokens


def speak_number(x: Fraction) -> tuple[str, bool]:
    """(reading, exact): integers exactly, other values to at most two decimals."""
    if x.denominator == 1:
        return cn_int(int(x)), True
    rounded = round(x, 2)
    exact = rounded == x
    text = cn_dec(f"{float(rounded):.2f}")
    return text, exact


def evaluate(text: str) -> tuple[list[tuple[str, object]], Fraction] | None:
    expr = _SUFFIX.sub("", _PREFIX.sub("", text, count=1), count=1)
    for pat, rep in _POWERS:
        expr = pat.sub(rep, expr)
    tokens = tokenize(expr)
    if not tokens or sum(1 for t in tokens if t[0] == "op") < 1:
        return None
    parser = _Parser(tokens)
    return tokens, parser.parse()


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    try:
        result = evaluate(text)
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
    words = []
    i = 0
    while i < len(tokens):
        kind, v = tokens[i]
        if kind == "op" and v == "^":
            exp = tokens[i + 1][1]
            words.append("的平方" if exp == 2 else "的立方" if exp == 3 else f"的{speak_number(exp)[0]}次方")  # type: ignore[arg-type]
            i += 2
            continue
        words.append(speak_number(v)[0] if kind == "num" else OP_WORDS[v])  # type: ignore[index,arg-type]
        i += 1
    spoken = "".join(words)
    answer, exact = speak_number(value)
    return ToolAnswer(NAME, f"{spoken}{'等于' if exact else '约等于'}{answer}。")
