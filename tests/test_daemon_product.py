"""The product's live host over loaded stages (scripted engines of the real shapes): the hooks the
supervisor hangs on the one loop (busy, on_turn, on_error), streamed answers, reminders, CLI wiring."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeVoice, MarkerWake, ScriptedAsr, ScriptedLlm, ScriptedMic, ScriptedSegmenter, wait_until

from rkvoice.answer.assistant import Assistant
from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config, load_config
from rkvoice.daemon.listener import LocalListener
from rkvoice.errors import RkvoiceError
from rkvoice.stages import Hear, Speak, Stages
from rkvoice.turn import Turn


class FakeHost:
    def __init__(self) -> None:
        self.reports: list[Turn | BaseException] = []
        self.busy_names: list[str] = []
        self.reported = threading.Event()

    def report(self, result: Turn | BaseException) -> None:
        self.reports.append(result)
        self.reported.set()

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        self.busy_names.append(what)
        yield


class ScriptedHear(Hear):
    def __init__(self, cfg: Config, script: list[Any]) -> None:
        super().__init__(cfg)
        self.asr, self.wake, self.segmenter = ScriptedAsr([]), MarkerWake(script), ScriptedSegmenter()

    def load(self) -> None:
        pass


def live(tmp_path: Path, script: list[Any], llm: ScriptedLlm | None = None, **ack: Any) -> tuple[LocalListener, FakeHost, FakeVoice]:
    cfg = load_config([{"state": {"dir": str(tmp_path / "state")}, "hear": {"ack": "none", **ack},
                        "daemon": {"answer_first_timeout_s": 2.0}}])
    voice = FakeVoice(char_s=0.005)
    speak = Speak(cfg, player=lambda c: NullPlayer(c), tts=lambda c: voice)
    speak.load()
    host = FakeHost()
    stages = Stages(ScriptedHear(cfg, script), Assistant(cfg, llm=llm or ScriptedLlm()), speak)
    wake = stages.hear.wake

    def ready(done: int) -> bool:
        return wake.seen >= done and (not done or bool(host.reports))

    return LocalListener(stages, cfg, host.report, host.busy, source=lambda c: ScriptedMic(len(script), ready)), host, voice


def run(h: LocalListener, until: Any) -> None:
    t = threading.Thread(target=h.run, daemon=True)
    t.start()
    try:
        assert wait_until(until)
    finally:
        h.interrupt("shutdown")
        t.join(5)
        h.speak.close()
    assert not t.is_alive()


def test_a_turn_is_marked_busy_spoken_and_reported_with_its_handle(tmp_path: Path) -> None:
    h, host, voice = live(tmp_path, ["现在几点"])
    run(h, lambda: bool(host.reports))
    (turn,) = host.reports
    assert isinstance(turn, Turn) and turn.route == "tool:time" and turn.result and turn.done.is_set()
    assert "".join(voice.said) == turn.result
    assert "turn" in host.busy_names and "hear" in host.busy_names
    assert turn.timeline.summary()["transcript"] == "现在几点"


def test_streamed_llm_tokens_reach_the_speaker_as_a_few_chunked_pieces(tmp_path: Path) -> None:
    answer = "从前有一座山，山上有一座庙，庙里有一个老和尚在给小和尚讲故事。讲的是什么呢？就是从前有一座山。"
    tokens, i = [], 0
    while i < len(answer):  # alternating 1- and 2-char deltas, as an LLM streams tokens
        n = 1 + len(tokens) % 2
        tokens.append(answer[i:i + n])
        i += n
    assert "".join(tokens) == answer and max(map(len, tokens)) <= 2 and len(tokens) > 30
    h, host, voice = live(tmp_path, ["给我讲讲长城的历史"], llm=ScriptedLlm(tokens))
    run(h, lambda: bool(host.reports))
    (turn,) = host.reports
    assert isinstance(turn, Turn) and turn.result == answer
    spoken = voice.said
    assert "".join(spoken) == answer  # everything spoken, in order
    assert 2 <= len(spoken) <= 8, spoken  # a few pieces, not one synthesis per token
    assert len(spoken[0]) <= h.cfg.tts.first_chars + 2  # a short first piece
    assert all(len(p) >= 4 for p in spoken), spoken


def test_hearing_failure_is_reported_and_the_loop_goes_on(tmp_path: Path) -> None:
    h, host, _voice = live(tmp_path, [RkvoiceError("asr", "decode-failed", "whisper crashed"), "现在几点"])
    run(h, lambda: len(host.reports) == 2)
    failed, turn = host.reports
    assert isinstance(failed, RkvoiceError) and failed.stage == "asr"
    assert isinstance(turn, Turn) and turn.route == "tool:time" and turn.exception is None


def test_a_failed_synthesis_is_a_turn_with_its_exception(tmp_path: Path) -> None:
    h, host, voice = live(tmp_path, ["给我讲讲长城的历史"], llm=ScriptedLlm(["第一句。", "BOOM 第二句。", "第三句。"]))
    run(h, lambda: bool(host.reports))
    (turn,) = host.reports
    assert isinstance(turn, Turn) and isinstance(turn.exception, RkvoiceError)
    assert turn.exception.stage == "tts" and turn.reason == "error"
    assert "第三句。" not in voice.said


def test_a_due_reminder_is_spoken_as_a_turn_of_its_own(tmp_path: Path) -> None:
    h, _host, voice = live(tmp_path, [])
    h.assistant.scheduler.on_due("该喝水了")
    assert wait_until(lambda: voice.said == ["该喝水了"])
    h.speak.close()


def test_voice_cue_is_made_with_the_loaded_voice(tmp_path: Path) -> None:
    cfg = load_config([{"hear": {"ack": "voice", "ack_text": "我在"}}])
    voice = FakeVoice(char_s=0.1)
    speak = Speak(cfg, player=lambda c: NullPlayer(c), tts=lambda c: voice)
    speak.load()
    try:
        assert voice.said == ["我在"]  # one voice on the board: the cue does not load a second
        assert len(speak.cue) == pytest.approx(0.2 * speak.player.rate, rel=0.01)  # type: ignore[union-attr]
    finally:
        speak.close()


def test_assistant_py_without_a_mode_runs_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    from rkvoice.cli import entry as cli_entry
    from rkvoice.daemon import service

    seen = {}

    def fake_serve(load: Any, plan: Any = None) -> int:
        seen["cfg"] = load()
        return 0

    monkeypatch.setattr(service, "serve", fake_serve)
    assert cli_entry.main(["--no-play", "--set", "daemon.max_failures=7"]) == 0
    assert seen["cfg"].audio.player == "null"
    assert seen["cfg"].daemon.max_failures == 7
