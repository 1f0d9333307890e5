"""Chinese text -> Baker symbol ids for FastSpeech2: pypinyin readings, tone sandhi, erhua, prosody.

The symbols are the model's own ``baker_mapper.json`` (``symbol_to_id``: pad, sil, #0..#3, initials,
finals with a tone digit, eos; ``pinyin_dict``: syllable -> [initial, final]). As in the training
data, characters of a phrase are joined by ``#0`` and punctuation becomes ``#3`` (the Baker
corpus's intonation-phrase break): ``sil j in1 #0 t ian1 #3 n i3 #0 h ao3 sil eos``. Digits left
unnormalised are read one by one and short Latin words spelled with Chinese letter names; anything
else unpronounceable is dropped (debug log).
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass, replace

from pypinyin import Style, lazy_pinyin

from rkvoice.text.spoken_numbers import cn_digits

log = logging.getLogger(__name__)

BREAK_MINOR = "#0"  # between characters of a phrase
BREAK_MAJOR = "#3"  # at punctuation
_BREAK_RANK = {"#0": 0, "#1": 1, "#2": 2, "#3": 3}

_HAN = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_HAN}]+|[A-Za-z]+|[0-9]+|\S")
_PUNCT = set("，,、；;：:。.！!？?…—～~（）()《》“”\"'‘’「」『』【】[]·-/")

_UNKNOWN = re.compile(rf"[^{_HAN}A-Za-z0-9\s{re.escape(''.join(sorted(_PUNCT)))}]")

_NUMERALS = set("零〇一二两三四五六七八九十百千万亿第")
# Chinese letter names, as syllables of the Baker inventory (mapper pinyin + tone).
_LETTERS = {
    "a": ["ei1"], "b": ["bi4"], "c": ["xi1"], "d": ["di4"], "e": ["yi4"], "f": ["ai2", "fu5"],
    "g": ["ji4"], "h": ["ai2", "qi1"], "i": ["ai4"], "j": ["jie4"], "k": ["kai4"],
    "l": ["ai2", "le5"], "m": ["ai2", "mu5"], "n": ["en1"], "o": ["ou1"], "p": ["pi1"],
    "q": ["qiu1"], "r": ["a1", "er5"], "s": ["ai2", "si5"], "t": ["ti1"], "u": ["you1"],
    "v": ["wei1"], "w": ["da2", "bu5", "liu5"], "x": ["ai2", "ke4", "si5"], "y": ["wai4"],
    "z": ["zei4"],
}
MAX_SPELLED = 5
"""Latin words up to this length (or all-caps acronyms) are spelled; longer ones are dropped."""

# 儿 is a full syllable (not erhua) after these characters and before these ones.
_REAL_ER_AFTER = set("女婴幼孤健男少胎患宠育托侄孙混新孩")
_REAL_ER_BEFORE = set("子童女科歌时孙媳戏")


@dataclass(frozen=True)
class Syllable:
    pinyin: str  # toneless, mapper spelling (v for ü)
    tone: int  # 1-5
    char: str
    erhua: bool = False


class PinyinFrontend:
    """Text -> Baker symbols -> ids, built on the model's own symbol map."""

    def __init__(self, symbol_to_id: dict[str, int], pinyin_dict: dict[str, list[str]]) -> None:
        self.symbol_to_id = symbol_to_id
        self.pinyin_dict = pinyin_dict
        for required in ("sil", "eos", BREAK_MINOR, BREAK_MAJOR):
            if required not in symbol_to_id:
                raise ValueError(f"symbol map lacks {required!r}")

    # --- public -----------------------------------------------------------------------------

    def symbols(self, text: str) -> list[str]:
        """Baker symbols for text, ``sil`` ... ``sil`` (no eos); [] if nothing is pronounceable."""
        out: list[str] = []
        for item in self._items(text):
            if isinstance(item, str):  # a break mark
                self._add_break(out, item)
                continue
            phones = self._syllable_phones(item)
            if phones is None:
                log.debug("no Baker symbols for %r (%s%d); dropped", item.char, item.pinyin, item.tone)
                continue
            if out and out[-1] not in _BREAK_RANK and not item.erhua:
                out.append(BREAK_MINOR)
            out.extend(phones)
        while out and out[-1] in _BREAK_RANK:  # a trailing break (none leads: breaks follow a syllable)
            out.pop()
        return ["sil", *out, "sil"] if out else []

    def ids(self, text: str) -> list[int]:
        """Model input ids (symbols + eos); [] if the text has nothing pronounceable."""
        symbols = self.symbols(text)
        return [self.symbol_to_id[s] for s in [*symbols, "eos"]] if symbols else []

    def clauses(self, text: str) -> list[str]:
        """Text split after each punctuation mark (for synthesising long text in pieces)."""
        parts = re.split(r"(?<=[，,、；;：:。！!？?…\n])", text)
        return [p for p in parts if p.strip()]

    # --- internals --------------------------------------------------------------------------

    @staticmethod
    def _add_break(out: list[str], mark: str) -> None:
        """After a syllable, a break mark; after another mark, the stronger of the two (the first on a tie)."""
        if out and out[-1] in _BREAK_RANK:
            out[-1] = max(out[-1], mark, key=_BREAK_RANK.__getitem__)
        elif out:
            out.append(mark)

    def _syllable_phones(self, syl: Syllable) -> list[str] | None:
        pinyin = syl.pinyin
        if pinyin not in self.pinyin_dict:
            pinyin = {"n": "en", "ng": "en", "m": "mu", "hm": "hen", "hng": "heng"}.get(pinyin, pinyin)
        parts = self.pinyin_dict.get(pinyin)
        if not parts:
            return None
        initial, final = parts
        if syl.erhua:
            return ["er5"] if "er5" in self.symbol_to_id else None
        final_sym = f"{final}{syl.tone}"
        if initial not in self.symbol_to_id or final_sym not in self.symbol_to_id:
            return None
        return [initial, final_sym]

    def _items(self, text: str) -> list[Syllable | str]:
        """Syllables and break marks in reading order."""
        items: list[Syllable | str] = []
        text = unicodedata.normalize("NFKC", text)  # fullwidth Ａ１ -> A1; Han characters unchanged
        unknown = _UNKNOWN.findall(text)
        if unknown:
            log.debug("characters without a reading dropped: %r", "".join(unknown)[:40])
            text = _UNKNOWN.sub("", text)
        for token in _TOKEN.findall(text):
            first = token[0]
            if re.match(rf"[{_HAN}]", first):
                items.extend(_han_syllables(token))
            elif first.isascii() and first.isalpha():
                if len(token) <= MAX_SPELLED or token.isupper():
                    items.extend(["#1", *_spell(token), "#1"])
                else:
                    log.debug("Latin word %r not pronounceable by this voice; dropped", token)
            elif first.isdigit():
                log.debug("unnormalised digits %r read one by one", token)
                items.extend(_han_syllables(cn_digits(token)))
            elif first in _PUNCT:
                items.append(BREAK_MAJOR)
            else:
                log.debug("character %r has no reading; dropped", token)
        return items


def _spell(word: str) -> list[Syllable]:
    return [Syllable(reading[:-1], int(reading[-1]), ch) for ch in word.lower() for reading in _LETTERS[ch]]


def _han_syllables(run: str) -> list[Syllable]:
    """Readings of a run of Han characters with erhua and tone sandhi applied."""
    readings = lazy_pinyin(
        run,
        style=Style.TONE3,
        neutral_tone_with_five=True,
        # pypinyin's stub types the callback as str -> str; the runtime also takes a list (one
        # reading per character, as in pypinyin's own README), which keeps readings aligned with run:
        # an empty reading for each character without one.
        errors=lambda chars: [""] * len(chars),  # type: ignore[arg-type,return-value]
    )
    syls: list[Syllable] = []
    for i, (char, reading) in enumerate(zip(run, readings)):
        if not reading:
            log.debug("character %r has no reading; dropped", char)
            continue
        pinyin, tone = (reading[:-1], int(reading[-1])) if reading[-1].isdigit() else (reading, 5)
        after = run[i + 1 : i + 2]  # "" at the end of the run
        erhua = char == "儿" and i > 0 and run[i - 1] not in _REAL_ER_AFTER and after not in _REAL_ER_BEFORE
        syls.append(Syllable(pinyin, tone, char, erhua))
    return _sandhi(syls)


def _sandhi(syls: list[Syllable]) -> list[Syllable]:
    """Tone sandhi for 一, 不 and runs of third tones (within one run of Han characters)."""
    out = list(syls)
    n = len(out)

    def next_tone(i: int) -> int | None:
        j = i + 1
        while j < n and out[j].erhua:
            j += 1
        return out[j].tone if j < n else None

    for i, s in enumerate(out):
        nt = next_tone(i)
        if s.char == "一" and s.pinyin == "yi":
            prev = out[i - 1].char if i > 0 else ""
            nxt = out[i + 1].char if i + 1 < n else ""
            if prev in _NUMERALS or nxt in _NUMERALS or nt is None:
                out[i] = replace(s, tone=1)  # counting, ordinals, final position
            elif prev and prev == nxt:
                out[i] = replace(s, tone=5)  # 看一看
            else:  # 2 before a fourth tone, 4 before the others
                out[i] = replace(s, tone={4: 2, 1: 4, 2: 4, 3: 4}.get(nt, s.tone))
        elif s.char == "不" and s.pinyin == "bu":
            if i > 0 and i + 1 < n and out[i - 1].char == out[i + 1].char:
                out[i] = replace(s, tone=5)  # 是不是
            elif nt == 4:
                out[i] = replace(s, tone=2)
    # third tone before a third tone becomes second (the last of a run keeps tone 3)
    for i in range(n - 1):
        if out[i].tone == 3 and not out[i].erhua and next_tone(i) == 3:
            out[i] = replace(out[i], tone=2)
    return out
