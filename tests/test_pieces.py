"""The one speech path (rkvoice.pieces): the engine's own piece sizes, post-processing, cancellation."""

from __future__ import annotations

import numpy as np

from bench.fake_clock import FakeClock
from rkvoice.config import Config
from rkvoice.pieces import Pieces
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

TEXT = "今天天气不错，我们出去走走吧。公园里的花都开了，空气也很新鲜。记得带上水和帽子。"


class Voice:
    """0.1 s of tone per character at 22050 Hz, 50 ms of clock time per call; ``during`` runs inside a call."""

    sample_rate = 22050

    def __init__(self, clock: FakeClock, piece_chars: tuple[int, int] | None = None) -> None:
        self.clock = clock
        self.texts: list[str] = []
        self.during = lambda: None
        if piece_chars is not None:
            self.piece_chars = piece_chars

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        self.texts.append(text)
        self.clock.advance(0.05)
        self.during()
        n = 2205 * len(text)
        return (0.3 * np.sin(np.arange(n) * 0.1)).astype(np.float32), 22050


def test_a_turn_is_cut_with_the_engines_own_sizes_the_first_piece_short():
    clock = FakeClock()
    voice = Voice(clock, piece_chars=(8, 16))
    turn = Turn(clock=clock)
    pieces = list(Pieces(voice, Config(), turn, out_rate=16000, normalize=lambda t: t).pieces(TEXT))
    assert "".join(voice.texts) == TEXT and len(pieces) == len(voice.texts) >= 3
    assert len(voice.texts[0]) <= 8 and all(len(t) <= 16 for t in voice.texts[1:])
    assert [p.index for p in pieces] == list(range(len(pieces)))
    first = pieces[0]
    assert first.rate == 16000 and first.blocks.dtype == np.int16
    assert first.blocks.shape[1] == 16000 * Config().audio.block_ms // 1000  # blocks of audio.block_ms
    ends = turn.timeline.find(Ev.SYNTH_END)
    assert [e.get("synth_ms") for e in ends] == [50.0] * len(pieces)  # on the turn's clock


def test_an_engine_without_sizes_is_cut_with_the_configured_ones():
    clock = FakeClock()
    voice = Voice(clock)
    cfg = Config()
    pieces = Pieces(voice, cfg, Turn(clock=clock))
    assert (pieces.first, pieces.later) == (cfg.tts.first_chars, cfg.tts.chunk_chars)


def test_a_turn_cancelled_during_a_synthesis_gets_no_more_pieces():
    clock = FakeClock()
    voice = Voice(clock, piece_chars=(8, 16))
    turn = Turn(clock=clock)
    voice.during = lambda: turn.cancel("barge-in")
    assert list(Pieces(voice, Config(), turn, normalize=lambda t: t).pieces(TEXT)) == []
    assert len(voice.texts) == 1  # the piece in progress, nothing after it
