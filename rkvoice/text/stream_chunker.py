"""Cut an LLM's text delta stream into TTS pieces as soon as each one is safe.

A piece is a finished sentence; else a clause at a comma (English: more than ``min_clause_words``
words; Chinese: a useful length; the first piece takes its first clause at ``first_clause_words``
words / ``first_clause_chars`` characters, so the first sound does not wait); else ``max_words``
words (English) or a safe cut (Chinese). No piece has more than ``first`` (the first) or ``chunk``
(later) spoken characters (``CutPoints.size``). Nothing is decided on the last character seen
when the next could change it: "3." may become "3.14", "$29." "$29.99", "。" may take a closing
quote. Pieces joined give the stream back; none ends inside a number, a Latin word, a URL or
brackets, nor inside a Chinese word, unless that stretch alone is longer than the limit.
"""

from __future__ import annotations

import logging
import re

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.text.script_spans import HAN
from rkvoice.text.split import CutPoints, pack

log = logging.getLogger(__name__)

MIN_EARLY_PIECE = 4
"""Fewest characters a piece cut early (``cut_early``) has."""
_CLAUSE_END = re.compile(r"[，、；：,;:]")

_LATIN_WORD = re.compile(r"[A-Za-z]+")
FORCED_WAIT = 3
"""Spoken characters past the limit to wait for before cutting inside a number, word or brackets."""
_ONE_ATOM = re.compile(r"(?:https?|ftp)://[!-~]*|[\dA-Za-z\u00C0-\u024F]*")
_LINK_ARRIVING = re.compile(r"\]\([^()\s]*$")
"""A markdown link whose URL is still arriving: its text must not be cut from it (alone, "[text]"
is cleaned away like a citation mark) and the URL's characters are not spoken."""


class StreamChunker:
    """Incremental chunker: ``feed(delta)`` returns the pieces now complete, ``flush()`` the rest."""

    min_clause_words = 5
    max_words = 12
    first_clause_words = 2
    first_clause_chars = 4

    def __init__(self, first: int = 24, chunk: int = 40) -> None:
        if first < 1 or chunk < 1:
            raise RkvoiceError(Stage.TEXT, "bad-chunk-size",
                               f"StreamChunker needs first >= 1 and chunk >= 1, got first={first} chunk={chunk}")
        self.first = first
        self.chunk = chunk
        self._buf = ""
        self._emitted = 0

    def feed(self, delta: str) -> list[str]:
        """Add text; return the pieces that became safe to speak (possibly none)."""
        if not isinstance(delta, str):
            raise RkvoiceError(Stage.TEXT, "bad-text", f"StreamChunker.feed needs a str, got {type(delta).__name__}")
        self._buf += delta
        return self._drain(final=False)

    def flush(self) -> list[str]:
        """End of stream: return everything not yet emitted, cut by the same rules."""
        out = self._drain(final=True)
        rest = self._buf
        if rest and not rest.isspace():
            out.append(rest)
        elif rest and out:
            out[-1] += rest
        self.reset()
        return out

    def reset(self) -> None:
        """Forget the pending text (barge-in); the next piece counts as a first piece again."""
        self._buf = ""
        self._emitted = 0

    @property
    def pending(self) -> str:
        """Text received but not emitted yet."""
        return self._buf

    def cut_early(self) -> list[str]:
        """The pending text up to its last clause end (at least MIN_EARLY_PIECE characters in), then what
        of the rest is complete; [] (nothing taken) when there is no such clause end. For a listener
        about to hear silence: a clause now rather than a whole sentence later."""
        cuts = [m.end() for m in _CLAUSE_END.finditer(self._buf) if m.end() >= MIN_EARLY_PIECE]
        if not cuts:
            return []
        piece, rest = self._buf[: cuts[-1]], self._buf[cuts[-1]:]
        self.reset()
        log.debug("cutting %r early", piece)
        return [piece, *self.feed(rest)]

    # -- deciding -----------------------------------------------------------------------------

    def _drain(self, final: bool) -> list[str]:
        out: list[str] = []
        while self._buf and not self._buf.isspace() and (cut := self._next_cut(final)) is not None:
            out.append(self._buf[:cut])
            self._buf = self._buf[cut:]
            self._emitted += 1
        return out

    def _next_cut(self, final: bool) -> int | None:
        buf = self._buf
        if not final and _ONE_ATOM.fullmatch(buf):  # a single word or URL so far: nothing to decide
            return None
        if not final and len(buf) <= 4 * self.chunk and _LINK_ARRIVING.search(buf):
            return None
        first = self._emitted == 0
        limit = self.first if first else self.chunk
        cuts = CutPoints(buf, final=final, open_brackets_block=len(buf) <= 4 * self.chunk)
        words = len(_LATIN_WORD.findall(buf))
        chinese = words == 0 or len(HAN.findall(buf)) >= words  # character limits unless English words outnumber
        if chinese:  # a sentence within the limit, or a clause of a useful length
            measure, most = (lambda c: cuts.size(0, c)), limit
            enough = self.first_clause_chars if first else max(6, limit // 3)
        else:  # a sentence of at most max_words words, or a clause of more than min_clause_words
            measure, most = (lambda c: len(buf[:c].split())), self.max_words
            enough = self.first_clause_words if first else self.min_clause_words + 1
        ends = cuts.levels[0]
        cut = ends[0] if ends and measure(ends[0]) <= most else None
        if cut is None:  # the first clause long enough (a measure grows with the cut), if it fits
            cut = next((c for c in cuts.levels[1] if measure(c) >= enough), None)
            cut = cut if cut is not None and measure(cut) <= most else None
        if cut is None and not chinese:
            cut = self._long_english(cuts, final)
        if cut is not None and cuts.size(0, cut) <= limit:
            return cut
        return self._within(cuts, limit, final)  # nothing fits yet, or the words' cut would be too long

    def _within(self, cuts: CutPoints, limit: int, final: bool) -> int | None:
        """The end of the first piece when the pending text is longer than ``limit`` spoken
        characters (best cut level first, see ``pack``); None while it fits. A cut inside a
        number, word or brackets waits for FORCED_WAIT more characters: they may still end it."""
        size = cuts.size(0, cuts.n)
        if size <= limit:
            return None
        spans = pack(cuts, 0, cuts.n, limit, self.chunk)
        if len(spans) < 2:
            return None
        cut = spans[0][1]
        forced = cut not in cuts.levels[3]
        if forced and not final and size <= limit + FORCED_WAIT:
            return None
        return cut

    def _long_english(self, cuts: CutPoints, final: bool) -> int | None:
        """English with no sentence or clause to cut at: the first word gap at max_words words."""
        text, gaps = cuts.text, cuts.levels[2]
        for c in gaps:
            if len(text[:c].split()) >= self.max_words:
                return c
        if gaps and len(text.strip()) > 4 * self.chunk:
            return gaps[-1]  # a few very long "words" (URL, code): don't hold them back forever
        if final and cuts.levels[0]:
            return cuts.levels[0][0]  # a sentence longer than max_words with no gap to cut at
        return None
