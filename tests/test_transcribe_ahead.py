"""Transcripts started at a pause (rkvoice.hear.ahead): the segmenter reports the pause with the
speech the closing segment will hold, and the closed segment's transcript is the one begun there
when no more was said. The decode order is scripted with events; nothing waits on wall time."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rkvoice.config import load_config
from rkvoice.hear.ahead import TranscribeAhead, same_speech
from rkvoice.hear.session import HearSession, Mode, Request
from rkvoice.hear.sources import to_mono_16k
from rkvoice.hear.vad import SAME_END, SAMPLE_RATE, Segmenter, vad_model_path
from rkvoice.hear.wake import PHRASE_SILENCE_S


class ScriptedAsr:
    """Transcribes to "heard <n samples>"; a decode waits for ``release`` when ``hold`` is set."""

    name = "scripted"
    languages = ("zh",)

    def __init__(self, hold: bool = False, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.fail = fail

    def transcribe(self, samples: np.ndarray) -> str:
        self.calls.append(len(samples))
        self.started.set()
        assert self.release.wait(10)
        if self.fail:
            self.fail = False
            raise RuntimeError("decoder fault")
        return f"heard {len(samples)}"


def speech(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, n).astype(np.float32)


def test_same_speech_allows_only_trailing_silence_the_main_vad_keeps():
    a = speech(16000)
    assert same_speech(a, a.copy())
    assert same_speech(a, np.concatenate([a, np.zeros(SAME_END, np.float32)]))
    assert not same_speech(a, np.concatenate([a, np.zeros(SAME_END + 1, np.float32)]))  # more was said
    assert same_speech(a, a[:-SAME_END])  # the main VAD cut it a little earlier
    assert not same_speech(a, a[: -SAME_END - 1])
    changed = a.copy()
    changed[5] += 0.1
    assert not same_speech(a, changed)
    assert not same_speech(a[:0], a[:0])


def test_the_closed_segment_takes_the_decode_begun_at_the_pause():
    asr = ScriptedAsr(hold=True)
    ahead = TranscribeAhead(asr)
    a = speech(24000)
    ahead.ahead(a)
    assert asr.started.wait(10)  # decoding in the background before the segment closes
    asr.release.set()
    assert ahead.transcribe(np.concatenate([a, np.zeros(100, np.float32)])) == "heard 24000"
    assert asr.calls == [24000]  # one decode for the request
    assert ahead.transcribe(a) == "heard 24000" and asr.calls == [24000, 24000]  # taken once only
    ahead.close()


def test_speech_that_went_on_after_the_pause_is_decoded_anew():
    asr = ScriptedAsr()
    ahead = TranscribeAhead(asr)
    a = speech(24000)
    ahead.ahead(a)
    longer = np.concatenate([a, speech(8000, seed=1)])
    assert ahead.transcribe(longer) == "heard 32000"
    assert asr.calls == [24000, 32000]
    ahead.close()


def test_a_failed_decode_ahead_is_decoded_again_and_its_error_is_the_calls():
    asr = ScriptedAsr(fail=True)
    ahead = TranscribeAhead(asr)
    a = speech(16000)
    ahead.ahead(a)
    assert ahead.transcribe(a) == "heard 16000"
    assert asr.calls == [16000, 16000]
    asr.fail = True
    with pytest.raises(RuntimeError, match="decoder fault"):
        ahead.transcribe(a)  # nothing ahead: the engine's own error
    ahead.close()


def test_a_newer_pause_replaces_one_not_started_and_other_calls_pass_through():
    asr = ScriptedAsr(hold=True)
    ahead = TranscribeAhead(asr)
    ahead.ahead(speech(8000))
    assert asr.started.wait(10)  # the worker is busy with the first
    ahead.ahead(speech(12000))  # queued behind it
    ahead.ahead(speech(16000))  # replaces the queued one, which never runs
    asr.release.set()
    assert ahead.transcribe(speech(16000)) == "heard 16000"
    assert asr.calls == [8000, 16000]
    assert ahead.name == "scripted" and ahead.languages == ("zh",)
    ahead.close()


@pytest.fixture(scope="module")
def say(hear_voice):
    if not vad_model_path(load_config()).is_file():
        pytest.skip("silero VAD model is absent (run ./install.sh)")
    return lambda text: to_mono_16k(*hear_voice.generate(text))


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), np.float32)


def trimmed(audio: np.ndarray) -> np.ndarray:
    """The voice's own leading and trailing quiet cut off (so the pause between two is the one put there)."""
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    return audio[loud[0] : loud[-1] + 1]


def test_the_real_vad_reports_a_pause_with_the_samples_the_segment_closes_on(say):
    cfg = load_config()
    seg = Segmenter(cfg, early_silence_s=PHRASE_SILENCE_S)
    seg.load()
    paused: list[np.ndarray] = []
    seg.on_pause = paused.append
    first, second = trimmed(say("用一句话介绍一下长城")), trimmed(say("再说说故宫"))
    stream = np.concatenate([silence(0.5), first, silence(0.3), second, silence(1.0)])
    closed = []
    for i in range(0, len(stream), 512):
        closed += seg.accept(stream[i : i + 512])
    assert len(closed) == 1 and len(paused) == 2  # one request, paused once in the middle, once at its end
    assert not same_speech(paused[0], closed[0].samples)  # it went on after the first pause
    assert same_speech(paused[1], closed[0].samples)
    assert len(closed[0].samples) >= len(first) + len(second)


def test_a_listening_session_transcribes_the_request_once_from_its_pause(say):
    cfg = load_config()
    asr = ScriptedAsr()
    ahead = TranscribeAhead(asr)
    seg = Segmenter(cfg, early_silence_s=PHRASE_SILENCE_S)
    seg.load()
    session = HearSession(cfg, ahead, wake=_NoWake(), segmenter=seg)
    session.start(Mode.LISTENING)
    stream = np.concatenate([silence(0.3), say("明天早上七点半叫我起床"), silence(1.0)])
    events = []
    for i in range(0, len(stream), 320):
        events += session.accept(stream[i : i + 320])
    (request,) = [e for e in events if isinstance(e, Request)]
    assert len(asr.calls) == 1 and request.text == f"heard {asr.calls[0]}"
    ahead.close()


class _NoWake:
    """A wake engine that never hears the phrase (the session is listening already)."""

    def restart(self, at_sample: int) -> None:
        pass

    def accept(self, frame: np.ndarray) -> None:
        return None

    def flush(self) -> None:
        return None
