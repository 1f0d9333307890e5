"""rkvoice.hear with the real installed models: silero VAD, Whisper base, asr-match wake, --file replay.

Speech fixtures come from the project's portable voice (conftest ``hear_fixtures``).
"""

from __future__ import annotations

import numpy as np
import pytest

from rkvoice.config import load_config, parse_override
from rkvoice.hear.session import HearSession
from rkvoice.hear.sources import WavFileSource, read_wav
from rkvoice.hear.vad import Segmenter, vad_model_path
from rkvoice.hear.wake import AsrMatchWake
from rkvoice.timeline import Ev
from rkvoice.turn import Turn
from rkvoice.turn_loop import TurnLoop
from tests.support import cer


def _cfg(*overrides: str):
    return load_config([parse_override(o) for o in overrides])


@pytest.fixture(scope="module")
def vad_ok():
    path = vad_model_path(load_config())
    if not path.is_file():
        pytest.skip(f"silero VAD model {path} is absent (run ./install.sh)")


def segments(path, cfg):
    seg = Segmenter(cfg)
    seg.load()
    out = []
    for frame in WavFileSource(path).frames():
        out += seg.accept(frame)
    return out + seg.flush()


def test_vad_finds_one_request_and_its_end_in_audio_time(vad_ok, hear_fixtures):
    path = hear_fixtures["req_alarm"][0]
    audio = read_wav(path)
    (seg,) = segments(path, _cfg("hear.trailing_silence_ms=400"))
    speech_len = len(audio) / 16000 - 0.5 - 1.0  # the fixture pads 0.5 s before, 1.0 s after
    assert seg.start_s == pytest.approx(0.5, abs=0.25)
    assert seg.end_s == pytest.approx(0.5 + speech_len, abs=0.3)
    assert seg.decided_s - seg.end_s == pytest.approx(0.4, abs=0.07)
    assert not seg.truncated


def test_vad_hears_nothing_in_silence_and_noise(vad_ok, hear_fixtures):
    cfg = _cfg()
    assert segments(hear_fixtures["silence"][0], cfg) == []
    assert segments(hear_fixtures["noise"][0], cfg) == []


def test_vad_cuts_a_request_at_the_maximum_length(vad_ok, hear_fixtures):
    (seg, *_rest) = segments(hear_fixtures["req_alarm"][0], _cfg("hear.max_request_s=1.0"))
    assert seg.truncated and seg.decided_s == seg.end_s
    assert seg.end_s - seg.start_s == pytest.approx(1.0, abs=0.2)
    assert seg.duration_s == pytest.approx(seg.end_s - seg.start_s, abs=1e-6)


def test_whisper_returns_nothing_for_a_click(hear_asr):
    assert hear_asr.transcribe(np.zeros(800, np.float32)) == ""


class Recorder:
    """A responder that answers at once: marks the first audio and returns the answer text."""

    def respond(self, turn: Turn) -> str:
        turn.timeline.mark(Ev.AUDIO_FIRST)
        return f"answer:{turn.text}"


def replay(name, hear_fixtures, asr, require_wake):
    cfg = _cfg()
    wake = AsrMatchWake(cfg, asr)
    wake.load()
    seg = Segmenter(cfg)
    seg.load()
    loop = TurnLoop(HearSession(cfg, asr, wake, seg), Recorder())
    turns = loop.run_file(WavFileSource(hear_fixtures[name][0]), require_wake=require_wake)
    return loop, turns


@pytest.mark.parametrize("name", ["wake_request", "wake_alone", "unrelated", "silence", "noise"])
def test_file_replay_with_require_wake_decides_the_wake(name, vad_ok, hear_asr, hear_fixtures):
    _path, _text, wake_expected, request = hear_fixtures[name]
    loop, turns = replay(name, hear_fixtures, hear_asr, require_wake=True)
    assert bool(loop.wakes) == wake_expected, [w.hit.text for w in loop.wakes]
    if wake_expected and request:
        (turn,) = turns
        assert turn.timeline.find(Ev.ASR_DONE)[0].get("woke") and cer(request, turn.text) <= 0.15, turn.text
        assert turn.done.is_set() and turn.result == f"answer:{turn.text}" and not turn.cancelled
        summary = turn.timeline.summary()
        assert summary["end_to_first_audio_ms"] >= 0 and summary["transcript"] == turn.text
    else:
        assert turns == []


@pytest.mark.parametrize("name", ["req_weather", "req_alarm", "req_joke", "req_time"])
def test_file_replay_transcribes_requests(name, vad_ok, hear_asr, hear_fixtures):
    _path, _text, wake_expected, request = hear_fixtures[name]
    _loop, turns = replay(name, hear_fixtures, hear_asr, require_wake=False)
    (turn,) = turns
    assert cer(request, turn.text) <= 0.15, turn.text
    assert turn.timeline.find(Ev.ASR_DONE)[0].get("woke") == wake_expected
    assert [e.name for e in turn.timeline.events][:2] == [Ev.SPEECH_END, Ev.ASR_DONE]
    assert turn.result == f"answer:{turn.text}"


def test_follow_up_window_in_audio_time(vad_ok, hear_asr, hear_voice, hear_fixtures, tmp_path):
    """Wake + request, then a request without the wake 2 s after (inside the follow-up window),
    then another 8 s after that (window closed: ignored)."""
    import soundfile as sf

    from rkvoice.hear.sources import to_mono_16k

    def clip(text):
        audio, rate = hear_voice.generate(text)
        return to_mono_16k(audio, rate)

    def gap(s):
        return np.zeros(int(s * 16000), np.float32)
    stream = np.concatenate([gap(0.5), clip("小智小智，现在几点"), gap(2.0), clip("明天天气怎么样"),
                             gap(8.0), clip("给我讲一个笑话"), gap(1.0)])
    path = tmp_path / "follow.wav"
    sf.write(path, stream, 16000)
    cfg = _cfg("hear.follow_up_s=5.0")
    wake = AsrMatchWake(cfg, hear_asr)
    wake.load()
    seg = Segmenter(cfg)
    seg.load()
    loop = TurnLoop(HearSession(cfg, hear_asr, wake, seg), Recorder())
    turns = loop.run_file(WavFileSource(path), require_wake=True)
    assert len(turns) == 2, [t.text for t in turns]
    assert turns[0].timeline.find(Ev.ASR_DONE)[0].get("woke") and cer("现在几点", turns[0].text) <= 0.15
    assert not turns[1].timeline.find(Ev.ASR_DONE)[0].get("woke") and cer("明天天气怎么样", turns[1].text) <= 0.15
    assert len(loop.wakes) == 1


def test_settle_keeps_the_loud_part_between_fixed_quiet_edges():
    from rkvoice.hear.whisper_asr import QUIET_PAD_S, settle

    pad = round(QUIET_PAD_S * 16000)
    speech = np.where(np.arange(4000) % 2, 0.5, -0.5).astype(np.float32)
    for lead, trail in [(0, 0), (100, 50), (pad, pad), (3 * pad, 20000)]:
        clip = settle(np.concatenate([np.zeros(lead, np.float32), speech, np.full(trail, 1e-4, np.float32)]))
        loud = np.flatnonzero(np.abs(clip) > 0.015)
        assert (len(clip), loud[0], loud[-1]) == (2 * pad + len(speech), pad, pad + len(speech) - 1), (lead, trail)
    assert len(settle(np.zeros(20000, np.float32))) == 20000  # nothing loud: as it was


def test_the_same_speech_is_heard_alike_after_any_leading_silence(hear_asr, hear_voice):
    """Whisper's transcript moved with the sample offset of the speech (空调调到26度 heard 空调调到二六冬 at
    3 of these 22 leading silences before ``settle``): a streamed request must not depend on it."""
    from tests.support.satellite_home import spoken

    speech = spoken(hear_voice, "空调调到26度")
    heard = {hear_asr.transcribe(np.concatenate([np.zeros(lead, np.float32), speech, np.zeros(16000, np.float32)]))
             for lead in range(0, 16000, 733)}
    assert len(heard) == 1, heard
