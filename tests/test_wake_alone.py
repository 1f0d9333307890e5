"""Waking by the phrase alone: asr-match's primed second look at short segments.

Scripted-ASR tests pin the rule (who gets the second look, what it must give); the rest run the
real silero VAD and Whisper base on clips of the wake set's representative subset (tests/support/wake_set.py), made by
the portable voice.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rkvoice.config import load_config
from rkvoice.hear.session import HearSession, Mode, Request, Wake
from rkvoice.hear.sources import WavFileSource, read_wav
from rkvoice.hear.vad import SAMPLE_RATE, Segment, Segmenter, vad_model_path
from rkvoice.hear.wake import MIN_PHRASE_LOGPROB, SHORT_S, AsrMatchWake
from rkvoice.hear.whisper_asr import PROMPT, _strip_echo
from tests.support import cer
from tests.support.wake_set import build, spec


class TwoDecodes:
    """Scripted Whisper: one text for the plain decode, one for the primed decode, one phrase score."""

    name = "scripted"

    def __init__(self, plain: str, primed: str, score: float = -0.5) -> None:
        self.plain, self.primed, self.score = plain, primed, score
        self.primed_calls: list[str] = []

    def load(self) -> None:
        """Nothing to load: the texts are scripted."""

    def transcribe(self, samples: np.ndarray) -> str:
        return self.plain

    def transcribe_primed(self, samples: np.ndarray, phrase: str) -> str:
        self.primed_calls.append(phrase)
        return self.primed

    def phrase_logprob(self, samples: np.ndarray, phrase: str) -> float:
        return self.score


class PlainOnly:
    name = "plain"

    def load(self) -> None:
        """Nothing to load: the text is scripted."""

    def transcribe(self, samples: np.ndarray) -> str:
        return "小巨小巨"


def seg_of(seconds: float) -> Segment:
    return Segment(np.zeros(int(seconds * SAMPLE_RATE), np.float32), 1.0, 1.0 + seconds, 1.5 + seconds)


def test_a_short_segment_the_plain_decode_misses_wakes_on_the_primed_decode():
    asr = TwoDecodes("小巨小巨", "小智小智")
    hit = AsrMatchWake(load_config(), asr).check_segment(seg_of(1.2))
    assert hit is not None and hit.text == "小智小智" and hit.request == ""
    assert asr.primed_calls == ["小智小智"]


def test_a_primed_phrase_the_audio_backs_weakly_does_not_wake():
    cfg = load_config()
    assert AsrMatchWake(cfg, TwoDecodes("小猪小猪", "小智小智", MIN_PHRASE_LOGPROB - 0.1)).check_segment(seg_of(1.0)) is None
    assert AsrMatchWake(cfg, TwoDecodes("小猪小猪", "小智小智", MIN_PHRASE_LOGPROB)).check_segment(seg_of(1.0))


@pytest.mark.parametrize("primed", ["小智", "小猪小智", "小智小猪", "小时小时", ""])
def test_the_primed_decode_must_give_the_phrase_whole(primed):
    assert AsrMatchWake(load_config(), TwoDecodes("小巨", primed)).check_segment(seg_of(1.0)) is None


def test_no_second_look_at_long_segments_plain_matches_or_when_switched_off():
    cfg = load_config()
    long_asr = TwoDecodes("今天天气怎么样", "小智小智")
    assert AsrMatchWake(cfg, long_asr).check_segment(seg_of(SHORT_S + 0.5)) is None
    matched = TwoDecodes("小志小志", "小智小智")
    assert AsrMatchWake(cfg, matched).check_segment(seg_of(1.0)) is not None
    off = TwoDecodes("小巨小巨", "小智小智")
    switched_off = AsrMatchWake(cfg, off)
    switched_off.short_s = 0.0
    assert switched_off.check_segment(seg_of(1.0)) is None
    assert long_asr.primed_calls == matched.primed_calls == off.primed_calls == []


def test_an_asr_without_a_primed_decode_gets_no_second_look():
    wake = AsrMatchWake(load_config(), PlainOnly())
    assert wake.short_s == 0.0 and wake.check_segment(seg_of(1.0)) is None


@pytest.mark.parametrize(
    "text, kept", [("小智小智 以下是普通话的", "小智小智"), ("小智小智", "小智小智"), (PROMPT, ""), ("以下", "以下")]
)
def test_a_prompt_echo_is_cut_from_the_primed_text(text, kept):
    assert _strip_echo(text) == kept


# --- the real VAD and Whisper ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def wake_clips(hear_voice, tmp_path_factory):
    """name -> (clip, wav path) of the wake set's quick subset, built in a temporary folder."""
    if not vad_model_path(load_config()).is_file():
        pytest.skip("silero VAD model is absent (run ./install.sh)")
    pairs = build(tmp_path_factory.mktemp("wake_set"), spec(quick=True))
    return {clip.name: (clip, path) for clip, path in pairs}


def replay(path: Path, asr, short_s: float = SHORT_S):
    cfg = load_config()
    wake = AsrMatchWake(cfg, asr)
    wake.short_s = short_s
    wake.load()
    hit = None
    for frame in WavFileSource(path).frames():
        hit = hit or wake.accept(frame)
    return hit or wake.flush(), wake.last_text


def test_wake_set_subset_wakes_on_every_positive_and_never_on_a_negative(wake_clips, hear_asr):
    wrong = {}
    for name, (clip, path) in wake_clips.items():
        hit, heard = replay(path, hear_asr)
        if (hit is not None) != clip.wake or (hit is not None and hit.request):
            wrong[name] = hit.text if hit is not None else heard
    assert wrong == {}
    assert sum(c.wake for c, _p in wake_clips.values()) >= 6 and sum(not c.wake for c, _p in wake_clips.values()) >= 6


def test_a_quiet_phrase_alone_wakes_with_and_without_the_primed_look(wake_clips, hear_asr):
    """At -20 dB Whisper's no-speech filter once dropped the plain decode (the issue's empty transcript);
    the primed look woke it. Settled to fixed quiet edges (whisper_asr.settle) the plain decode hears it
    too, and the wake stays a wake on either look."""
    _clip, path = wake_clips["pos_gain-20_sp1.0_st+0"]
    for hit, heard in (replay(path, hear_asr, short_s=0.0), replay(path, hear_asr)):
        assert hit is not None and hit.request == "", heard


def test_phrase_alone_pause_then_request_is_one_woken_request(wake_clips, hear_voice, hear_asr):
    """HearSession on one stream: quiet "小智小智", 1.5 s pause, "现在几点" -> Wake, then Request(woke)."""
    from rkvoice.hear.sources import to_mono_16k

    cfg = load_config()
    phrase = read_wav(wake_clips["pos_gain-20_sp1.0_st+0"][1])
    audio, rate = hear_voice.generate("现在几点")
    stream = np.concatenate([phrase, np.zeros(SAMPLE_RATE, np.float32), to_mono_16k(audio, rate),
                             np.zeros(SAMPLE_RATE, np.float32)])
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
    assert [type(e) for e in events] == [Wake, Request], events
    wake_ev, request = events
    assert isinstance(wake_ev, Wake) and wake_ev.hit.request == "" and not wake_ev.barge_in
    assert isinstance(request, Request)
    assert request.woke and cer("现在几点", request.text) <= 0.25, request.text
    assert session.mode is Mode.BUSY
