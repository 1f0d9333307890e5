"""The one speech path (rkvoice.pieces): the engine's own piece sizes, post-processing, cancellation."""

from __future__ import annotations

import numpy as np

from rkvoice.config import Config
from rkvoice.pieces import FIRST_AHEAD_MS, Pieces
from rkvoice.timeline import Ev
from rkvoice.turn import Turn
from tests.support import FakeClock

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


class StreamingVoice(Voice):
    """Streams: per text, parts of ``part_ms`` of tone (the first one ``first_ms``), 10 ms of clock each."""

    streaming = True

    def __init__(self, clock: FakeClock, first_ms: int, part_ms: int = 280, parts: int = 4) -> None:
        super().__init__(clock, piece_chars=(8, 16))
        self.first_ms, self.part_ms, self.parts = first_ms, part_ms, parts

    def stream(self, text: str, sid: int = 0, speed: float = 1.0):
        self.texts.append(text)
        for i in range(self.parts):
            self.clock.advance(0.01)
            n = 22050 * (self.first_ms if i == 0 else self.part_ms) // 1000
            yield (0.3 * np.sin(np.arange(n) * 0.1)).astype(np.float32), i == self.parts - 1


def _streamed(first_ms: int) -> list:
    clock = FakeClock()
    turn = Turn(clock=clock)
    voice = StreamingVoice(clock, first_ms)
    return list(Pieces(voice, Config(), turn, out_rate=16000, normalize=lambda t: t).pieces(TEXT[:14]))


def test_a_streamed_turn_starts_with_enough_sound_to_cover_the_next_part():
    # a first part with 20 ms of sound would leave the player dry while the next part is made: it is held
    # and goes out with the next part; one with 80 ms goes out alone, at once
    short, long = _streamed(60), _streamed(120)  # 20 / 80 ms out (soxr's delay, the held fade)
    assert short[0].audio_s >= FIRST_AHEAD_MS / 1000 and short[0].audio_s > 0.2  # with the next part
    assert 0.06 <= long[0].audio_s < 0.1
    later = [p for p in long if p.index == 1]
    assert len(later) == 4 and later[0].audio_s < 0.35  # a later piece's first part is not held
    pieces = len({p.index for p in long})  # each piece's first part: 60 ms less sound in ``short``
    assert abs(sum(p.audio_s for p in long) - sum(p.audio_s for p in short) - 0.06 * pieces) < 0.03  # nothing lost
