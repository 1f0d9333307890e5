"""Where Chinese words begin and end, so a TTS piece is never cut inside one.

    inside_words("我每天用Python写代码")  -> {2, 12}   (每|天 and 代|码 are not cut points)

Chinese has no spaces: a cut between any two characters looks safe to a splitter that only knows
punctuation and whitespace, and "写代码" cut as "写代" | "码" is read as two pieces and heard as 鞋带 +
码. The boundaries come from rjieba (jieba-rs: jieba's dictionary and segmentation, maintained,
with wheels for x86_64 and aarch64). Its dictionary loads on first use (~0.15 s, ~30 MB): ``warm``
does that while the voice loads, not inside the first answer.
"""

from __future__ import annotations

import logging
from functools import lru_cache

from rkvoice.text.script_spans import HAN

log = logging.getLogger(__name__)

WORD_LOOKAHEAD = 4
"""Han characters a streamed text needs after a word boundary before it is trusted: the words
before them may still join the characters to come (中华|人民 becomes 中华人民共和国)."""


@lru_cache(maxsize=1)
def _segmenter() -> object:
    import rjieba

    rjieba.cut("预热")  # loads the dictionary
    return rjieba


def warm() -> None:
    """Load the segmenter's dictionary now (idempotent)."""
    _segmenter()


def inside_words(text: str) -> set[int]:
    """Positions ``k`` (0 < k < len(text)) where ``text[:k] | text[k:]`` would split a word that has
    Chinese characters in it. Latin words, numbers and punctuation are not this module's concern
    (``rkvoice.text.split`` keeps those whole)."""
    if not HAN.search(text):
        return set()
    tokens: list[tuple[str, int, int]] = _segmenter().tokenize(text)  # type: ignore[attr-defined]
    inside: set[int] = set()
    for word, start, end in tokens:
        if end - start > 1 and HAN.search(word):
            inside.update(range(start + 1, end))
    return inside


def tagged(text: str) -> list[tuple[str, str]]:
    """``text`` as jieba's words with their part-of-speech tags (p: coverb, v: verb, n: noun, ...)."""
    return list(_segmenter().tag(text))  # type: ignore[attr-defined]


def script_changes(text: str) -> list[int]:
    """Positions where Chinese meets a Latin letter (用|Python, Python|写): a cut there leaves both
    words whole, and each voice of a mixed engine says its own span."""
    return [k for k in range(1, len(text))
            if (HAN.match(text[k - 1]) and _is_letter(text[k])) or (_is_letter(text[k - 1]) and HAN.match(text[k]))]


def _is_letter(ch: str) -> bool:
    return ch.isascii() and ch.isalpha()
