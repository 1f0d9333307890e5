"""Text -> token ids for the Matcha zh-en voice, the way sherpa-onnx's zh-en frontend makes them.

The files are sherpa-onnx's ``matcha-icefall-zh-en``: ``tokens.txt`` (``token id`` per line; an id
alone is the blank token; toned pinyin syllables ``ni3``, IPA phones, punctuation) and
``lexicon.txt`` (``word tok tok ...``, one toned syllable per Chinese character: ``银行行长 yin2
hang2 hang2 zhang3``; a lexicon with another count per character is another model's and refused).

Following sherpa-onnx's ``MatchaTtsLexicon``:
1. Full-width punctuation becomes ASCII (，、：→``,`` ；→``;`` 。→``.`` ？→``?`` ！→``!``); a mark
   right after another is dropped; spaces only separate words.
2. Words: each CJK character, each run of ASCII letters/digits/apostrophes, each mark. From a word
   that is not a letter or mark, the longest run of up to 10 words in the lexicon is one phrase.
3. A word's ids: its lexicon entry, else the token of that spelling, else per character (CJK),
   else espeak-ng's en-us IPA with the zh-en replacements (``aɪ`` -> ``I``, ...), one token per
   character. Unknown words are skipped (logged once).
4. After an English word the blank token goes in before the next word that has ids:
   ``Hello World`` -> hello, blank, world; ``OK，好`` -> ok, blank, ``,``, 好.

``units`` gives ``Unit``s (a phrase, word or mark with its ids); ``ids`` joins a piece's units,
inserting the blanks, so a piece cut anywhere gets the ids sherpa-onnx gives for its text.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.text.script_spans import HAN

log = logging.getLogger(__name__)

Phonemizer = Callable[[str], str]
"""English word -> IPA string (espeak-ng en-us)."""

_PUNCT_MAP = {"，": ",", "、": ",", "；": ";", "：": ",", ":": ",", "。": ".", "？": "?", "！": "!",
              "…": ".", "—": ",", "（": ",", "）": ",", "“": "", "”": "", "‘": "", "’": "'",
              "《": "", "》": "", "「": "", "」": ""}
"""sherpa-onnx's replacements (the first eight) plus a few marks it would drop as unknown words."""
_IPA_REPLACEMENTS = (("ɝ", "ɜɹ"), ("ɚ", "əɹ"), ("eɪ", "A"), ("aɪ", "I"), ("ɔɪ", "Y"), ("oʊ", "O"),
                     ("əʊ", "O"), ("aʊ", "W"), ("tʃ", "ʧ"), ("dʒ", "ʤ"), ("ː", ""), ("g", "ɡ"),
                     ("r", "ɹ"), ("e", "ɛ"))
_WORD = re.compile(r"[A-Za-z0-9']+|\S")
"""A run of ASCII letters, digits and apostrophes, or any other single non-space character."""
PUNCT = set(",.;?!")
MAX_PHRASE = 10
"""Longest phrase tried against the lexicon, in words (sherpa-onnx's PhraseMatcher)."""


@dataclass(frozen=True)
class Unit:
    text: str
    ids: tuple[int, ...]
    kind: str  # "zh", "en" or "punct"
    blank_after: bool = False
    """The blank token goes between this unit and the next (sherpa-onnx: after a word starting
    with an ASCII letter, unless the next word was unknown and skipped)."""


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RkvoiceError(Stage.TTS, "missing-model", f"cannot read Matcha {what} {path}: "
                           f"{exc.strerror}; run ./install.sh --profile board") from exc


def read_tokens(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for n, line in enumerate(_read_lines(path, "tokens file"), 1):
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        tok, raw = (" ", parts[0]) if len(parts) == 1 else parts
        try:
            out[tok] = int(raw)
        except ValueError:
            raise RkvoiceError(Stage.TTS, "bad-model", f"{path}:{n}: expected 'token id', got {line!r}") from None
    if not out:
        raise RkvoiceError(Stage.TTS, "bad-model", f"Matcha tokens file {path} is empty")
    return out


def read_lexicon(path: Path, token2id: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """``word -> ids``; words lower-cased, the first of duplicates kept, entries naming a token
    that tokens.txt lacks dropped whole (as sherpa-onnx does)."""
    out: dict[str, tuple[int, ...]] = {}
    dropped = 0
    for line in _read_lines(path, "lexicon"):
        parts = line.split()
        if len(parts) < 2:
            continue
        word = parts[0].lower()
        if word in out:
            continue
        if any(tok not in token2id for tok in parts[1:]):
            dropped += 1
            continue
        out[word] = tuple(token2id[tok] for tok in parts[1:])
    if dropped:
        log.warning("%s: %d entries name tokens that are not in tokens.txt; skipped", path, dropped)
    if not out:
        raise RkvoiceError(Stage.TTS, "bad-model", f"Matcha lexicon {path} has no usable entries (do its tokens "
                           "match tokens.txt?)")
    # refused: a lexicon that does not give one token per Chinese character (another model's)
    per_char = Counter(len(ids) for word, ids in out.items() if len(word) == 1 and HAN.match(word))
    total = sum(per_char.values())
    if total and per_char[1] < 0.9 * total:
        common = per_char.most_common(1)[0][0]
        raise RkvoiceError(Stage.TTS, "bad-model", f"Matcha lexicon {path} is not in the zh-en format: its Chinese "
                           f"characters have {common} tokens each, the zh-en model takes one toned syllable per "
                           "character (e.g. '你 ni3'); use the lexicon.txt of matcha-icefall-zh-en")
    return out


def ipa_to_tokens(ipa: str) -> list[str]:
    """espeak IPA -> the zh-en model's phone symbols (one per character after replacements)."""
    s = ipa
    for a, b in _IPA_REPLACEMENTS:
        s = s.replace(a, b)
    return [ch for ch in s if not ch.isspace()]


def words(text: str) -> list[str]:
    """Text -> sherpa-onnx's words: CJK characters, ASCII letter/digit runs, punctuation marks."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(_PUNCT_MAP.get(c, c) for c in text)
    out: list[str] = []
    for w in _WORD.findall(text):
        if not (w in PUNCT and out and out[-1] in PUNCT):  # a mark right after another is dropped
            out.append(w)
    return out


class MatchaFrontend:
    """Lexicon + tokens (+ optional English phonemizer) -> ``Unit``s -> ids."""

    def __init__(self, token2id: dict[str, int], lexicon: dict[str, tuple[int, ...]],
                 phonemizer: Phonemizer | None = None) -> None:
        self.token2id = token2id
        self.lexicon = lexicon
        self.phonemizer = phonemizer
        self.blank = token2id.get(" ")
        self._warned: set[str] = set()

    @classmethod
    def from_files(cls, lexicon: Path, tokens: Path, phonemizer: Phonemizer | None = None) -> MatchaFrontend:
        t2i = read_tokens(tokens)
        return cls(t2i, read_lexicon(lexicon, t2i), phonemizer)

    def _oov(self, what: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("Matcha voice cannot say %r; skipped", what)

    def _phrases(self, ws: list[str]) -> list[str]:
        """Join words into the longest lexicon phrases (from a word that is not a letter or a mark)."""
        out = []
        i = 0
        while i < len(ws):
            end = i + 1
            if not _alpha_or_punct(ws[i][0]):
                end = next((stop for stop in range(min(i + MAX_PHRASE, len(ws)), i + 1, -1)
                            if not _alpha_or_punct(ws[stop - 1][-1]) and "".join(ws[i:stop]).lower() in self.lexicon),
                           end)
            out.append("".join(ws[i:end]))
            i = end
        return out

    def _ids(self, w: str) -> tuple[int, ...]:
        ids = self.lexicon.get(w.lower())
        if ids is not None:
            return ids
        if w in self.token2id:
            return (self.token2id[w],)
        if HAN.search(w):
            return tuple(i for c in w for i in self.lexicon.get(c, ()))
        if self.phonemizer is None or not w[0].isascii() or not w[0].isalnum():
            return ()
        return tuple(self.token2id[t] for t in ipa_to_tokens(self.phonemizer(w)) if t in self.token2id)

    def units(self, text: str) -> list[Unit]:
        """Speakable text -> units. Words the voice has no tokens for are skipped (logged once)."""
        out: list[Unit] = []
        for w in self._phrases(words(text)):
            ids = self._ids(w)
            if not ids:
                self._oov(w)
                if out and out[-1].blank_after:  # sherpa-onnx looks at the skipped word, not the unit
                    out[-1] = replace(out[-1], blank_after=False)
                continue
            kind = "punct" if w in PUNCT else "en" if w[0].isascii() else "zh"
            out.append(Unit(w, ids, kind, blank_after=w[0].isascii() and w[0].isalpha()))
        return out

    def ids(self, units: list[Unit], add_blank: bool = False, pad_id: int = 0) -> list[int]:
        """Join unit ids, with the blank token after each English word another unit follows; with
        ``add_blank`` (models other than zh-en) interleave ``pad_id`` (x -> 0 x1 0 x2 ... 0)."""
        ids: list[int] = []
        for k, u in enumerate(units):
            if k and self.blank is not None and units[k - 1].blank_after:
                ids.append(self.blank)
            ids.extend(u.ids)
        if not add_blank:
            return ids
        out = [pad_id] * (2 * len(ids) + 1)
        out[1::2] = ids
        return out


def _alpha_or_punct(ch: str) -> bool:
    return ch.isascii() and (ch.isalpha() or (not ch.isalnum() and not ch.isspace()))


def system_phonemizer(cfg: Config) -> Phonemizer | None:
    """espeak-ng for English words: the unpacked board copy (tts.matcha.espeak_lib_dir) or the system's."""
    try:
        from rkvoice.board.espeak import Espeak, espeak_lib_dir

        return Espeak.open(espeak_lib_dir(cfg)).phonemize
    except RkvoiceError as exc:
        log.warning("matcha: English words will be skipped: %s", exc)
        return None
