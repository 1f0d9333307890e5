"""The board's stop word (rkvoice.satellite.stop_word.KwsStopEngine): with the keyword spotter as the wake
engine, the stop phrases are spotted by a second KeywordSpotter on its model, fed the frames the
satellite hears while something plays. On the rigged stand-in (tests/test_kws_latency.py), which emits
the tokens of 你好小智 whatever it hears, its last one 0.28 s into a fresh stream: a stop phrase list
that holds 你好小智 makes the spotter fire, and the default list (停, 别说了, stop) never does."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import sherpa_onnx
from fakes import ScriptedWake

from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import ROOT, load_config
from rkvoice.hear.vad import SAMPLE_RATE, vad_model_path
from rkvoice.hear.wake import WakeHit
from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.mic import SatelliteMic
from rkvoice.satellite.playback import Playback
from rkvoice.satellite.stop_word import KwsStopEngine, StopWord, StopWordEngine, StopWordSettings, stop_word
from tests.support.clock import FakeClock
from tests.support.stop_rig import Link, Port, silence

BOARD = [ROOT / "config.yaml", ROOT / "tests" / "fixtures" / "board-hearing.yaml"]
FRAME = 512
TOKEN_S = 0.28  # the rig's last token in a fresh stream (tests/test_kws_latency.py)
RIGGED = StopWordSettings(("停", "你好小智", "stop"))  # the rig's phrase as a stop phrase

pytestmark = pytest.mark.usefixtures("hearing_standins")  # the yaml names .cache/standins/hearing


@pytest.fixture(autouse=True)
def _vad_model():
    if not vad_model_path(load_config()).is_file():
        pytest.skip("silero VAD model is absent (run ./install.sh)")


@pytest.fixture
def keywords_files(monkeypatch):
    """The keywords file each KeywordSpotter made is built from, as it read it."""
    read: list[str] = []
    real = sherpa_onnx.KeywordSpotter

    def spotter(*args, keywords_file: str, **kwargs):
        with open(keywords_file, encoding="utf-8") as fh:
            read.append(fh.read())
        return real(*args, keywords_file=keywords_file, **kwargs)

    monkeypatch.setattr(sherpa_onnx, "KeywordSpotter", spotter)
    return read


class CountingKwsStop(KwsStopEngine):
    """The board's stop engine, counting frames and noting the frame each hit came on."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.frames = 0
        self.hit_frames: list[int] = []

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        self.frames += 1
        hit = super().accept(frame)
        if hit is not None:
            self.hit_frames.append(self.frames)
        return hit


def test_the_board_config_makes_the_kws_stop_word_of_the_phrases_it_can_spell(keywords_files, caplog):
    cfg = load_config(files=BOARD)
    with caplog.at_level(logging.INFO, logger="rkvoice.satellite.stop_word"):
        made = stop_word(cfg, None)  # the board's stop word needs no ASR
    assert made is not None and isinstance(made.engine, KwsStopEngine)
    assert keywords_files == ["t íng @停\nb ié sh uō l e @别说了\n"]  # 停, 别说了; no line for stop
    assert made.engine.phrases == {"停", "别说了"} and made.engine.skipped == ["stop"]
    skipped = [r.getMessage() for r in caplog.records if "not spotted" in r.getMessage()]
    assert len(skipped) == 1 and "'stop'" in skipped[0] and "satellite.stop_words" in skipped[0]


def test_a_board_stop_word_it_can_spell_nothing_of_is_none_with_a_warning(keywords_files, caplog):
    cfg = load_config(files=BOARD)
    with caplog.at_level(logging.WARNING, logger="rkvoice.satellite.stop_word"):
        assert stop_word(cfg, None, StopWordSettings(("stop", "halt"))) is None
    assert keywords_files == []  # no spotter was made
    assert any("no stop word" in r.getMessage() and "停,别说了" in r.getMessage() for r in caplog.records)


def test_the_portable_config_keeps_the_asr_match_stop_word(hear_asr):
    made = stop_word(load_config(), hear_asr)
    assert made is not None and type(made.engine) is StopWordEngine


def spotted(engine: KwsStopEngine, seconds: float) -> list[tuple[int, WakeHit]]:
    """Silence fed in 32 ms frames from a fresh stream: the (frame number, hit) of each detection."""
    engine.restart(0)
    hits = []
    for i in range(int(seconds * SAMPLE_RATE) // FRAME):
        if (hit := engine.accept(np.zeros(FRAME, np.float32))) is not None:
            hits.append((i + 1, hit))
    return hits


def test_the_spotter_fires_on_a_stop_phrase_and_never_on_another_keyword():
    cfg = load_config(files=BOARD)
    rigged = KwsStopEngine(cfg, RIGGED.phrases)
    rigged.load()
    hits = spotted(rigged, 1.5)
    assert hits and hits[0][1].text == "你好小智"
    assert TOKEN_S <= hits[0][1].at_s == hits[0][0] * FRAME / SAMPLE_RATE  # dated at the frame it came on
    default = KwsStopEngine(cfg)
    default.load()
    assert spotted(default, 1.5) == []  # the rig says 你好小智, no default stop phrase


class BoardStopRig:
    """The satellite core playing a reply, its hearing with a wake engine that never wakes and the board's
    stop word; ``stops``: the frame numbers the core stopped on."""

    def __init__(self, settings: StopWordSettings) -> None:
        cfg = load_config(files=BOARD)
        clock = FakeClock()
        self.playback = Playback(NullPlayer(cfg, clock), None, clock=clock)
        self.playback.start()
        self.core = SatelliteCore(Port(), self.playback, clock)
        self.core.run_satellite()
        self.engine = CountingKwsStop(cfg, settings.phrases)
        self.engine.load()
        self.mic = SatelliteMic(ScriptedWake(), Link(self.core), self.playback, stop=StopWord(self.engine))
        self.frames = 0
        self.stops: list[int] = []
        self.core.on_stop = lambda: self.stops.append(self.frames)

    def play_reply(self):
        self.core.answering("好的，我来讲一个很长的故事")
        stream = self.core.stream_start(16000, 2, 1)
        assert stream is not None
        self.playback.chunk(stream, np.zeros(30 * 16000, "<i2").tobytes())
        return stream

    def hear(self, audio: np.ndarray) -> None:
        for i in range(0, len(audio), FRAME):
            self.frames += 1
            self.mic.accept(audio[i : i + FRAME])

    def close(self) -> None:
        self.playback.close()


@pytest.fixture
def board_rig(request):
    rig = BoardStopRig(request.param)
    yield rig
    rig.close()


@pytest.mark.parametrize("board_rig", [RIGGED], indirect=True)
def test_a_spotted_stop_phrase_clears_the_reply_on_the_frame_that_spotted_it(board_rig):
    stream = board_rig.play_reply()
    board_rig.hear(silence(1.5))
    assert board_rig.engine.hit_frames and board_rig.stops == board_rig.engine.hit_frames[:1]
    assert stream.cut and not board_rig.mic.wakes


@pytest.mark.parametrize("board_rig", [StopWordSettings()], indirect=True)
def test_frames_flow_through_the_board_stop_word_only_while_something_plays(board_rig):
    board_rig.hear(silence(1.0))
    assert board_rig.engine.frames == 0  # nothing plays: not listening
    stream = board_rig.play_reply()
    board_rig.hear(silence(1.5))
    assert board_rig.engine.frames == int(1.5 * SAMPLE_RATE) // FRAME + 1  # every frame heard, the last part one
    assert board_rig.stops == [] and not stream.cut  # the rig's 你好小智 is no stop phrase
