"""The one speech path: a turn's text -> pieces cut with the engine's own sizes -> speakable ->
synthesised -> post-processed audio blocks.

``Pieces`` holds one turn's cutting state (its first piece short, later ones longer) and yields one
``Piece`` at a time, so the caller decides where synthesis runs and where the audio goes: the
speaker's TTS worker (the previous piece plays meanwhile), the Wyoming TTS worker (each piece is
sent as soon as it is ready), a bench's loop. Each piece is marked on the turn's timeline (chunk,
synth_start, synth_end); a cancelled turn synthesises nothing more.

An engine that streams (a StreamingTts whose ``streaming`` is true: the Piper voice,
rkvoice.tts.piper_stream; also a gated view of one, as the Wyoming server's) gives a piece's audio in parts; each part goes out post-processed (``StreamPost``) as one ``Piece`` of the
same index as soon as it is made, so the first sound waits for the first part only. synth_end then
comes after the piece's last part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np

from rkvoice.audio.post import StreamPost, prepare_piece
from rkvoice.clock import Clock
from rkvoice.config import Config
from rkvoice.text.normalize import speakable
from rkvoice.text.split import split_for_tts
from rkvoice.timeline import Ev
from rkvoice.tts.base import StreamingTts, TtsEngine, streams
from rkvoice.turn import Turn

FIRST_AHEAD_MS = 40
"""A turn's first streamed sound goes out once it holds this much audio. The first window's sound
after the lead trim is 20-80 ms (the voice's onset varies); 20 ms left a 40 ms gap while the next
window was made (2 of 12 idle runs, Piper voice, 2-core x86_64); holding below 40 ms left none in
12 runs (60 ms: none either, first audio p50 +4 ms)."""

def piece_chars(cfg: Config, engine: object) -> tuple[int, int]:
    """(first, later) piece lengths in characters: the engine's own when it has them (the Matcha
    voice: tts.matcha.first_chars / chunk_chars, 24 / 40), else tts.first_chars / tts.chunk_chars."""
    own: tuple[int, int] | None = getattr(engine, "piece_chars", None)  # vits: None when not streaming
    return own or (cfg.tts.first_chars, cfg.tts.chunk_chars)


@dataclass(frozen=True)
class Piece:
    index: int
    blocks: np.ndarray
    """int16 rows of one block each, at ``rate``."""
    rate: int

    @property
    def audio_s(self) -> float:
        return self.blocks.size / self.rate


class Pieces:
    """One turn's speech through ``engine`` (a loaded voice, or a gated view of one): ``pieces(text)``
    yields its pieces, synthesised one by one, streamed when the engine streams (``streams``).

    ``out_rate`` None keeps the voice's rate; blocks are ``block_ms`` long (at least one sample);
    ``sid`` (default ``tts.sid``) is the speaker; ``normalize`` and ``split`` replace ``speakable`` and
    ``split_for_tts``; synthesis time is taken on ``clock`` (default: the turn's).
    """

    def __init__(self, engine: TtsEngine, cfg: Config, turn: Turn, *, out_rate: int | None = None,
                 block_ms: int | None = None, fade_ms: float | None = None, sid: int | None = None,
                 normalize: Callable[[str], str] | None = None,
                 split: Callable[[str, int, int], list[str]] | None = None, clock: Clock | None = None) -> None:
        self.engine = engine
        self.turn = turn
        self.clock = clock or turn.clock
        self.first, self.later = piece_chars(cfg, engine)
        self.out_rate = out_rate
        self.block_ms = cfg.audio.block_ms if block_ms is None else block_ms
        self.fade_ms = cfg.audio.crossfade_ms if fade_ms is None else fade_ms
        self.sid = cfg.tts.sid if sid is None else sid
        self.speed = cfg.tts.speed
        self.streaming = streams(engine)
        """Whether each piece's audio goes out in parts as it is made (else whole, from ``generate``)."""
        self._normalize = normalize or speakable
        self._split = split or split_for_tts
        self.count = 0
        """Pieces sent to synthesis so far; 0: the next cut is the turn's first (short) one."""

    def cut(self, text: str, limit: int | None = None) -> list[str]:
        """Cut the written text (where numbers and words are still visible, so no cut lands inside
        them) at most ``limit`` (default: the later size) characters a piece, the turn's first piece
        shorter; then make each speakable. Pieces with nothing to say are dropped."""
        if not text.strip():
            return []
        limit = limit or self.later
        chunks = [self._normalize(c) for c in self._split(text, self.first if self.count == 0 else limit, limit)]
        return [c for c in chunks if c.strip()]

    def pieces(self, text: str, limit: int | None = None) -> Iterator[Piece]:
        """``text`` cut, then each piece synthesised and post-processed when the caller asks for it.
        Ends early once the turn is cancelled (also when it was cancelled during a synthesis)."""
        for chunk in self.cut(text, limit):
            if self.turn.cancelled:
                return
            if self.streaming:
                yield from self.streamed(chunk)
                continue
            piece = self.synthesise(chunk)
            if piece is None:
                return
            yield piece

    def streamed(self, text: str) -> Iterator[Piece]:
        """One piece made in parts (the engine's stream), each part a Piece as soon as it is made."""
        engine = cast(StreamingTts, self.engine)  # self.streaming: streams(engine)
        index, tl, tid = self.count, self.turn.timeline, self.turn.id
        self.count += 1
        tl.mark(Ev.CHUNK, turn=tid, index=index, text=text)
        tl.mark(Ev.SYNTH_START, turn=tid, index=index)
        rate = int(engine.sample_rate)
        out_rate = self.out_rate or rate
        post = StreamPost(rate, out_rate, max(1, out_rate * self.block_ms // 1000), self.fade_ms)
        parts, synth_ms, samples, last = iter(engine.stream(text, self.sid, self.speed)), 0.0, 0, False
        held = np.zeros((0, post.block), dtype=np.int16) if index == 0 else None
        while not last and not self.turn.cancelled:
            t0 = self.clock.now()
            part, last = next(parts, (np.zeros(0, dtype=np.float32), True))
            blocks = post.push(part, last)
            synth_ms, samples = synth_ms + (self.clock.now() - t0) * 1000.0, samples + len(part)
            if held is not None:  # the turn's first sound: held until it can cover the next part's making
                blocks = held = np.concatenate([held, blocks])
                if blocks.size * 1000 < FIRST_AHEAD_MS * out_rate and not last:
                    continue
                held = None
            if len(blocks):
                yield Piece(index, blocks, out_rate)
        tl.mark(Ev.SYNTH_END, turn=tid, index=index, synth_ms=round(synth_ms, 3), audio_s=round(samples / rate, 4))

    def synthesise(self, text: str) -> Piece | None:
        """One piece, marked on the timeline; None if the turn was cancelled meanwhile."""
        index, tl, tid = self.count, self.turn.timeline, self.turn.id
        self.count += 1
        tl.mark(Ev.CHUNK, turn=tid, index=index, text=text)
        t0 = self.clock.now()
        tl.mark(Ev.SYNTH_START, turn=tid, index=index)
        samples, rate = self.engine.generate(text, self.sid, self.speed)
        synth_ms = (self.clock.now() - t0) * 1000.0
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        tl.mark(Ev.SYNTH_END, turn=tid, index=index, synth_ms=round(synth_ms, 3), audio_s=round(len(samples) / rate, 4))
        if self.turn.cancelled:
            return None
        out_rate = self.out_rate or int(rate)
        block = max(1, out_rate * self.block_ms // 1000)
        return Piece(index, prepare_piece(samples, rate, out_rate, block, fade_ms=self.fade_ms), out_rate)
