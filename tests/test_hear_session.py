"""HearSession logic with scripted fakes (tests/fakes.py): pure, no models, no wall clock.
The turn loop driving it is tested in test_loop.py."""

from __future__ import annotations

import pytest
from fakes import ScriptedAsr, ScriptedSegmenter, ScriptedWake, frames

from rkvoice.config import load_config, parse_override
from rkvoice.hear.session import HearSession, ListenTimeout, Mode, Request, Wake
from rkvoice.hear.vad import SAMPLE_RATE
from rkvoice.hear.wake import WakeHit


def cfg_with(**hear):
    return load_config([parse_override(f"hear.{k}={v}") for k, v in hear.items()])


def run(session: HearSession, seconds: float, on_event=None):
    events = []
    for f in frames(seconds):
        new = session.accept(f)
        events.extend(new)
        for ev in new:
            if on_event:
                on_event(ev)
    return events


def test_wake_alone_then_request_is_one_woken_request():
    asr = ScriptedAsr(["", "现在几点"])
    seg = ScriptedSegmenter([(0.0, 0.1), (2.0, 3.0)])
    s = HearSession(cfg_with(), asr, ScriptedWake([(1.5, "")]), seg)
    s.start(Mode.IDLE)
    events = run(s, 5.0)
    assert isinstance(events[0], Wake) and not events[0].barge_in
    req = events[1]
    assert isinstance(req, Request) and req.text == "现在几点" and req.woke
    assert s.mode is Mode.BUSY
    assert asr.calls == 1  # the segment at 0 s was before the wake: never transcribed


def test_a_request_begun_before_the_wake_was_decided_is_heard_whole():
    """The wake's segment may be decided well after the phrase ended (its transcript comes first:
    rkvoice.hear.wake.phrase_segmenter); a request begun meanwhile is heard from the phrase's end."""
    asr = ScriptedAsr(["现在几点"])
    seg = ScriptedSegmenter([(1.6, 3.0)])
    s = HearSession(cfg_with(), asr, ScriptedWake([(2.4, "")], end_lag_s=1.4), seg)  # the phrase ended at 1.0 s
    s.start(Mode.IDLE)
    events = run(s, 5.0)
    assert [type(e) for e in events] == [Wake, Request] and events[1].text == "现在几点"


class OnsetWake:
    """Hears the phrase (a hit at ``at_s``) only when it was listening from the phrase's first sample on
    (``onset_s``), as the real engine needs the phrase whole."""

    def __init__(self, onset_s: float, at_s: float) -> None:
        self.onset, self.at = round(onset_s * SAMPLE_RATE), round(at_s * SAMPLE_RATE)
        self.samples = self.since = 0

    def load(self) -> None:
        pass

    def restart(self, at_sample: int) -> None:
        self.samples = self.since = at_sample

    def accept(self, frame):
        before = self.samples
        self.samples += len(frame)
        if before < self.at <= self.samples and self.since <= self.onset:
            return WakeHit(self.at / SAMPLE_RATE, self.at / SAMPLE_RATE, "小智小智", "")
        return None

    def flush(self):
        return None


class LaggingSegmenter(ScriptedSegmenter):
    """Takes speech for speech ``lag_s`` after it starts (the VAD's hear.min_speech_ms)."""

    def __init__(self, spans, lag_s: float = 0.25) -> None:
        super().__init__(spans)
        self.lag_s = lag_s

    @property
    def in_speech(self) -> bool:
        t = self.samples / SAMPLE_RATE
        return any(s + self.lag_s <= t < e + self.silence_s for s, e in self.spans)


def test_the_wake_phrase_begun_just_before_the_follow_up_window_closes_is_heard_whole():
    """The soak's lost request: the follow-up window closed 0.1 s into the next 小智小智, before the VAD
    took it for speech; the wake engine, restarted there, missed the phrase's start."""
    s = HearSession(cfg_with(), ScriptedAsr([]), OnsetWake(onset_s=1.9, at_s=2.6), LaggingSegmenter([(1.9, 2.5)]))
    s.start(Mode.FOLLOW_UP, 2.0)
    events = run(s, 4.0)
    assert [type(e) for e in events] == [Wake] and s.mode is Mode.LISTENING


def test_wake_with_request_in_one_breath_needs_no_listening():
    s = HearSession(cfg_with(), ScriptedAsr([]), ScriptedWake([(1.0, "现在几点")]), ScriptedSegmenter([]))
    s.start(Mode.IDLE)
    events = run(s, 2.0)
    assert [type(e) for e in events] == [Wake, Request]
    assert events[1].text == "现在几点"
    assert s.mode is Mode.BUSY


def test_no_speech_after_wake_times_out_back_to_idle():
    s = HearSession(cfg_with(listen_timeout_s=2.0), ScriptedAsr([]), ScriptedWake([(1.0, "")]), ScriptedSegmenter([]))
    s.start(Mode.IDLE)
    events = run(s, 4.0)
    assert isinstance(events[0], Wake) and isinstance(events[1], ListenTimeout)
    assert events[1].at_s == pytest.approx(3.0, abs=0.05)
    assert s.mode is Mode.IDLE


def test_speech_without_wake_is_ignored_when_idle():
    asr = ScriptedAsr(["今天天气怎么样"])
    s = HearSession(cfg_with(), asr, ScriptedWake([]), ScriptedSegmenter([(0.5, 1.5)]))
    s.start(Mode.IDLE)
    assert run(s, 3.0) == []
    assert asr.calls == 0


def test_follow_up_window_takes_a_request_without_wake_then_closes():
    asr = ScriptedAsr(["明天呢", "后天呢"])
    seg = ScriptedSegmenter([(1.0, 2.0), (9.0, 10.0)])
    s = HearSession(cfg_with(follow_up_s=3.0), asr, ScriptedWake([]), seg)
    s.start(Mode.BUSY)
    s.turn_done()
    assert s.mode is Mode.FOLLOW_UP
    events = []
    for f in frames(12.0):
        new = s.accept(f)
        events.extend(new)
        if new:
            s.turn_done()  # answered at once
    assert [(e.text, e.woke) for e in events] == [("明天呢", False)]
    assert s.mode is Mode.IDLE  # the second window (2.5 s -> 5.5 s) closed before 9 s


def test_follow_up_strips_a_repeated_wake_phrase():
    asr = ScriptedAsr(["小志小志，关灯"])
    s = HearSession(cfg_with(), asr, ScriptedWake([]), ScriptedSegmenter([(0.5, 1.5)]))
    s.start(Mode.FOLLOW_UP)
    events = run(s, 3.0)
    assert [(e.text, e.woke) for e in events] == [("关灯", True)]


def test_the_wake_phrase_alone_in_the_follow_up_window_is_a_wake_that_listens():
    asr = ScriptedAsr(["小智小智。", "关灯"])
    s = HearSession(cfg_with(listen_timeout_s=5.0), asr, ScriptedWake([]), ScriptedSegmenter([(0.5, 1.5), (3.0, 4.0)]))
    s.start(Mode.FOLLOW_UP, 3.0)
    modes = []
    events = run(s, 6.0, on_event=lambda ev: modes.append(s.mode))
    assert [type(e) for e in events] == [Wake, Request] and modes == [Mode.LISTENING, Mode.BUSY]
    wake, req = events
    assert not wake.barge_in and (wake.hit.text, wake.hit.request) == ("小智小智。", "")
    assert (req.text, req.woke) == ("关灯", True)  # heard after the follow-up window's 3 s: listening


def test_wake_while_busy_is_a_barge_in():
    s = HearSession(cfg_with(), ScriptedAsr([]), ScriptedWake([(1.0, "")]), ScriptedSegmenter([]))
    s.start(Mode.BUSY)
    events = run(s, 1.5)
    assert isinstance(events[0], Wake) and events[0].barge_in
    assert s.mode is Mode.LISTENING
