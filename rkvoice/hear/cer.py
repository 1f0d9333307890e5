"""Character error rate for Chinese transcripts (punctuation and spaces ignored, digits read out)."""

from __future__ import annotations

import operator
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import TypeVar

_DROP = re.compile(r"[\s\W_]+", re.UNICODE)
_NUM = re.compile(r"\d+")
T = TypeVar("T")


def normalise(text: str, read_digits: bool = True) -> str:
    """NFKC, digit runs read out as Chinese numbers (unless ``read_digits`` is False: then a
    digit is a character like any other), punctuation and spaces dropped, lower case."""
    from rkvoice.text.spoken_numbers import cn_int

    text = unicodedata.normalize("NFKC", text)
    if read_digits:
        text = _NUM.sub(lambda m: cn_int(int(m.group())), text)
    return _DROP.sub("", text).lower()


def edit_distance(a: Sequence[T], b: Sequence[T], sub: Callable[[T, T], float] = operator.ne) -> float:
    """Levenshtein distance: an insertion or deletion costs 1, a substitution ``sub(x, y)``."""
    prev = [float(j) for j in range(len(b) + 1)]
    for i, x in enumerate(a, 1):
        cur = [float(i)] + [0.0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + sub(x, y))
        prev = cur
    return prev[-1]


def cer(reference: str, hypothesis: str, read_digits: bool = True) -> float:
    """Edits / reference characters after normalising both; 1.0 for a non-empty hypothesis of ''.
    ``read_digits=False`` scores digits as written (a transcript verbatim)."""
    ref, hyp = normalise(reference, read_digits), normalise(hypothesis, read_digits)
    if not ref:
        return 0.0 if not hyp else 1.0
    return edit_distance(ref, hyp) / len(ref)
