"""The product plan's seams: the guarded responder (over the real Speaker), turn reports, CLI wiring."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from rkvoice.audio.players import NullPlayer
from rkvoice.clock import FakeClock
from rkvoice.config import load_config
from rkvoice.daemon.product import GuardedResponder, LiveHost
from rkvoice.daemon.stages import TurnReport
from rkvoice.errors import RkvoiceError
from rkvoice.speaker import Speaker
from rkvoice.timeline import Timeline

RATE = 16000


class ToneEngine:
    """A TTS engine giving 0.2 s of tone per piece; a piece containing BOOM fails."""

    name = "tone"
    languages = ("zh",)
    sample_rate = RATE

    def __init__(self) -> None:
        self.texts: list[str] = []

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        if "BOOM" in text:
            raise RkvoiceError("tts", "synth-failed", f"cannot synthesise {text!r}")
        self.texts.append(text)
        return (0.3 * np.sin(np.arange(int(0.2 * RATE)) / 5)).astype(np.float32), RATE


@dataclass
class FakeReply:
    route: str
    deltas: Iterator[str]
    action: str = ""
    text: str = ""


@dataclass
class FakeAssistant:
    replies: dict[str, FakeReply] = field(default_factory=dict)
    aborts: int = 0

    def reply(self, text: str, timeline: Any = None, cancel: Any = None) -> FakeReply:
        return self.replies[text]

    def abort(self) -> None:
        self.aborts += 1

    def set_reminder_callback(self, fn: Any) -> None:
        self.remind = fn


class FakeHost:
    def __init__(self) -> None:
        self.reports: list[Any] = []
        self.busy_names: list[str] = []

    def report(self, result: Any) -> None:
        self.reports.append(result)

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        self.busy_names.append(what)
        yield


@dataclass
class Rig:
    cfg: Any
    clock: FakeClock
    engine: ToneEngine
    speaker: Speaker
    assistant: FakeAssistant
    host: FakeHost
    responder: GuardedResponder


@pytest.fixture
def rig():
    cfg = load_config([{"daemon": {"answer_first_timeout_s": 0.2, "answer_gap_timeout_s": 0.2}}])
    clock = FakeClock()
    engine = ToneEngine()
    speaker = Speaker(engine, NullPlayer(cfg, clock), cfg, clock,
                      normalize=lambda t: t, split=lambda t, a, b: [t])
    assistant = FakeAssistant()
    host = FakeHost()
    yield Rig(cfg, clock, engine, speaker, assistant, host, GuardedResponder(assistant, speaker, cfg, host, clock))
    speaker.cancel()
    speaker.close(timeout=2)


def test_answer_is_spoken_and_the_turn_marked_busy(rig) -> None:
    r = rig
    r.assistant.replies["几点"] = FakeReply("tool:time", iter(["现在是三点。"]))
    tl = Timeline(r.clock)
    assert r.responder.respond("几点", tl, threading.Event()) == "现在是三点。"
    assert r.engine.texts == ["现在是三点。"]
    assert r.host.busy_names == ["turn"]
    assert r.responder.outcomes[id(tl)].route == "tool:time" and r.responder.outcomes[id(tl)].error is None


def test_streamed_llm_tokens_reach_the_speaker_as_a_few_chunked_pieces(rig) -> None:
    r = rig
    answer = "从前有一座山，山上有一座庙，庙里有一个老和尚在给小和尚讲故事。讲的是什么呢？就是从前有一座山。"
    tokens, i = [], 0
    while i < len(answer):  # alternating 1- and 2-char deltas, as an LLM streams tokens
        n = 1 + len(tokens) % 2
        tokens.append(answer[i:i + n])
        i += n
    assert "".join(tokens) == answer and max(map(len, tokens)) <= 2 and len(tokens) > 30
    r.assistant.replies["讲故事"] = FakeReply("llm", iter(tokens), text=answer)
    tl = Timeline(r.clock)
    assert r.responder.respond("讲故事", tl, threading.Event()) == answer
    spoken = r.engine.texts
    assert "".join(spoken) == answer  # everything spoken, in order
    assert 2 <= len(spoken) <= 8, spoken  # a few pieces, not one synthesis per token
    assert len(spoken[0]) <= r.cfg.tts.first_chars + 2  # a short first piece
    assert all(len(p) >= 4 for p in spoken), spoken
    assert [e["name"] for e in tl.events].count("answer_first_text") == 1


def test_failed_synthesis_mid_answer_fails_the_turn(rig) -> None:
    r = rig
    r.assistant.replies["讲"] = FakeReply("llm", iter(["第一句。", "BOOM 第二句。"]))
    tl = Timeline(r.clock)
    with pytest.raises(RkvoiceError) as err:
        r.responder.respond("讲", tl, threading.Event())
    assert err.value.stage == "tts"
    assert r.responder.outcomes[id(tl)].error is err.value


def test_hung_answer_times_out_and_aborts_the_llm(rig) -> None:
    r = rig
    release = threading.Event()

    def hang() -> Iterator[str]:
        release.wait(10)
        yield "太晚了"

    r.assistant.replies["问"] = FakeReply("llm", hang())
    try:
        with pytest.raises(RkvoiceError) as err:
            r.responder.respond("问", Timeline(r.clock), threading.Event())
        assert err.value.code == "timeout"
        assert r.assistant.aborts == 1
    finally:
        release.set()


def test_stop_action_cancels_speech(rig) -> None:
    r = rig
    cancels = []
    real_cancel = r.speaker.cancel
    r.speaker.cancel = lambda: (cancels.append(1), real_cancel())  # type: ignore[method-assign]
    r.assistant.replies["停"] = FakeReply("tool:stop", iter([]), action="stop")
    assert r.responder.respond("停", Timeline(r.clock), threading.Event()) == ""
    assert cancels == [1]


def test_turn_records_become_reports_or_failures(rig) -> None:
    r = rig

    @dataclass
    class Engines:
        speaker: Any
        player: Any = None

    live = LiveHost({"hear": None, "answer": r.assistant, "speak": Engines(r.speaker)}, r.cfg, r.host)
    responder = live.responder

    @dataclass
    class Record:
        timeline: Timeline
        transcript: str
        answer: str = ""
        cancelled: bool = False

        def summary(self) -> dict[str, Any]:
            return {"transcript": self.transcript, "asr_ms": 120.0, "end_to_first_audio_ms": 850.5}

    r.assistant.replies["几点"] = FakeReply("tool:time", iter(["三点。"]))
    ok = Record(Timeline(r.clock), "几点")
    ok.answer = responder.respond("几点", ok.timeline, threading.Event())
    live._on_turn(ok)
    r.assistant.replies["讲"] = FakeReply("llm", iter(["BOOM"]))
    bad = Record(Timeline(r.clock), "讲", cancelled=True)
    with pytest.raises(RkvoiceError):
        responder.respond("讲", bad.timeline, threading.Event())
    live._on_turn(bad)
    good, failed = r.host.reports
    assert isinstance(good, TurnReport)
    assert (good.transcript, good.route, good.answer_chars) == ("几点", "tool:time", 3)
    assert good.latency_ms == {"asr_ms": 120.0, "end_to_first_audio_ms": 850.5}
    assert isinstance(failed, RkvoiceError) and failed.stage == "tts"
    assert responder.outcomes == {}  # nothing kept per turn: weeks of turns must not grow memory


def test_assistant_py_without_a_mode_runs_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    from rkvoice import cli
    from rkvoice.daemon import entry

    seen = {}

    def fake_serve(load: Any, stages: Any = None) -> int:
        seen["cfg"] = load()
        return 0

    monkeypatch.setattr(entry, "serve", fake_serve)
    assert cli.main(["--no-play", "--set", "daemon.max_failures=7"]) == 0
    assert seen["cfg"].audio.player == "null"
    assert seen["cfg"].daemon.max_failures == 7
