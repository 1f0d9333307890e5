"""HearSession and TurnLoop logic with scripted fakes: pure, no models, no wall clock."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rkvoice.clock import FakeClock
from rkvoice.config import load_config, parse_override
from rkvoice.hear.loop import TurnLoop
from rkvoice.hear.session import HearSession, ListenTimeout, Mode, Request, Wake
from rkvoice.hear.vad import SAMPLE_RATE, Segment
from rkvoice.hear.wake import WakeHit

FRAME = 512


def cfg_with(**hear):
    return load_config([parse_override(f"hear.{k}={v}") for k, v in hear.items()])


class ScriptedAsr:
    """Segments carry their script index in their samples; the ASR reads it back."""

    name = "scripted"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.calls = 0

    def transcribe(self, samples: np.ndarray) -> str:
        self.calls += 1
        return self.texts[int(samples[0])]


class ScriptedSegmenter:
    """Closes segment i when the stream reaches ``closes[i]`` seconds (if it is listening then)."""

    def __init__(self, spans: list[tuple[float, float]], silence_s: float = 0.5) -> None:
        self.spans = spans  # (start_s, end_s) of each utterance in stream time
        self.silence_s = silence_s
        self.samples = 0
        self.open_from = 0

    def restart(self, at_sample: int) -> None:
        self.samples = at_sample
        self.open_from = at_sample

    @property
    def in_speech(self) -> bool:
        t = self.samples / SAMPLE_RATE
        return any(s <= t < e + self.silence_s and s * SAMPLE_RATE >= self.open_from for s, e in self.spans)

    def _closing(self, before: int, after: int) -> list[Segment]:
        out = []
        for i, (s, e) in enumerate(self.spans):
            decide = int((e + self.silence_s) * SAMPLE_RATE)
            if before < decide <= after and s * SAMPLE_RATE >= self.open_from:
                out.append(Segment(np.full(int((e - s) * SAMPLE_RATE), i, np.float32), s, e, decide / SAMPLE_RATE))
        return out

    def accept(self, frame: np.ndarray) -> list[Segment]:
        before = self.samples
        self.samples += len(frame)
        return self._closing(before, self.samples)

    def flush(self) -> list[Segment]:
        return self._closing(self.samples, 10**12)


class ScriptedWake:
    """Hits at fixed stream times (each once), with an optional request said in the same breath."""

    def __init__(self, hits: list[tuple[float, str]]) -> None:
        self.hits = hits
        self.samples = 0
        self.restarts = 0

    def restart(self, at_sample: int) -> None:
        self.samples = at_sample
        self.restarts += 1

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        before = self.samples
        self.samples += len(frame)
        for t, request in self.hits:
            if before < t * SAMPLE_RATE <= self.samples:
                return WakeHit(at_s=t, end_s=t - 0.5, text="小智小智" + request, request=request)
        return None

    def flush(self) -> WakeHit | None:
        return None


def frames(seconds: float):
    for _ in range(int(seconds * SAMPLE_RATE) // FRAME):
        yield np.zeros(FRAME, np.float32)


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
    assert req.end_s == pytest.approx(3.0) and req.decided_s == pytest.approx(3.5)
    assert s.mode is Mode.BUSY
    assert asr.calls == 1  # the segment at 0 s was before the wake: never transcribed


def test_wake_with_request_in_one_breath_needs_no_listening():
    s = HearSession(cfg_with(), ScriptedAsr([]), ScriptedWake([(1.0, "现在几点")]), ScriptedSegmenter([]))
    s.start(Mode.IDLE)
    events = run(s, 2.0)
    assert [type(e) for e in events] == [Wake, Request]
    assert events[1].text == "现在几点" and events[1].end_s == pytest.approx(0.5)
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


def test_wake_while_busy_is_a_barge_in():
    s = HearSession(cfg_with(), ScriptedAsr([]), ScriptedWake([(1.0, "")]), ScriptedSegmenter([]))
    s.start(Mode.BUSY)
    events = run(s, 1.5)
    assert isinstance(events[0], Wake) and events[0].barge_in
    assert s.mode is Mode.LISTENING


class FakeResponder:
    """Plays a turn until cancelled (or at once for short answers); cancel costs 30 ms of clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.cancels = 0
        self.started = []
        self._cancelled = threading.Event()

    def respond(self, text, timeline, cancel):
        self.started.append(text)
        timeline.mark("audio_first")
        if text == "讲个长故事":
            assert cancel.wait(10), "the long answer was never cancelled"
            return "从前有座山"
        return "好的"

    def cancel(self):
        self.cancels += 1
        self.clock.sleep(0.03)


class ListSource:
    sample_rate = SAMPLE_RATE

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.closed = False

    def frames(self):
        yield from frames(self.seconds)

    def close(self):
        self.closed = True


def test_live_loop_barge_in_cancels_and_starts_a_new_turn():
    clock = FakeClock()
    cues = []
    wake = ScriptedWake([(1.0, "讲个长故事"), (4.0, "现在几点")])
    s = HearSession(cfg_with(), ScriptedAsr([]), wake, ScriptedSegmenter([]))
    responder = FakeResponder(clock)
    loop = TurnLoop(s, responder, cue=np.ones(100, np.float32), cue_out=cues.append, clock=clock)
    turns = loop.run_live(ListSource(6.0))
    assert [t.transcript for t in turns] == ["讲个长故事", "现在几点"]
    first, second = turns
    assert first.cancelled and not second.cancelled
    barge = first.timeline.find("barge_in")
    assert len(barge) == 1 and barge[0]["cancel_ms"] <= 200
    assert responder.cancels == 1 and len(cues) == 2
    assert second.summary()["transcript"] == "现在几点"
    assert [e["name"] for e in second.timeline.events][:3] == ["wake", "cue", "asr_done"]


def test_file_replay_runs_each_turn_to_its_end_and_reports_latency():
    clock = FakeClock()

    class TimedResponder:
        def respond(self, text, timeline, cancel):
            clock.sleep(0.25)
            timeline.mark("audio_first")
            return "答"

        def cancel(self):
            pass

    seg = ScriptedSegmenter([(0.5, 1.5)])
    s = HearSession(cfg_with(), ScriptedAsr(["今天几号"]), ScriptedWake([]), seg)
    loop = TurnLoop(s, TimedResponder(), clock=clock)
    turns = loop.run_file(ListSource(3.0), require_wake=False)
    (turn,) = turns
    summary = turn.summary()
    assert summary["transcript"] == "今天几号" and summary["woke"] is False
    assert summary["end_to_first_audio_ms"] == pytest.approx(250.0)
    assert summary["vad_silence_ms"] == pytest.approx(500.0)
    assert [e["name"] for e in turn.timeline.events] == ["speech_end", "asr_done", "audio_first"]


def test_file_replay_with_require_wake_ignores_speech_without_wake():
    s = HearSession(cfg_with(), ScriptedAsr(["今天几号"]), ScriptedWake([]), ScriptedSegmenter([(0.5, 1.5)]))
    loop = TurnLoop(s, FakeResponder(FakeClock()), clock=FakeClock())
    assert loop.run_file(ListSource(3.0), require_wake=True) == []
    assert list(loop.wakes) == []


def test_live_loop_returns_on_stop_while_the_microphone_gives_nothing():
    class DeadMic:
        sample_rate = SAMPLE_RATE

        def __init__(self):
            self.closed = threading.Event()

        def frames(self):
            self.closed.wait(10)  # a device that never delivers (unplugged, retrying)
            return iter(())

        def close(self):
            self.closed.set()

    stop = threading.Event()
    mic = DeadMic()
    s = HearSession(cfg_with(), ScriptedAsr([]), ScriptedWake([]), ScriptedSegmenter([]))
    loop = TurnLoop(s, FakeResponder(FakeClock()), clock=FakeClock())
    t = threading.Thread(target=loop.run_live, args=(mic, stop))
    t.start()
    stop.set()
    t.join(2.0)
    assert not t.is_alive() and mic.closed.is_set()


class _BoomVoice:
    """A TTS engine that fails on the second piece of an answer."""

    name = "boom"
    languages = ("zh",)
    sample_rate = SAMPLE_RATE

    def generate(self, text, sid=0, speed=1.0):
        from rkvoice.errors import RkvoiceError

        if "BOOM" in text:
            raise RkvoiceError("tts", "synth-failed", f"cannot synthesise {text!r}")
        return np.zeros(int(0.2 * SAMPLE_RATE), np.float32), SAMPLE_RATE


@pytest.mark.parametrize("kind", ["speaker-responder", "answerer"])
def test_file_replay_tts_failure_mid_answer_is_a_failed_turn(kind):
    from dataclasses import dataclass

    from rkvoice.answer.turn import Answerer
    from rkvoice.audio.players import NullPlayer
    from rkvoice.hear.loop import SpeakerResponder
    from rkvoice.speaker import Speaker

    clock = FakeClock()
    cfg = cfg_with()
    speaker = Speaker(_BoomVoice(), NullPlayer(cfg, clock), cfg, clock,
                      normalize=lambda t: t, split=lambda t, a, b: [t])
    pieces = ["第一句话说完了。", "BOOM 第二句话说不出来。"]
    if kind == "answerer":
        @dataclass
        class Reply:
            route: str = "llm"
            deltas: object = None
            action: str = ""
            text: str = "".join(pieces)

        class Assistant:
            def reply(self, text, timeline, cancel):
                return Reply(deltas=iter(pieces))

            def abort(self):
                pass

        responder = Answerer(Assistant(), speaker, cfg, clock)
    else:
        responder = SpeakerResponder(lambda text, cancel: iter(pieces), speaker)
    s = HearSession(cfg, ScriptedAsr(["讲个故事"]), ScriptedWake([]), ScriptedSegmenter([(0.5, 1.5)]))
    loop = TurnLoop(s, responder, clock=clock)
    try:
        (turn,) = loop.run_file(ListSource(3.0))
    finally:
        speaker.close(timeout=2)
    errors = turn.timeline.find("error")
    assert turn.cancelled  # not "done": the answer was not spoken
    assert len(errors) == 1 and "cannot synthesise" in errors[0]["message"]
    assert s.mode is Mode.IDLE  # back to waiting for the wake, no follow-up window
