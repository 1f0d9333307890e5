"""Tolerant pinyin matching of a wake phrase at the start of a transcript.

Text and phrase become toneless syllables with the usual fuzzy pairs folded, so 小志 and 小知 read as
小智. A syllable off in its initial or its final costs 0.5, a wrong, missing or extra one 1; the
phrase matches when the cheapest alignment near the start costs at most ``tolerance``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pypinyin import Style, lazy_pinyin

_HAN = re.compile(r"[\u3400-\u9fff]")
_LEAD = re.compile(r"^[\s,，。.!！?？、;；:：…~～\-—]+")

_FUZZY_INITIALS = {"zh": "z", "ch": "c", "sh": "s", "l": "n"}
_FUZZY_FINALS = {"ing": "in", "eng": "en", "ang": "an", "iang": "ian", "uang": "uan"}
MAX_LEAD = 2  # syllables of other speech (a filler, 嗯) the phrase may follow
T = TypeVar("T")


@dataclass(frozen=True)
class Syllable:
    initial: str
    final: str
    pos: int
    """Index of the character in the original text."""


def toneless(text: str, strict: bool = False) -> list[Syllable]:
    """One toneless syllable per Han character of ``text``, as pypinyin reads it in context (nothing folded).
    ``strict``: the initials and finals of the pinyin scheme (卧 "" + "uo", not "w" + "o"), so 若 and 卧
    share their final."""
    positions = [m.start() for m in _HAN.finditer(text)]
    chars = "".join(text[i] for i in positions)  # none: lazy_pinyin gives [] for ""
    # errors=list (typed str, a list works): a run without a reading (䷘䷠ are in _HAN) gives one entry a character
    initials = lazy_pinyin(chars, style=Style.INITIALS, strict=strict, errors=list)  # type: ignore[arg-type]
    finals = lazy_pinyin(chars, style=Style.FINALS, strict=strict, errors=list)  # type: ignore[arg-type]
    return [Syllable(i, f, pos) for i, f, pos in zip(initials, finals, positions)]


def syllables(text: str) -> list[Syllable]:
    """One fuzzy-normalised syllable per Han character of ``text``."""
    return [Syllable(_FUZZY_INITIALS.get(s.initial, s.initial), _FUZZY_FINALS.get(s.final, s.final), s.pos)
            for s in toneless(text)]


def edit_distance(a: Sequence[T], b: Sequence[T], sub: Callable[[T, T], float] = operator.ne) -> float:
    """Levenshtein distance: an insertion or deletion costs 1, a substitution ``sub(x, y)``."""
    prev = [float(j) for j in range(len(b) + 1)]
    for i, x in enumerate(a, 1):
        cur = [float(i)] + [0.0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + sub(x, y))
        prev = cur
    return prev[-1]


def _sub_cost(a: Syllable, b: Syllable) -> float:
    return 0.5 * (a.initial != b.initial) + 0.5 * (a.final != b.final)


@dataclass(frozen=True)
class PhraseMatch:
    cost: float
    remainder: str
    """The text after the phrase, leading punctuation removed ('' for the phrase alone)."""


class PhraseMatcher:
    def __init__(self, phrase: str, tolerance: float = 0.75) -> None:
        self.phrase = phrase
        self.target = syllables(phrase)
        if not self.target:
            raise ValueError(f"wake phrase {phrase!r} has no Chinese characters")
        self.tolerance = tolerance

    def match(self, text: str) -> PhraseMatch | None:
        """The phrase near the start of ``text`` (up to ``MAX_LEAD`` syllables in), or None."""
        syl = syllables(text)
        n = len(self.target)
        best: tuple[float, int, int] | None = None  # cost, -length, end index
        for start in range(min(MAX_LEAD, max(0, len(syl) - 1)) + 1):
            for length in (n, n - 1, n + 1):
                if length <= 0 or start + length > len(syl):
                    continue
                cost = edit_distance(self.target, syl[start : start + length], _sub_cost)
                key = (cost, -length if length == n else 0, start + length)
                if best is None or key < best:
                    best = key
        if best is None or best[0] > self.tolerance:
            return None
        end = syl[best[2] - 1].pos + 1  # just after the phrase's last character
        return PhraseMatch(best[0], _LEAD.sub("", text[end:]).strip())
