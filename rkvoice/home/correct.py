"""The home's names put back into a transcript: a span whose toneless syllables are close enough to a
name the home exposes is replaced by that name (卧室 heard as 我是, 客厅灯 as 客厅东).

Syllables come from pypinyin without tones, in the pinyin scheme's strict initials and finals
(``rkvoice.hear.pinyin_match.toneless``: 卧 is "" + "uo", so 若 is one initial off). A syllable pair
costs 0 when equal; its initial and its final each add 0.25 when they differ by one of the usual
confusions (zh/z, ch/c, sh/s, n/l, f/h; in/ing, en/eng, an/ang, ian/iang, uan/uang) and 0.5 when
they differ otherwise, so a wholly different syllable costs 1. A span of a name's length matches the
name when its cost is at most ``threshold`` per syllable (docs/decisions/0012-home-names.md).

What is never rewritten:

- a transcript without a control verb (打开, 关闭, 调到, ...: ``CUES``; 打开 and 关闭 also by their
  sound alone, 关比 -> 关闭, where the transcript names the home): the assistant's other questions;
- a span that partly covers a name already said right, or changes one, or touches a control verb
  (打开台灯 never becomes 打白台灯); a span is only widened over a right name, keeping it (客厅东 ->
  客厅灯 over 客厅; 书房台灯 never becomes 主卧台灯);
- a span where two different names fit equally well (HA's own disambiguation is for the same name
  in two areas, which needs no rewrite);
- a span that keeps none of the name's own characters, unless it sounds exactly like the name and
  stands next to a control verb, 把/将/的 or another name (卧室 for 我是 in 关闭我是的灯, not in
  我是小明，打开音乐);
- a span whose first or last syllable is off when more of a word goes on beyond it (次卧吊灯 is not
  次卧灯 + 灯; 客厅东 at the end, or before 的, 关掉, a name, is 客厅灯);
- a span that would turn a particle (的, 把, 了, ...) into a name's character (把客厅的灯关掉 stays);
- names of one character (门, 灯), or with anything but Han characters (English, digits): those are
  left to Home Assistant as they are.

Candidates come from an index of the names' syllables (folded over the confusions), not from a
scan of every name at every position, and only a name with few enough syllables off is costed; names
said right are looked up by substring: about 2 ms per command with 2,000 names, 15 ms with 20,000
(p90 on a loaded 2-core x86; building the index of 20,000 names takes ~20 s, in the names' thread).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rkvoice.hear.pinyin_match import Syllable, toneless

THRESHOLD = 0.2
"""Largest cost per syllable of a match (chosen on bench/home_names.py's measured set, decision 0012)."""
MAX_NAME = 8
"""Longest name (syllables) matched by sound; a longer one is matched only as written."""
CUES = ("打开", "开启", "关闭", "关掉", "关上", "调到", "调成", "调为", "调高", "调低", "调亮", "调暗", "设为", "设成",
        "设置为", "设定为", "拉开", "拉上", "开一下", "关一下", "升到", "降到", "掉到")
"""The control verbs of a home command (the home route's too): only a transcript with one is corrected."""
SPOKEN_CUES = ("打开", "关闭", "关掉", "开启", "关上")
"""Control verbs also recognised by their sound alone (关比, 官闭 -> 关闭), in a transcript naming the home."""
PARTICLES = frozenset("的地得了把将和跟与在吧呢啊呀吗")
"""Characters of a command's grammar: a span never turns one into a name's other character."""
ANCHORS = (*CUES, "把", "将", "的", "让", "请")
"""Words next to which a name is said: a span that keeps none of a name's characters must touch one
(or a name) to be replaced (关闭我是的灯 -> 卧室, not 我是小明，打开音乐)."""
CONFUSED_INITIALS = {"zh": "z", "ch": "c", "sh": "s", "l": "n", "f": "h"}
CONFUSED_FINALS = {"ing": "in", "eng": "en", "ang": "an", "iang": "ian", "uang": "uan"}
_HAN_ONLY = re.compile(r"^[\u3400-\u9fff]+$")
_HAN = re.compile(r"[\u3400-\u9fff]")
_PUNCT = re.compile(r"[\s，。！？、；：“”‘’\"'!?,;:（）()《》【】\[\]…~～·-]+")


def clean(text: str) -> str:
    """``text`` as names are compared: no spaces or punctuation, lower case."""
    return _PUNCT.sub("", text).lower()


def _fold(s: Syllable) -> str:
    return CONFUSED_INITIALS.get(s.initial, s.initial) + "|" + CONFUSED_FINALS.get(s.final, s.final)


def _part(a: str, b: str, folded: dict[str, str]) -> float:
    if a == b:
        return 0.0
    return 0.25 if folded.get(a, a) == folded.get(b, b) else 0.5


def syllable_cost(a: Syllable, b: Syllable) -> float:
    """0 equal, 0.25 per confused part, 0.5 per other differing part (1: another syllable)."""
    return _part(a.initial, b.initial, CONFUSED_INITIALS) + _part(a.final, b.final, CONFUSED_FINALS)


@dataclass(frozen=True)
class Fix:
    """One span replaced: ``text[start:end]`` was ``heard``, is now ``name``."""

    start: int
    end: int
    heard: str
    name: str
    cost: float


@dataclass(frozen=True)
class _Name:
    text: str
    syl: tuple[Syllable, ...]


class NameMatcher:
    """The names of one home, indexed by folded syllable; ``correct`` is thread-safe (read-only)."""

    def __init__(self, names: Iterable[str], threshold: float = THRESHOLD) -> None:
        self.threshold = threshold
        self.literal = _Words(n for n in names if len(n) >= 2)
        """Every name of two characters or more: said right, it is kept as it is."""
        self._names: list[_Name] = []
        self._index: dict[str, list[tuple[int, int]]] = {}
        self._cues = [(cue, [(x.initial, x.final) for x in toneless(cue, strict=True)]) for cue in SPOKEN_CUES]
        for text in sorted(self.literal):
            if not _HAN_ONLY.match(text) or len(text) > MAX_NAME:
                continue
            syl = tuple(toneless(text, strict=True))
            if len(syl) != len(text):
                continue
            nid = len(self._names)
            self._names.append(_Name(text, syl))
            for offset, s in enumerate(syl):
                self._index.setdefault(_fold(s), []).append((nid, offset))

    def __len__(self) -> int:
        return len(self.literal)

    def correct(self, text: str) -> str:
        """``text`` with the spans that match a name replaced; exactly ``text`` when none does."""
        return apply(text, self.fixes(text))

    def fixes(self, text: str) -> list[Fix]:
        """The replacements ``correct`` makes, in text order."""
        if not self._names:
            return []
        tokens = toneless(text, strict=True)
        heard_cues = [] if any(c in text for c in CUES) else self._heard_cues(text, tokens)
        if not heard_cues and not any(c in text for c in CUES):
            return []
        said, cues = self.literal.spans(text), _spans(text, CUES) + [(f.start, f.end) for f in heard_cues]
        keys = [_fold(s) for s in tokens]
        hits: dict[tuple[int, int], int] = {}
        """(name, first token) -> how many of its syllables are the name's, confusions aside"""
        for i, key in enumerate(keys):
            for nid, offset in self._index.get(key, ()):
                if i >= offset:
                    hits[nid, i - offset] = hits.get((nid, i - offset), 0) + 1
        found: dict[tuple[int, int], list[tuple[float, str]]] = {}
        for (nid, start), hit in hits.items():
            name = self._names[nid]
            if (len(name.syl) - hit) * 0.5 > self.threshold * len(name.syl):
                continue  # each other syllable costs 0.5 at least: too far whatever the rest (20,000 names)
            match = self._match(name, tokens, start, text)
            if match is not None:
                found.setdefault((tokens[start].pos, tokens[start].pos + len(name.text)), []).append((match, name.text))
        fixes = _choose(text, found, said, cues)
        if heard_cues and not fixes and not said:
            return []  # a verb by its sound alone and nothing of the home: not a home command
        return sorted(fixes + heard_cues, key=lambda f: f.start)

    def _edges_hold(self, name: _Name, tokens: list[Syllable], start: int, text: str) -> bool:
        """A span whose first or last syllable is not the name's must end there: at the text's edge,
        punctuation, an anchor word or a name (次卧吊灯 is not 次卧灯 + 灯)."""
        n = len(name.syl)
        first, last = tokens[start].pos, tokens[start + n - 1].pos
        if syllable_cost(name.syl[0], tokens[start]) > 0 and not _edge_free(text, first, False, self.literal):
            return False
        return syllable_cost(name.syl[-1], tokens[start + n - 1]) == 0 or \
            _edge_free(text, last + 1, True, self.literal)

    def _heard_cues(self, text: str, tokens: list[Syllable]) -> list[Fix]:
        """Spans that sound exactly like a control verb of ``SPOKEN_CUES`` (tones aside)."""
        out = []
        for i in range(len(tokens)):
            for cue, sound in self._cues:
                span = tokens[i:i + len(sound)]
                if len(span) == len(sound) and span[-1].pos == span[0].pos + len(sound) - 1 and \
                        [(x.initial, x.final) for x in span] == sound:
                    out.append(Fix(span[0].pos, span[-1].pos + 1, text[span[0].pos:span[-1].pos + 1], cue, 0.0))
                    break
        return out

    def _match(self, name: _Name, tokens: list[Syllable], start: int, text: str) -> float | None:
        n = len(name.syl)
        if start + n > len(tokens):
            return None
        first = tokens[start].pos
        if tokens[start + n - 1].pos != first + n - 1:
            return None  # the span crosses punctuation, a digit or a space
        heard = text[first:first + n]
        if heard == name.text:
            return None
        cost = 0.0
        limit = self.threshold * n
        for a, b in zip(name.syl, tokens[start:start + n]):
            cost += syllable_cost(a, b)
            if cost > limit:
                return None
        if not self._edges_hold(name, tokens, start, text):
            return None
        kept = sum(x == y for x, y in zip(heard, name.text))
        if any(x != y and x in PARTICLES for x, y in zip(heard, name.text)):
            return None
        if not kept and (cost > 0 or not _touches(text, first, first + n, self.literal)):
            return None
        return cost


def apply(text: str, fixes: list[Fix]) -> str:
    """``text`` with ``fixes`` (``NameMatcher.fixes`` of it) made."""
    for fix in reversed(fixes):
        text = text[:fix.start] + fix.name + text[fix.end:]
    return text


class _Words(frozenset[str]):
    """Names looked up by the text's substrings of their lengths (not one scan of 20,000 names each)."""

    def __init__(self, words: Iterable[str]) -> None:
        super().__init__()
        self.lengths = sorted({len(w) for w in self})

    def starts(self, text: str) -> bool:
        return any(text[:n] in self for n in self.lengths if n <= len(text))

    def ends(self, text: str) -> bool:
        return any(text[-n:] in self for n in self.lengths if n <= len(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where each name occurs in ``text`` (overlaps too)."""
        return [(i, i + n) for i in range(len(text)) for n in self.lengths if i + n <= len(text) and text[i:i + n] in self]


def _edge_free(text: str, at: int, after: bool, names: _Words) -> bool:
    """``text`` ends at ``at`` on that side (or goes on with punctuation, a digit, an anchor word or a name)."""
    rest = text[at:] if after else text[:at]
    if not rest or not _HAN.match(rest[0] if after else rest[-1]):
        return True
    if after:
        return any(rest.startswith(w) for w in ANCHORS) or names.starts(rest)
    return any(rest.endswith(w) for w in ANCHORS) or names.ends(rest)


def _touches(text: str, start: int, end: int, names: _Words) -> bool:
    """``text[start:end]`` is next to an anchor word or a name."""
    before, after = text[:start], text[end:]
    return any(before.endswith(w) or after.startswith(w) for w in ANCHORS) or names.ends(before) or names.starts(after)


def _spans(text: str, words: Iterable[str]) -> list[tuple[int, int]]:
    out = []
    for w in words:
        at = text.find(w)
        while at >= 0:
            out.append((at, at + len(w)))
            at = text.find(w, at + 1)
    return out


def _choose(text: str, found: dict[tuple[int, int], list[tuple[float, str]]], said: list[tuple[int, int]],
            cues: list[tuple[int, int]]) -> list[Fix]:
    """Longest names first, then cheapest; none across the edge of a name said right, none over a cue,
    none ambiguous."""
    taken: list[tuple[int, int]] = []
    fixes = []
    for (start, end), options in sorted(found.items(), key=lambda kv: (kv[0][0] - kv[0][1], min(kv[1])[0], kv[0][0])):
        options.sort()
        cost, name = options[0]
        if len(options) > 1 and options[1][0] == cost and options[1][1] != name:
            continue  # two names fit as well: leave it
        if any(s < end and start < e and not (start <= s and e <= end and name[s - start:e - start] == text[s:e])
               for s, e in said):
            continue  # would cut or change a name said right
        if any(s < end and start < e for s, e in (*cues, *taken)):
            continue
        taken.append((start, end))
        fixes.append(Fix(start, end, text[start:end], name, cost))
    return sorted(fixes, key=lambda f: f.start)
