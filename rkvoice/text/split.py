"""Cut text into size-bounded pieces for TTS, in any language, keeping every character.

Cut points come from ``CutPoints``, which the streaming chunker shares: a number (2026-10-21, 3.14,
1,000, 22:05), a Latin or Chinese word (``rkvoice.text.words``) or a bracketed stretch is cut only
when it alone is longer than the limit, a URL never.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from bisect import bisect_left, bisect_right
from itertools import accumulate, pairwise

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.text.clean import LINK, LINK_TAIL, URL, dropped as _dropped, starts_with_list_number
from rkvoice.text.script_spans import HAN
from rkvoice.text.words import WORD_LOOKAHEAD, inside_words, script_changes

log = logging.getLogger(__name__)

ABBREVIATIONS = frozenset({"Dr.", "Mr.", "Mrs.", "Ms.", "St.", "No.", "Prof.", "Jr.", "Sr.", "vs.", "etc.", "e.g.",
                           "i.e.", "Mt.", "Inc."})
"""Words whose '.' never ends a sentence."""

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
_MARKERS = re.compile(r"[*`_\[\]]+|~~")
_MARKUP_OPENERS = frozenset("*_`[#>~+-")
_LIST_HINT = re.compile(r"[^\n\w]{0,12}\d{1,3}(?:\]\([^)\n]{0,200}\)|[^\n\w.)、]){0,12}[.)、][ \t]")
"""What may open a list number once markup is gone ("45. ", "**45**. ", "[45](url). ", "45😀. "): only
there does CutPoints ask ``starts_with_list_number``; it never cuts before one inside a line."""
_UNDECIDED_TAIL = 40
"""Characters at the end of unfinished text in which a list number may still be forming."""
FINE_LOOKAHEAD = 2
"""Characters a stream needs after a word gap or plain cut before it is decided."""
_LINE_MARKS = re.compile(r"^[ \t]*(?:#{1,6}|>+|[-*+•·▪‣◦]|\d{1,3}[.)、])[ \t]+", re.MULTILINE)
# Chinese dates and clock times written with digits stay whole: 2026年10月21日, 10点22分.
_CN_COMPOUND = re.compile(
    r"\d{1,4}年\d{1,2}月(?:\d{1,2}[日号])?|\d{1,2}月\d{1,2}[日号]|\d{1,2}[点时]\d{1,2}分(?:\d{1,2}秒)?"
    r"|\d{1,2}分\d{1,2}秒"
)

LAST_LEVEL = 5


def spoken_mask(text: str) -> bytearray:
    """1 for each character a voice is handed after ``clean``, 0 for URLs, markdown markers
    (``*``, backticks, ``~~``, ``_``, square brackets, a link's target, heading ``#``, quote
    ``>``, list bullets) and emoji."""
    mask = bytearray(b"\x01") * len(text)
    targets: list[tuple[int, int]] = []  # "](target)" spans: clean removes them before URLs
    for m in LINK.finditer(text):  # the link's text stays spoken
        mask[m.start() : m.start(1)] = bytes(m.start(1) - m.start())
        targets.append((m.end(1), m.end()))
    targets += [m.span() for m in LINK_TAIL.finditer(text)]
    for a, b in targets:
        mask[a:b] = bytes(b - a)
    for pattern in (_MARKERS, _LINE_MARKS):
        for m in pattern.finditer(text):
            mask[m.start() : m.end()] = bytes(m.end() - m.start())
    for m in URL.finditer(text):
        end = next((b for a, b in targets if a <= m.start() < b), m.end())
        mask[m.start() : end] = bytes(end - m.start())
    for k, ch in enumerate(text):
        if not ch.isascii() and (_dropped(ch) or unicodedata.combining(ch)):
            mask[k] = 0  # emoji and their joiners; a combining mark belongs to its letter
    return mask


class CutPoints:
    """Where a text may be cut (at ``k``: ``text[:k]`` | ``text[k:]``), at six levels of preference:
    0 sentence ends, 1 adds clause marks, 2 word gaps (whitespace, and where Chinese meets a Latin
    letter), 3 every safe position (not inside a number, a Latin or Chinese word, a URL or
    brackets: ``rkvoice.text.words``); for a stretch longer than any limit, 4 its clause marks and word gaps,
    5 every position (never before a combining mark, a closing quote or whitespace, which stays
    with the piece before it). ``size`` counts spoken characters only.

    ``final=False`` is for a stream whose end is not known yet: an unclosed bracket blocks all
    cuts after it (unless ``open_brackets_block`` is False) and a word-gap or plain cut (levels 2
    and 3) needs FINE_LOOKAHEAD characters after it to be decided, and one between two Chinese
    characters WORD_LOOKAHEAD.
    """

    def __init__(self, text: str, final: bool = True, open_brackets_block: bool = True) -> None:
        self.text = text
        n = len(text)
        self.n = n
        blocked = bytearray(n + 1)  # hard blocks: never cut here
        blocked[n] = 1
        soft = bytearray(n + 1)
        for k in range(1, n):
            ch = text[k]
            if ch.isspace() or ch in "\u200d\ufe0f\ufe0e" or text[k - 1] == "\u200d" \
                    or unicodedata.combining(ch) \
                    or (ch.isdecimal() or ch in _MARKUP_OPENERS or _dropped(ch)) and text[k - 1] != "\n" \
                    and (hint := _LIST_HINT.match(text, k)) and starts_with_list_number(hint.group()):
                # a piece starts with "45. " (or "**45**. ") only at a line start, where clean()
                # drops it as a list number; it never starts with whitespace or a combining mark
                blocked[k] = 1
            elif ch in CLOSERS or text[k - 1].isdecimal() and HAN.match(ch):  # 22分, 25.5度
                soft[k] = 1
        if not final:  # a number still arriving may yet become "45. ": no piece may start there
            for k in range(max(1, n - _UNDECIDED_TAIL), n):
                ch = text[k]
                if (ch.isdecimal() or ch in _MARKUP_OPENERS or _dropped(ch)) and text[k - 1] != "\n" \
                        and "\n" not in text[k:] \
                        and any(starts_with_list_number(text[k:] + end) for end in (" ", ". ")):
                    blocked[k] = 1
        lead = len(text) - len(text.lstrip())
        blocked[: lead + 1] = b"\x01" * (lead + 1)
        hard_blocked = bytes(blocked)
        blocked = bytearray(a | b for a, b in zip(blocked, soft))
        for pattern in (_ATOM, _CN_COMPOUND):  # soft blocks: a cut here only when nothing else fits
            for m in pattern.finditer(text):
                blocked[m.start() + 1 : m.end()] = b"\x01" * (m.end() - m.start() - 1)
        for k in inside_words(text):  # nor inside a Chinese word (写代|码)
            blocked[k] = 1
        if not final:  # the last Chinese words may still join what comes next
            for k in range(max(1, n - WORD_LOOKAHEAD + 1), n):
                if HAN.match(text[k - 1]) and HAN.match(text[k]):
                    blocked[k] = 1
        self._script_changes = set(script_changes(text))
        self._block_brackets(blocked, open_brackets_block and not final)
        self._spoken = list(accumulate(spoken_mask(text), initial=0))
        fine_end = n - FINE_LOOKAHEAD if not final else n
        self.levels = self._find_cuts(blocked, fine_end)
        # Fallbacks for a stretch longer than the limit with no cut above (a long bracket, number
        # or word): its own clause marks and word gaps, then any character boundary.
        self.levels += self._find_cuts(hard_blocked, fine_end)[2:]

    def _block_brackets(self, blocked: bytearray, open_blocks: bool) -> None:
        text = self.text
        diff = [0] * (self.n + 2)
        stack: list[tuple[str, int]] = []
        for i, ch in enumerate(text):
            if ch in _PAIRS:
                stack.append((ch, i))
            elif ch in _CLOSING:
                opener = _CLOSING[ch]
                if any(o == opener for o, _ in stack):  # closes it and any unclosed inside it
                    while stack[-1][0] != opener:
                        stack.pop()
                    _, j = stack.pop()
                    diff[j + 1] += 1
                    diff[i + 1] -= 1
        if open_blocks and stack:
            j = stack[0][1]
            diff[j + 1] += 1
            diff[self.n + 1] -= 1
        for k, depth in enumerate(accumulate(diff[: self.n + 1])):
            if depth > 0:
                blocked[k] = 1

    def _find_cuts(self, blocked: bytes | bytearray, fine_end: int) -> list[list[int]]:
        """Levels 0-3 (sentence ends; and clause marks; and word gaps; every position) not in ``blocked``."""
        text, n = self.text, self.n
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
            while p < n and text[p].isspace():
                p += 1
            if ch == "." and (text[: i + 1].rsplit(None, 1)[-1].lstrip("(\"'“‘") in ABBREVIATIONS
                              or p < n and text[p].isascii() and text[p].islower()):
                continue  # an abbreviation's '.', or a small letter follows: no sentence end
            if p >= n or blocked[p]:
                continue
            (sent if ch in SENTENCE_MARKS else clause).append(p)
        words = [k for k in range(1, fine_end + 1)
                 if not blocked[k] and (text[k - 1].isspace() or k in self._script_changes)]
        safe = [k for k in range(1, fine_end + 1) if not blocked[k]]
        clauses = set(sent) | set(clause)
        return [sorted(set(sent)), sorted(clauses), sorted(clauses | set(words)), safe]

    def between(self, level: int, a: int, b: int) -> list[int]:
        """Cut positions of ``level`` strictly between ``a`` and ``b``."""
        cuts = self.levels[level]
        return cuts[bisect_right(cuts, a) : bisect_left(cuts, b)]

    def size(self, a: int, b: int) -> int:
        """Spoken characters of ``text[a:b]``: whitespace at either end, URLs, markdown markers
        and emoji (what ``clean`` removes) not counted."""
        text = self.text
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        return self._spoken[b] - self._spoken[a]


def pack(cuts: CutPoints, start: int, end: int, first: int, chunk: int) -> list[tuple[int, int]]:
    """Greedy packing of ``text[start:end]`` into spans; the first at most ``first`` characters,
    the rest at most ``chunk``, preferring sentence ends, then clause marks, then word gaps."""
    spans: list[tuple[int, int]] = []
    buf = -1  # start of the span being filled

    def walk(a: int, b: int, level: int) -> None:
        nonlocal buf
        for u0, u1 in pairwise([a, *cuts.between(level, a, b), b]):
            limit = chunk if spans else first
            if buf >= 0 and cuts.size(buf, u1) <= limit:
                continue
            if buf >= 0:
                spans.append((buf, u0))
                buf, limit = -1, chunk
            if cuts.size(u0, u1) <= limit or level == LAST_LEVEL:
                buf = u0
            else:
                walk(u0, u1, level + 1)

    walk(start, end, 0)
    if buf >= 0:
        spans.append((buf, end))
    return spans


def split_for_tts(text: str, first: int = 24, chunk: int = 40) -> list[str]:
    """Cut ``text`` into TTS pieces of at most ``first`` (the first) and ``chunk`` spoken characters
    (``CutPoints.size``), at sentence ends (。！？；.!?;), else clause marks (，、,：:), else word gaps;
    inside a number, Latin word or brackets only when that stretch alone is longer than the limit,
    never inside a URL. ``"".join(result) == text``; whitespace-only text gives ``[]``."""
    if first < 1 or chunk < 1:
        raise RkvoiceError(Stage.TEXT, "bad-chunk-size",
                           f"split_for_tts needs first >= 1 and chunk >= 1, got {first} and {chunk}")
    if not text or text.isspace():
        return []
    cuts = CutPoints(text)
    return [text[a:b] for a, b in pack(cuts, 0, len(text), first, chunk)]
