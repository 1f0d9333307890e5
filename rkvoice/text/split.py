"""Cut text into pieces for TTS: English sentences, and size-bounded pieces for any language.

Both functions keep every character: ``"".join(pieces)`` gives back the text (``sentences``
after collapsing whitespace). Cut points come from :class:`CutPoints`, which the streaming
chunker shares, so a number (2026-10-21, 3.14, 1,000, 22:05, 192.168.0.1), a Latin word, a URL
or a bracketed stretch is never cut in two.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from bisect import bisect_left, bisect_right
from itertools import pairwise

from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)

ABBREVIATIONS = frozenset({"Dr.", "Mr.", "Mrs.", "Ms.", "St.", "No."})
# Extra words whose '.' never ends a sentence for TTS packing (not used by `sentences`).
_SOFT_ABBREVIATIONS = ABBREVIATIONS | {"Prof.", "Jr.", "Sr.", "vs.", "etc.", "e.g.", "i.e.", "Mt.", "Inc."}

SENTENCE_MARKS = "。！？；.!?;"
CLAUSE_MARKS = "，、,：:"
_ASCII_MARKS = ".!?;,:"
CLOSERS = "\"'”’」』）)]】》〉"
_PAIRS = {"(": ")", "[": "]", "{": "}", "（": "）", "【": "】", "「": "」", "『": "』",
          "《": "》", "〈": "〉", "“": "”", "‘": "’"}
_CLOSING = {v: k for k, v in _PAIRS.items()}

_LATIN = r"\dA-Za-z\u00C0-\u024F"
# Things never cut inside: URLs, and runs of Latin letters/digits joined by separators,
# with an optional sign or currency before and a percent/degree after.
_ATOM = re.compile(
    r"(?:https?|ftp)://[!-~]+"
    rf"|[-+]?[$¥￥€£]?[{_LATIN}]+(?:[.,:/\-_'’@][{_LATIN}]+)*[%℃°]?"
)
_SENTENCE_RE = re.compile(r"[.!?]")
# Chinese dates and clock times written with digits stay whole: 2026年10月21日, 10点22分.
_CN_COMPOUND = re.compile(
    r"\d{1,4}年\d{1,2}月(?:\d{1,2}[日号])?|\d{1,2}月\d{1,2}[日号]|\d{1,2}[点时]\d{1,2}分(?:\d{1,2}秒)?"
    r"|\d{1,2}分\d{1,2}秒"
)


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF


def sentences(text: str) -> list[str]:
    """Split English text into sentences, each keeping its trailing space.

    Whitespace runs collapse to one space; a cut follows ``.``/``!``/``?`` when a space and an
    uppercase letter come next (or the text ends), never after Dr. Mr. Mrs. Ms. St. No. A decimal
    or price ($3.50) is never a boundary because no space follows its point.
    """
    flat = " ".join(text.split())
    if not flat:
        return []
    out: list[str] = []
    start = 0
    n = len(flat)
    for m in _SENTENCE_RE.finditer(flat):
        i = m.start()
        if i + 2 >= n or flat[i + 1] != " " or not flat[i + 2].isupper():
            continue
        if flat[i] == "." and flat[flat.rfind(" ", 0, i) + 1 : i + 1].lstrip("(\"'[“‘") in ABBREVIATIONS:
            continue
        out.append(flat[start : i + 2])
        start = i + 2
    out.append(flat[start:])
    return out


class CutPoints:
    """Where a text may be cut, at four levels of preference.

    A cut at ``k`` puts ``text[:k]`` and ``text[k:]`` in different pieces. Level 0 are sentence
    ends, 1 adds clause marks, 2 adds word gaps (after whitespace), 3 is every safe position.
    Whitespace always stays with the piece before it.

    ``final=False`` is for a stream whose end is not known yet: an unclosed bracket blocks all
    cuts after it (unless ``open_brackets_block`` is False), a cut needs ``lookahead`` characters
    after it to be decided, and a word-gap or plain cut (levels 2 and 3) ``fine_lookahead``.
    """

    def __init__(self, text: str, final: bool = True, lookahead: int = 0,
                 open_brackets_block: bool = True, fine_lookahead: int = 0) -> None:
        self.text = text
        n = len(text)
        self.n = n
        blocked = bytearray(n + 1)
        blocked[0] = 1
        blocked[n] = 1
        for pattern in (_ATOM, _CN_COMPOUND):
            for m in pattern.finditer(text):
                for k in range(m.start() + 1, m.end()):
                    blocked[k] = 1
        self._block_brackets(blocked, open_brackets_block and not final)
        for k in range(1, n):
            ch = text[k]
            if ch.isspace() or ch in "\u200d\ufe0f\ufe0e" or text[k - 1] == "\u200d" \
                    or unicodedata.combining(ch) or ch in CLOSERS \
                    or text[k - 1].isdecimal() and _is_cjk(ch):  # a number keeps its unit: 22分, 25.5度
                blocked[k] = 1
        lead = len(text) - len(text.lstrip())
        for k in range(min(lead, n) + 1):
            blocked[k] = 1
        undecided = n - lookahead + 1 if not final else n
        for k in range(max(undecided, 0), n + 1):
            blocked[k] = 1
        self.blocked = blocked
        self.levels: list[list[int]] = [[], [], [], []]
        self._find_cuts(n - fine_lookahead if not final else n)

    def _block_brackets(self, blocked: bytearray, open_blocks: bool) -> None:
        text = self.text
        diff = [0] * (self.n + 2)
        stack: list[tuple[str, int]] = []
        for i, ch in enumerate(text):
            if ch in _PAIRS:
                stack.append((ch, i))
            elif ch in _CLOSING:
                opener = _CLOSING[ch]
                if stack and stack[-1][0] == opener:
                    _, j = stack.pop()
                    diff[j + 1] += 1
                    diff[i + 1] -= 1
                elif any(o == opener for o, _ in stack):
                    while stack and stack[-1][0] != opener:
                        stack.pop()
                    _, j = stack.pop()
                    diff[j + 1] += 1
                    diff[i + 1] -= 1
        if open_blocks and stack:
            j = stack[0][1]
            diff[j + 1] += 1
            diff[self.n + 1] -= 1
        depth = 0
        for k in range(self.n + 1):
            depth += diff[k]
            if depth > 0:
                blocked[k] = 1

    def _find_cuts(self, fine_end: int) -> None:
        text, n, blocked = self.text, self.n, self.blocked
        sent: list[int] = []
        clause: list[int] = []
        for i, ch in enumerate(text):
            if ch not in SENTENCE_MARKS and ch not in CLAUSE_MARKS:
                continue
            p = i + 1
            while p < n and text[p] in CLOSERS:
                p += 1
            if ch in _ASCII_MARKS:
                if p < n and not (text[p].isspace() or not text[p].isascii()):
                    continue
                if ch == "." and not self._full_stop(i, p):
                    continue
            while p < n and text[p].isspace():
                p += 1
            if p >= n or blocked[p]:
                continue
            (sent if ch in SENTENCE_MARKS else clause).append(p)
        words = [k for k in range(1, fine_end + 1) if not blocked[k] and text[k - 1].isspace()]
        safe = [k for k in range(1, fine_end + 1) if not blocked[k]]
        self.levels[0] = sorted(set(sent))
        self.levels[1] = sorted(set(sent) | set(clause))
        self.levels[2] = sorted(set(self.levels[1]) | set(words))
        self.levels[3] = safe

    def _full_stop(self, i: int, p: int) -> bool:
        text = self.text
        start = i
        while start > 0 and not text[start - 1].isspace():
            start -= 1
        if text[start : i + 1].lstrip("(\"'“‘") in _SOFT_ABBREVIATIONS:
            return False
        q = p
        while q < len(text) and text[q].isspace():
            q += 1
        return not (q < len(text) and text[q].isascii() and text[q].islower())

    def between(self, level: int, a: int, b: int) -> list[int]:
        """Cut positions of ``level`` strictly between ``a`` and ``b``."""
        cuts = self.levels[level]
        return cuts[bisect_right(cuts, a) : bisect_left(cuts, b)]

    def size(self, a: int, b: int) -> int:
        """Characters of ``text[a:b]`` not counting whitespace at either end."""
        text = self.text
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        return b - a


def pack(cuts: CutPoints, start: int, end: int, first: int, chunk: int) -> list[tuple[int, int]]:
    """Greedy packing of ``text[start:end]`` into spans; the first at most ``first`` characters,
    the rest at most ``chunk``, preferring sentence ends, then clause marks, then word gaps."""
    spans: list[tuple[int, int]] = []
    state = {"buf": -1, "limit": first}

    def emit(a: int, b: int) -> None:
        spans.append((a, b))
        state["limit"] = chunk

    def walk(a: int, b: int, level: int) -> None:
        bounds = [a, *cuts.between(level, a, b), b]
        for u0, u1 in pairwise(bounds):
            buf = state["buf"]
            if buf >= 0 and cuts.size(buf, u1) <= state["limit"]:
                continue
            if buf >= 0:
                emit(buf, u0)
                state["buf"] = -1
            if cuts.size(u0, u1) <= state["limit"] or level == 3:
                state["buf"] = u0
            else:
                walk(u0, u1, level + 1)

    walk(start, end, 0)
    if state["buf"] >= 0:
        spans.append((state["buf"], end))
    return spans


def split_for_tts(text: str, first: int = 24, chunk: int = 40) -> list[str]:
    """Cut ``text`` into TTS pieces, the first at most ``first`` characters, later ones at most
    ``chunk`` (a single unbreakable stretch, such as a long number or bracket, may be longer).

    Prefers sentence ends (。！？；.!?;), then clause marks (，、,：:), then gaps between words;
    never cuts inside a number with its separators, a Latin word, a URL or brackets.
    ``"".join(result) == text``; whitespace-only text gives ``[]``.
    """
    if first < 1 or chunk < 1:
        raise RkvoiceError("text", "bad-chunk-size",
                           f"split_for_tts needs first >= 1 and chunk >= 1, got {first} and {chunk}")
    if not text or text.isspace():
        return []
    cuts = CutPoints(text)
    return [text[a:b] for a, b in pack(cuts, 0, len(text), first, chunk)]
