"""speakable(text): what a TTS voice should be handed, in words an ear understands.

Markup, emoji, URLs and citation marks go (clean.py); each clause gets a language by its script
(digits and symbols alone: the language around them); runs of one language are normalised by the
Chinese rules plus wetext (zh_speakable.py) or the English rules (en_speakable.py).
"""

from __future__ import annotations

import logging
import re

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.text.clean import clean
from rkvoice.text.en_speakable import en_speakable
from rkvoice.text.script_spans import HAN
from rkvoice.text.zh_speakable import UNITS, zh_speakable

log = logging.getLogger(__name__)

# Clause ends: Chinese marks anywhere; ASCII marks only when a space follows (not 3.14, 22:05, 1,000).
_CLAUSE = re.compile(r"[。！？；，、：…]+\s*|[.!?;:,]+(?=\s|$)\s*")
_WORD = re.compile(r"[A-Za-z]+")
_NOT_ENGLISH = frozenset(UNITS)
_AMPM = re.compile(r"\d\s?[aApP]\.?[mM]\b")


def _script(segment: str) -> str | None:
    """'zh' if it has Chinese characters, 'en' if it has an English word, else None (neutral)."""
    if HAN.search(segment):
        return "zh"
    if _AMPM.search(segment):
        return "en"
    if any(len(w) >= 2 and not w.isupper() and w not in _NOT_ENGLISH for w in _WORD.findall(segment)):
        return "en"
    return None


def language_runs(text: str) -> list[tuple[str, str]]:
    """Cut cleaned text into (lang, run) pairs by script, clause by clause."""
    ends = [m.end() for m in _CLAUSE.finditer(text)]
    segments = [text[a:b] for a, b in zip([0, *ends], [*ends, len(text)]) if a < b]
    langs = [_script(s) for s in segments]
    known = [lg for lg in langs if lg]
    fill = known[0] if known else "en" if "$" in text else "zh"
    runs: list[tuple[str, str]] = []
    for seg, lg in zip(segments, langs):
        lg = lg or (runs[-1][0] if runs else fill)
        if runs and runs[-1][0] == lg:
            runs[-1] = (lg, runs[-1][1] + seg)
        else:
            runs.append((lg, seg))
    return runs


def speakable(text: str) -> str:
    """Text rewritten for a TTS voice: numbers, times, dates, units and abbreviations as words,
    markup, emoji, URLs and citation marks removed, whitespace collapsed, no word dropped; the
    language is decided run by run by script (``language_runs``)."""
    if not isinstance(text, str):
        raise RkvoiceError(Stage.TEXT, "bad-text", f"speakable needs a str, got {type(text).__name__}")
    text = clean(text)
    if not text:
        return ""
    out = [zh_speakable(run) if lg == "zh" else en_speakable(run) for lg, run in language_runs(text)]
    return " ".join("".join(out).split())
