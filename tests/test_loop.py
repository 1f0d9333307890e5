"""The one turn loop on scripted fake engines and the controlled clock: barge-in through the turn
handle, file replay latency, require-wake, interrupt, a failed synthesis."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from fakes import (
    FakeVoice,
    ListSource,
    ScriptedAsr,
    ScriptedLlm,
    ScriptedSegmenter,
    ScriptedWake,
    SteppedSpeaker,
    wait_until,
)

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.respond import Answerer
from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import load_config, parse_override
from rkvoice.hear.session import HearSession, Mode
from rkvoice.hear.vad import SAMPLE_RATE
from rkvoice.timeline import Ev
from rkvoice.turn import Turn
from rkvoice.turn_loop import TurnLoop
from tests.support import FakeClock


def cfg_with(tmp_path: Path, **hear: object):
    items = [parse_override(f"hear.{k}={v}") for k, v in hear.items()]
    return load_config([*items, {"state": {"dir": str(tmp_path / "state")}}])


class Rig:
    """The real Answerer, Assistant (scripted LLM) and Speaker (fake voice, null player) on a FakeClock."""

    def __init__(self, tmp_path: Path, llm: ScriptedLlm | None = None, voice: FakeVoice | None = None,
                 **hear: object) -> None:
        self.clock = FakeClock()
        self.cfg = cfg_with(tmp_path, **hear)
        self.llm = llm or ScriptedLlm(clock=self.clock)
        self.voice = voice or FakeVoice(self.clock, synth_s=0.1)
        self.assistant = Assistant(self.cfg, self.clock, llm=self.llm)
        self.speaker = SteppedSpeaker(self.voice, NullPlayer(self.cfg, self.clock), self.cfg, self.clock)
        self.speaker.load()
        self.voice.before = self.speaker.wait_handed
        self.answerer = Answerer(self.assistant, self.speaker, self.cfg)

    def loop(self, session: HearSession, **kw: object) -> TurnLoop:
        return TurnLoop(session, self.answerer, clock=self.clock, **kw)  # type: ignore[arg-type]

    def close(self) -> None:
        self.speaker.close(timeout=2)
        self.assistant.close()


@pytest.fixture
def rig(tmp_path: Path):
    made: list[Rig] = []

    def make(**kw: object) -> Rig:
        r = Rig(tmp_path, **kw)  # type: ignore[arg-type]
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def test_file_replay_runs_each_turn_to_its_end_and_reports_latency(rig) -> None:
    r = rig()
    s = HearSession(r.cfg, ScriptedAsr(["今天几号"]), ScriptedWake(), ScriptedSegmenter([(0.5, 1.5)]))
    (turn,) = r.loop(s).run_file(ListSource(3.0), require_wake=False)
    summary = turn.timeline.summary()
    assert turn.done.is_set() and not turn.cancelled and turn.route == "tool:date"
    assert summary["transcript"] == "今天几号" and summary["woke"] is False
    # the tool answers at once; the voice takes 100 ms of clock for the first piece
    assert summary["end_to_first_audio_ms"] == pytest.approx(100.0, abs=1.0)
    assert summary["vad_silence_ms"] == pytest.approx(500.0)
    names = [e.name for e in turn.timeline.events]
    assert names[:3] == [Ev.SPEECH_END, Ev.ASR_DONE, Ev.ROUTE] and names[-1] is Ev.PLAY_END
    assert names.index(Ev.ANSWER) < names.index(Ev.PLAY_END)
    assert s.mode is Mode.FOLLOW_UP


def test_file_replay_with_require_wake_ignores_speech_without_wake(rig) -> None:
    r = rig()
    s = HearSession(r.cfg, ScriptedAsr(["今天几号"]), ScriptedWake(), ScriptedSegmenter([(0.5, 1.5)]))
    loop = r.loop(s)
    assert loop.run_file(ListSource(3.0), require_wake=True) == []
    assert list(loop.wakes) == []


def test_live_barge_in_cancels_the_turn_through_its_handle_and_starts_a_new_one(rig) -> None:
    long = ScriptedLlm([f"第{i}段比较长的回答，" for i in range(5)], delta_s=0.0, until_aborted=True)
    r = rig(llm=long)
    long.clock = r.clock
    cues: list[np.ndarray] = []
    started = threading.Event()

    class GatedSource(ListSource):
        """The second wake comes only once the first answer is being spoken."""

        def frames(self):
            for i, frame in enumerate(super().frames()):
                if i == int(2.0 * SAMPLE_RATE) // 512:
                    assert started.wait(10)
                yield frame

    wake = ScriptedWake([(1.0, "给我讲讲长城的历史"), (4.0, "现在几点")])
    s = HearSession(r.cfg, ScriptedAsr([]), wake, ScriptedSegmenter())
    loop = r.loop(s, cue=np.ones(100, np.float32), cue_out=cues.append)
    done: list[Turn] = []
    loop.on_turn = done.append
    t = threading.Thread(target=lambda: loop.run_live(GatedSource(6.0)))
    t.start()
    assert wait_until(lambda: len(r.voice.said) >= 1)
    started.set()
    t.join(10)
    assert not t.is_alive()
    first, second = list(loop.turns)
    assert first.cancelled and first.reason == "barge-in" and first.exception is None
    assert long.aborted.is_set()  # the turn's cancel reached the LLM
    assert not second.cancelled and second.route == "tool:time" and second.result
    assert first.timeline.find(Ev.BARGE_IN) and first.timeline.find(Ev.CANCELLED)
    assert len(cues) == 2
    assert [e.name for e in second.timeline.events][:3] == [Ev.WAKE, Ev.CUE, Ev.ASR_DONE]
    assert {id(x) for x in done} == {id(first), id(second)}


def test_interrupt_returns_while_the_microphone_gives_nothing(rig) -> None:
    class DeadMic:
        sample_rate = SAMPLE_RATE

        def __init__(self) -> None:
            self.closed = threading.Event()

        def frames(self):
            self.closed.wait(10)  # a device that never delivers (unplugged, retrying)
            return iter(())

        def close(self) -> None:
            self.closed.set()

    r = rig()
    mic = DeadMic()
    loop = r.loop(HearSession(r.cfg, ScriptedAsr([]), ScriptedWake(), ScriptedSegmenter()))
    t = threading.Thread(target=loop.run_live, args=(mic,))
    t.start()
    loop.interrupt("shutdown")
    t.join(2.0)
    assert not t.is_alive() and mic.closed.is_set()


def test_interrupt_before_the_loop_runs_is_not_lost(rig) -> None:
    r = rig()
    loop = r.loop(HearSession(r.cfg, ScriptedAsr([]), ScriptedWake(), ScriptedSegmenter()))
    loop.interrupt("reload")
    source = ListSource(3600.0)
    assert loop.run_live(source) == [] and source.closed


def test_failed_synthesis_mid_answer_fails_the_turn_and_returns_to_idle(rig) -> None:
    r = rig(llm=ScriptedLlm(["第一句话说完了。", "BOOM 第二句话说不出来。", "第三句。"]))
    s = HearSession(r.cfg, ScriptedAsr(["讲个故事吧"]), ScriptedWake(), ScriptedSegmenter([(0.5, 1.5)]))
    (turn,) = r.loop(s).run_file(ListSource(3.0))
    errors = turn.timeline.find(Ev.ERROR)
    assert turn.cancelled and turn.reason == "error"
    assert turn.exception is not None and "cannot synthesise" in str(turn.exception)
    assert len(errors) == 1 and "cannot synthesise" in errors[0].get("message")
    assert "第三句。" not in r.voice.said
    assert s.mode is Mode.IDLE  # back to waiting for the wake, no follow-up window


@pytest.mark.parametrize("answer", [["好的。"], ["第一句话说完了。", "BOOM 第二句话说不出来。"]],
                         ids=["answered", "failed"])
def test_a_turn_is_finished_once_with_its_answer_or_none(rig, monkeypatch: pytest.MonkeyPatch,
                                                         answer: list[str]) -> None:
    """The loop finishes each turn once: with the answer's text, or with no result when it failed
    (the old loop finished it, then finished it again without a result)."""
    finished: list[tuple[int, str | None]] = []
    finish = Turn.finish

    def counted(self: Turn, result: str | None = None) -> None:
        finished.append((self.id, result))
        finish(self, result)

    monkeypatch.setattr(Turn, "finish", counted)
    r = rig(llm=ScriptedLlm(answer))
    s = HearSession(r.cfg, ScriptedAsr(["讲个故事吧"]), ScriptedWake(), ScriptedSegmenter([(0.5, 1.5)]))
    (turn,) = r.loop(s).run_file(ListSource(3.0))
    mine = [result for tid, result in finished if tid == turn.id]
    failed = turn.exception is not None
    assert failed == (len(answer) > 1)
    assert mine == [None if failed else turn.result] and (failed or turn.result == "好的。")


def test_answer_deadline_cancels_a_wedged_llm_turn(rig, tmp_path: Path) -> None:
    r = rig(llm=ScriptedLlm())
    s = HearSession(r.cfg, ScriptedAsr(["hang 讲个故事"]), ScriptedWake(), ScriptedSegmenter([(0.5, 1.5)]))
    loop = r.loop(s)
    t = threading.Thread(target=lambda: loop.run_file(ListSource(3.0)))
    t.start()
    assert wait_until(lambda: r.llm.calls == ["hang 讲个故事"] or len(r.llm.calls) == 1)
    waited = 0.0
    # the deadline waits on the turn's clock: only fake time passes, and only while the turn waits on it
    while waited < 600 and r.clock.blocked(unless=lambda: not t.is_alive()):
        r.clock.advance(1.0)
        waited += 1.0
    t.join(10)
    r.llm.release.set()
    (turn,) = loop.turns
    assert turn.reason == "timeout" and getattr(turn.exception, "code", "") == "timeout"
    assert waited == r.cfg.daemon.answer_first_timeout_s  # to the step: failed as soon as the deadline passed
