"""Text -> token ids for Matcha voices laid out like sherpa-onnx's matcha-icefall-zh-baker / zh-en.

``tokens.txt``: one ``token id`` per line (a line holding only an id is the space token).
``lexicon.txt``: ``word tok tok ...`` per line; Chinese words and characters (and, in the
zh-en model, common English words). Chinese runs are matched longest-word-first against the
lexicon; an English word missing from the lexicon goes through espeak-ng (IPA, en-us) and the
same diphthong/affricate replacements the zh-en model was trained with, one token per
character. Punctuation maps to its own token and ends a clause.

The result is a list of ``Unit``s (a word, a character run or a punctuation mark with its
ids), so the bucket splitter can cut between units and never inside a word.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)

Phonemizer = Callable[[str], str]
"""English word -> IPA string (espeak-ng en-us)."""

_PUNCT_MAP = {"，": ",", "、": ",", "；": ";", "：": ",", ":": ",", "。": ".", "？": "?", "！": "!",
              "…": ".", "—": ",", "（": ",", "）": ",", "“": "", "”": "", "‘": "", "’": "'",
              "《": "", "》": "", "「": "", "」": ""}
_IPA_REPLACEMENTS = (("ɝ", "ɜɹ"), ("ɚ", "əɹ"), ("eɪ", "A"), ("aɪ", "I"), ("ɔɪ", "Y"), ("oʊ", "O"),
                     ("əʊ", "O"), ("aʊ", "W"), ("tʃ", "ʧ"), ("dʒ", "ʤ"), ("ː", ""), ("g", "ɡ"),
                     ("r", "ɹ"), ("e", "ɛ"))
_EN_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
PUNCT = set(",.;?!")


@dataclass(frozen=True)
class Unit:
    text: str
    ids: tuple[int, ...]
    kind: str  # "zh", "en" or "punct"


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF


def read_tokens(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RkvoiceError("tts", "missing-model", f"cannot read Matcha tokens file {path}: "
                           f"{exc.strerror}; run ./install.sh --profile board") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) == 1:
            tok, raw = " ", parts[0]
        else:
            tok, raw = parts
        try:
            out[tok] = int(raw)
        except ValueError:
            raise RkvoiceError("tts", "bad-model", f"{path}:{n}: expected 'token id', got {line!r}") from None
    if not out:
        raise RkvoiceError("tts", "bad-model", f"Matcha tokens file {path} is empty")
    return out


def read_lexicon(path: Path, token2id: dict[str, int]) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RkvoiceError("tts", "missing-model", f"cannot read Matcha lexicon {path}: "
                           f"{exc.strerror}; run ./install.sh --profile board") from exc
    unknown = 0
    for line in lines:
        parts = line.split()
        if len(parts) < 2:
            continue
        word = parts[0].lower()
        if word in out:
            continue
        ids = []
        for tok in parts[1:]:
            if tok in token2id:
                ids.append(token2id[tok])
            else:
                unknown += 1
        if ids:
            out[word] = tuple(ids)
    if unknown:
        log.warning("%s: %d phones not in tokens.txt were skipped", path, unknown)
    if not out:
        raise RkvoiceError("tts", "bad-model", f"Matcha lexicon {path} has no usable entries")
    return out


def ipa_to_tokens(ipa: str) -> list[str]:
    """espeak IPA -> the zh-en model's phone symbols (one per character after replacements)."""
    s = ipa
    for a, b in _IPA_REPLACEMENTS:
        s = s.replace(a, b)
    return [ch for ch in s if not ch.isspace()]


class MatchaFrontend:
    """Lexicon + tokens (+ optional English phonemizer) -> ``Unit``s -> ids."""

    def __init__(self, token2id: dict[str, int], lexicon: dict[str, tuple[int, ...]],
                 phonemizer: Phonemizer | None = None) -> None:
        self.token2id = token2id
        self.lexicon = lexicon
        self.phonemizer = phonemizer
        self.blank = token2id.get(" ")
        self.max_word = max((len(w) for w in lexicon if any(is_cjk(c) for c in w)), default=1)
        self._warned: set[str] = set()

    @classmethod
    def from_files(cls, lexicon: Path, tokens: Path, phonemizer: Phonemizer | None = None) -> "MatchaFrontend":
        t2i = read_tokens(tokens)
        return cls(t2i, read_lexicon(lexicon, t2i), phonemizer)

    def _oov(self, what: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("Matcha voice cannot say %r; skipped", what)

    def _zh_run(self, run: str) -> list[Unit]:
        units = []
        i = 0
        while i < len(run):
            for n in range(min(self.max_word, len(run) - i), 0, -1):
                ids = self.lexicon.get(run[i : i + n])
                if ids:
                    units.append(Unit(run[i : i + n], ids, "zh"))
                    i += n
                    break
            else:
                self._oov(run[i])
                i += 1
        return units

    def _en_word(self, word: str) -> Unit | None:
        ids = self.lexicon.get(word.lower())
        if ids is None and word in self.token2id:
            ids = (self.token2id[word],)
        if ids is None and self.phonemizer is not None:
            toks = ipa_to_tokens(self.phonemizer(word))
            ids = tuple(self.token2id[t] for t in toks if t in self.token2id)
        if not ids:
            self._oov(word)
            return None
        return Unit(word, ids, "en")

    def units(self, text: str) -> list[Unit]:
        """Speakable text -> units. Characters the voice has no tokens for are skipped (logged once)."""
        text = unicodedata.normalize("NFKC", text)
        text = "".join(_PUNCT_MAP.get(c, c) for c in text)
        out: list[Unit] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if is_cjk(ch):
                j = i
                while j < len(text) and is_cjk(text[j]):
                    j += 1
                out.extend(self._zh_run(text[i:j]))
                i = j
                continue
            m = _EN_WORD.match(text, i)
            if m:
                unit = self._en_word(m.group(0))
                if unit is not None:
                    if out and out[-1].kind == "en" and self.blank is not None:
                        prev = out[-1]
                        out[-1] = Unit(prev.text, prev.ids + (self.blank,), "en")
                    out.append(unit)
                i = m.end()
                continue
            if ch in PUNCT and ch in self.token2id:
                if out and out[-1].kind != "punct":
                    out.append(Unit(ch, (self.token2id[ch],), "punct"))
            elif not ch.isspace() and ch not in PUNCT:
                self._oov(ch)
            i += 1
        return out


def ids_of(units: list[Unit], add_blank: bool = False, pad_id: int = 0) -> list[int]:
    """Concatenate unit ids; with ``add_blank`` interleave ``pad_id`` (x -> 0 x1 0 x2 ... 0)."""
    ids = [i for u in units for i in u.ids]
    if not add_blank:
        return ids
    out = [pad_id] * (2 * len(ids) + 1)
    out[1::2] = ids
    return out


def token_count(units: list[Unit], add_blank: bool = False) -> int:
    n = sum(len(u.ids) for u in units)
    return 2 * n + 1 if add_blank else n
