"""The wake in time: phrase-length speech is decided after a short silence, the second look reuses
the plain decode's encoding. Everything is asserted in audio time (sample counts) or by counting
encoder runs; bench/wake_latency.py measures the wall-clock latency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rkvoice.config import load_config
from rkvoice.hear.session import HearSession, Mode, Request, Wake
from rkvoice.hear.sources import to_mono_16k
from rkvoice.hear.turn_end import TurnEnd
from rkvoice.hear.vad import SAMPLE_RATE, WINDOW, Segment, Segmenter, Verdict, on_grid, vad_model_path
from rkvoice.hear.wake import PHRASE_MAX_S, PHRASE_SILENCE_S, AsrMatchWake
from tests.support import cer

WINDOW_S = WINDOW / SAMPLE_RATE


@pytest.fixture(scope="module")
def say(hear_voice):
    if not vad_model_path(load_config()).is_file():
        pytest.skip("silero VAD model is absent (run ./install.sh)")

    def speak(text: str) -> np.ndarray:
        audio, rate = hear_voice.generate(text)
        return to_mono_16k(audio, rate)

    return speak


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), np.float32)


def phrase_segmenter(cfg) -> Segmenter:
    """The asr-match wake's segmenter: phrase-length speech closes after ``PHRASE_SILENCE_S``."""
    return Segmenter(cfg, early_silence_s=PHRASE_SILENCE_S, early_max_s=PHRASE_MAX_S)


def feed(segmenter: Segmenter, stream: np.ndarray) -> list[Segment]:
    segmenter.load()
    out: list[Segment] = []
    for i in range(0, len(stream), 512):
        out += segmenter.accept(stream[i : i + 512])
    return out + segmenter.flush()


def test_the_wake_engine_segments_with_the_short_phrase_silence():
    cfg = load_config([{"hear": {"endpoint": {"mode": "silence"}}}])
    seg = AsrMatchWake(cfg, object()).segmenter  # type: ignore[arg-type]
    assert type(seg) is Segmenter and seg.early_max_s == PHRASE_MAX_S
    assert Segmenter(cfg).early_silence_s == 0.0  # the request segmenter keeps the trailing silence
    assert Segmenter(cfg, early_silence_s=1.0, early_max_s=2.0).early_silence_s == 0.0  # not shorter: off
    assert seg.early_silence_s == on_grid(cfg.hear.trailing_silence_ms / 1000, PHRASE_SILENCE_S)


def test_with_the_end_of_turn_decision_the_wake_s_longer_speech_ends_by_it():
    """mode smart: phrase-length speech still closes at the phrase silence, unjudged; the phrase and a
    request in one breath end by the end-of-turn decision (its VAD closes at the short silence)."""
    cfg = load_config()
    assert cfg.hear.endpoint.mode == "smart"
    seg = AsrMatchWake(cfg, object()).segmenter  # type: ignore[arg-type]
    assert isinstance(seg, TurnEnd) and seg.pass_max_s == PHRASE_MAX_S
    short_s = cfg.hear.endpoint.short_silence_ms / 1000
    assert seg.vad.trailing_silence_s == short_s and seg.vad.early_max_s == PHRASE_MAX_S
    assert seg.vad.early_silence_s == on_grid(short_s, PHRASE_SILENCE_S)


@pytest.mark.parametrize("trailing_ms", [200, 500, 800, 1000])
def test_the_early_silence_cuts_on_the_same_sample_as_the_trailing_one(trailing_ms):
    """sherpa-onnx declares the end once ceil(silence / window) windows are silent and cuts the
    segment `silence` samples before: silences whole windows apart cut at the same sample."""
    trailing = trailing_ms * SAMPLE_RATE // 1000
    early = round(on_grid(trailing_ms / 1000, PHRASE_SILENCE_S) * SAMPLE_RATE)
    assert 0 < early <= PHRASE_SILENCE_S * SAMPLE_RATE
    assert (trailing - early) % WINDOW == 0 and PHRASE_SILENCE_S * SAMPLE_RATE - early < WINDOW
    for temp_end in range(0, 4 * WINDOW, 37):  # the silence starts anywhere; the VAD sees whole windows
        def cut(silence: int, temp_end: int = temp_end) -> int:
            return temp_end + math.ceil(silence / WINDOW) * WINDOW - silence

        assert cut(early) == cut(trailing)


def test_a_phrase_alone_is_decided_after_the_short_silence_once(say):
    cfg = load_config()
    stream = np.concatenate([silence(0.6), say("小智小智"), silence(1.5)])
    plain = feed(Segmenter(cfg), stream)
    early = feed(phrase_segmenter(cfg), stream)
    assert len(plain) == 1 and len(early) == 1, (plain, early)  # the main VAD's copy is dropped
    (p,), (e,) = plain, early
    assert e.early and not p.early
    assert p.decided_s - p.end_s >= cfg.hear.trailing_silence_ms / 1000.0
    assert e.decided_s - e.end_s <= PHRASE_SILENCE_S + 2 * WINDOW_S
    assert (e.start_s, e.end_s) == (p.start_s, p.end_s) and np.array_equal(e.samples, p.samples)  # the same audio


def test_longer_speech_keeps_the_full_trailing_silence(say):
    cfg = load_config()
    speech = say("帮我设置一个明天早上七点的闹钟，然后把客厅的灯关掉")
    assert len(speech) > PHRASE_MAX_S * SAMPLE_RATE
    segs = feed(phrase_segmenter(cfg), np.concatenate([silence(0.5), speech, silence(1.5)]))
    assert segs and not any(s.early for s in segs)
    assert all(s.decided_s - s.end_s >= cfg.hear.trailing_silence_ms / 1000.0 for s in segs if not s.truncated)


def test_speech_that_goes_on_after_an_early_close_is_returned_whole_too(say):
    """The phrase, 0.1 s more pause than the voice leaves, then more
    speech: the phrase is decided early, then the whole utterance (the same audio the request's
    segmenter closes, early too when it is still of phrase length)."""
    cfg = load_config()
    phrase, more = say("小智小智"), say("现在几点")
    stream = np.concatenate([silence(0.6), phrase, silence(0.1), more, silence(1.5)])
    segs = feed(phrase_segmenter(cfg), stream)
    whole = feed(Segmenter(cfg), stream)
    assert len(segs) == 2 and segs[0].early, segs
    assert segs[0].end_s < segs[1].end_s
    assert len(whole) == 1 and np.array_equal(segs[1].samples, whole[0].samples)


def test_the_second_look_reuses_the_plain_decodes_encoding(hear_asr, say):
    samples = say("小猪小猪")
    hear_asr.forget_encoding()
    n = hear_asr.encodes
    plain = hear_asr.transcribe(samples)
    primed = hear_asr.transcribe_primed(samples, "小智小智")
    score = hear_asr.phrase_logprob(samples, "小智小智")
    assert hear_asr.encodes == n + 1
    hear_asr.forget_encoding()  # the same results from fresh encodings
    fresh_primed = hear_asr.transcribe_primed(samples, "小智小智")
    hear_asr.forget_encoding()
    fresh_score = hear_asr.phrase_logprob(samples, "小智小智")
    hear_asr.forget_encoding()
    assert hear_asr.transcribe(samples) == plain
    assert (fresh_primed, fresh_score) == (primed, score)
    assert hear_asr.encodes == n + 4


def test_wake_alone_is_decided_a_short_silence_after_the_phrase(hear_asr, say):
    cfg = load_config()
    wake = AsrMatchWake(cfg, hear_asr)
    wake.load()
    stream = np.concatenate([silence(0.6), say("小智小智"), silence(2.0)])
    hit = None
    for i in range(0, len(stream), 512):
        hit = hit or wake.accept(stream[i : i + 512])
    assert hit is not None and hit.request == ""
    assert hit.at_s - hit.end_s <= PHRASE_SILENCE_S + 2 * WINDOW_S


def test_phrase_short_pause_then_request_is_a_woken_request(hear_asr, say):
    """小智小智, 0.3 s, 现在几点: the wake comes at the short pause, the request is still heard whole."""
    cfg = load_config()
    stream = np.concatenate([silence(0.6), say("小智小智"), silence(0.3), say("现在几点"), silence(1.5)])
    wake = AsrMatchWake(cfg, hear_asr)
    wake.load()
    segmenter = Segmenter(cfg)
    segmenter.load()
    session = HearSession(cfg, hear_asr, wake, segmenter)
    session.start(Mode.IDLE)
    events = []
    for i in range(0, len(stream), 512):
        events += session.accept(stream[i : i + 512])
    events += session.flush()
    assert isinstance(events[0], Wake) and isinstance(events[-1], Request), events
    request = events[-1]
    assert request.woke and cer("现在几点", request.text) <= 0.25, request.text


class HeardAs:
    """An ASR that hears every segment as ``text`` (the wake engine's transcripts are not under test:
    the real VAD and end-of-turn model are)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def load(self) -> None:
        pass

    def transcribe(self, samples: np.ndarray, **_: object) -> str:
        return self.text


@pytest.mark.parametrize("text, ends_early", [("小智小智现在几点", True), ("小智小智打开客厅灯", True),
                                              ("小智小智帮我把", False), ("小智小智空调调到", False)])
def test_a_request_said_with_the_phrase_in_one_breath_ends_by_the_end_of_turn_decision(say, text, ends_early):
    """Before, speech of phrase length closed after 136 ms whatever it held (a one-breath request cut at
    帮我把 included) and longer speech after 500 ms. Now the phrase's segment with a request in it is
    judged as a request: finished ones end at the short silence, unfinished ones are waited for."""
    from rkvoice.hear.ahead import TranscribeAhead

    cfg = load_config()
    wake = AsrMatchWake(cfg, TranscribeAhead(HeardAs(text)))  # type: ignore[arg-type]
    closed: list[Segment] = []
    wake.on_segment = closed.append
    wake.load()
    wake.restart(0)
    stream = np.concatenate([silence(0.5), say(text), silence(2.5)])
    hits = [h for i in range(0, len(stream) - 511, 512) if (h := wake.accept(stream[i : i + 512])) is not None]
    assert [h.request for h in hits] == [text[4:]] and len(closed) == 1
    (seg,) = closed
    waited_s = seg.decided_s - seg.end_s
    assert seg.judgements[0].probability is not None  # the model judged it
    if ends_early:
        assert seg.judgements[-1].verdict is Verdict.COMPLETE
        assert waited_s < cfg.hear.trailing_silence_ms / 1000.0
    else:
        assert seg.judgements[-1].verdict is Verdict.MAX_SILENCE
        assert waited_s >= cfg.hear.endpoint.max_silence_ms / 1000.0
