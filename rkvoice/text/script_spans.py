"""Cut speakable text into spans by script, for a Chinese voice and an English voice taking turns.

    script_spans("我每天用Python写代码，也用GitHub管理项目。")
    -> [Span("zh", "我每天用", "word"), Span("en", "Python", "word"), Span("zh", "写代码，也用", "word"),
        Span("en", "GitHub", "word"), Span("zh", "管理项目。", "")]

A run of Latin words ("Visual Studio Code", "Wi-Fi", "Node.js") is one English span; everything
else belongs to the Chinese spans around it. Punctuation at a join becomes the pause after the
span ("word", "clause" for ，、；： etc., "sentence" for 。！？ etc.); at the very start or end it stays
with its span. ``english_reading`` spells acronyms (USB, MP3, iOS) with letter names.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from rkvoice.text.en_speakable import digits

log = logging.getLogger(__name__)

_WORD = r"[A-Za-z][A-Za-z0-9]*(?:['’.\-&+][A-Za-z0-9]+)*"
_LATIN_RUN = re.compile(rf"{_WORD}(?:[ \t]+{_WORD}|[ \t]*[,/][ \t]*{_WORD})*")
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
"""A Han (Chinese) character."""
SENTENCE_MARKS = "。！？!?.…"
CLAUSE_MARKS = "，、；：,;:—-~～()（）《》「」『』“”\"'"
_TO_ASCII = {"。": ".", "！": "!", "？": "?", "，": ",", "、": ",", "；": ";", "：": ":", "…": "..."}

LETTER_NAMES = {
    "A": "ay", "B": "bee", "C": "see", "D": "dee", "E": "ee", "F": "ef", "G": "jee", "H": "aitch",
    "I": "eye", "J": "jay", "K": "kay", "L": "el", "M": "em", "N": "en", "O": "oh", "P": "pee",
    "Q": "cue", "R": "ar", "S": "ess", "T": "tee", "U": "you", "V": "vee", "W": "double you",
    "X": "ex", "Y": "why", "Z": "zee",
}
MAX_ACRONYM = 5
"""All-capital words of at most this many letters are spelled (USB, HDMI); longer ones are read as words."""


@dataclass(frozen=True)
class Span:
    lang: str
    """"zh" or "en": the voice that speaks it."""
    text: str
    """What that voice is handed (English spans still in writing; see ``english_reading``)."""
    pause_after: str = ""
    """The pause before the next span: "word", "clause", "sentence", or "" after the last."""


def has_latin(text: str) -> bool:
    return _LATIN_RUN.search(text) is not None


def _pause(marks: str) -> str:
    if any(c in SENTENCE_MARKS for c in marks):
        return "sentence"
    if any(c in CLAUSE_MARKS for c in marks):
        return "clause"
    return "word"


def script_spans(text: str) -> list[Span]:
    """The text as alternating Chinese and English spans (see the module docstring)."""
    parts = re.split(f"({_LATIN_RUN.pattern})", text)  # zh, en, zh, ..., zh (some empty)
    pieces = [("en" if i % 2 else "zh", part) for i, part in enumerate(parts) if part]
    spans: list[Span] = []
    pending = ""  # punctuation between two spoken spans
    for i, (lang, piece) in enumerate(pieces):
        tail = ""  # punctuation after a Chinese span, before the next span (an English one takes none)
        if lang == "zh":
            spoken = piece.strip()
            lead = spoken[: len(spoken) - len(spoken.lstrip(_PUNCT))] if i > 0 else ""
            body = spoken[len(lead) :]
            tail = body[len(body.rstrip(_PUNCT)) :] if i < len(pieces) - 1 else ""
            body = body[: len(body) - len(tail)] if tail else body
            if not any(c.isalnum() for c in body):  # nothing a Chinese voice says
                pending += piece
                continue
            pending += lead
            piece = body.strip()
        if spans:
            spans[-1] = Span(spans[-1].lang, spans[-1].text, _pause(pending))
        spans.append(Span(lang, piece))
        pending = tail
    if spans and (end := pending.strip()):
        if spans[-1].lang == "en":  # the sentence end the English voice should say as one
            end = "".join(_TO_ASCII.get(c, c) for c in end if c in _TO_ASCII or c in ".!?,;:")
        spans[-1] = Span(spans[-1].lang, spans[-1].text + end)
    return spans


_PUNCT = " \t\n" + SENTENCE_MARKS + CLAUSE_MARKS


def is_acronym(token: str) -> bool:
    """Spelled letter by letter: all capitals up to MAX_ACRONYM letters (USB, GPS), a letter and
    digit mix (MP3, A4), or a short word with as many capitals as small letters (iOS, IoT)."""
    letters = [c for c in token if c.isalpha()]
    if not letters:
        return False
    if any(c.isdigit() for c in token):
        return True
    upper = sum(c.isupper() for c in letters)
    if upper == len(letters):
        return len(letters) <= MAX_ACRONYM
    return len(letters) <= 4 and upper >= 2 and upper >= len(letters) - upper


def spell(token: str) -> str:
    """Letter and digit names: "MP3" -> "em pee three"."""
    names = (digits(c) if c.isdigit() else LETTER_NAMES.get(c.upper()) for c in token)
    return " ".join(name for name in names if name)


def english_reading(span: str) -> str:
    """The English span as the English voice should read it: acronyms spelled, words as written."""
    out = []
    for word in re.split(r"(\s+|[-/](?=[A-Za-z0-9]))", span):
        if not word or word.isspace() or word in "-/":
            out.append(" " if word in ("-", "/") else word)
            continue
        core = word.rstrip(".,!?;:")
        tail = word[len(core) :]
        out.append((spell(core) if is_acronym(core) else core) + tail)
    return "".join(out).strip()
