"""Answering: routing, the bounded LLM stream (timeout, length, cancel) and the overlap of LLM
generation with speech, with scripted fake LLM/TTS engines on a FakeClock (no timed asserts)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from fakes import SeenTimeline, SteppedSpeaker

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.conversation import spoken_now
from rkvoice.answer.generate import TIMEOUT_TEXT, LlmStream
from rkvoice.answer.llm.base import LlmEngine
from rkvoice.answer.llm.registry import LLM, engine_name
from rkvoice.answer.respond import Answerer
from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config, HearConfig, LlmConfig, ModelsConfig, StateConfig
from rkvoice.errors import RkvoiceError
from rkvoice.state import StateStore
from rkvoice.text.normalize import speakable
from rkvoice.text.stream_chunker import StreamChunker
from rkvoice.timeline import Ev, Event, Timeline
from rkvoice.turn import Turn
from tests.support import FakeClock

WAIT = 10.0  # real-time safety net for thread hand-offs; never reached when things work
TZ = timezone(timedelta(hours=8))
NOW = datetime(2026, 10, 21, 22, 5, tzinfo=TZ)
RATE = 16000


class FakeLlm(LlmEngine):
    """Yields scripted deltas, each after ``token_s`` of fake-clock time.

    ``gate``: (index, event) -> before yielding delta ``index`` wait for the event (lets a test
    prove that audio started while the model was still generating).
    """

    name = "fake"

    def __init__(self, clock: FakeClock, deltas: list[str], token_s: float = 0.05,
                 gate: tuple[int, threading.Event] | None = None) -> None:
        self.clock = clock
        self.deltas = deltas
        self.token_s = token_s
        self.gate = gate
        self.aborted = threading.Event()
        self.at_gate = threading.Event()
        self.loaded = False
        self.seen: list[list[dict[str, str]]] = []
        self.yielded = 0
        self.spoken_after: list[int] = []
        """Deltas yielded when ``speaking()`` was called (the voice got the first piece)."""
        self.before: Callable[[], None] | None = None
        """Called before each delta takes its clock time (SteppedSpeaker.wait_synthesised: the speaker's
        marks land at the clock time they would have in real life, whatever the OS schedules)."""

    def load(self) -> None:
        self.loaded = True

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        self.seen.append(messages)
        self.aborted.clear()
        for i, d in enumerate(self.deltas):
            if self.gate is not None and self.gate[0] == i:
                self.at_gate.set()
                assert self.gate[1].wait(WAIT), "gate never opened"
            if self.aborted.is_set():
                return
            if self.before is not None:
                self.before()
            self.clock.sleep(self.token_s)
            self.yielded = i + 1
            yield d

    def speaking(self) -> None:
        self.spoken_after.append(self.yielded)

    def abort(self) -> None:
        self.aborted.set()


class FakeTts:
    """Instant synthesis on the fake clock: 0.2 s of tone per character."""

    name = "fake-tts"
    sample_rate = RATE

    def __init__(self) -> None:
        self.calls: list[str] = []

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        self.calls.append(text)
        n = int(0.2 * RATE * len(text))
        return (0.3 * np.sin(np.arange(n) * 0.05)).astype(np.float32), RATE


def cfg_for(tmp_path: Path, **llm: object) -> Config:
    return Config(state=StateConfig(dir=str(tmp_path / "state")),
                  llm=dataclasses.replace(LlmConfig(), **llm))


def make(tmp_path: Path, deltas: list[str], **kw: object):
    clock = FakeClock()
    cfg = cfg_for(tmp_path)
    llm = FakeLlm(clock, deltas, **kw)  # type: ignore[arg-type]
    events: dict[str, threading.Event] = {}

    def on_event(e: Event) -> None:
        events.setdefault(str(e.name), threading.Event()).set()

    tl = SeenTimeline(clock, on_event)
    tts = FakeTts()
    player = NullPlayer(cfg, clock)
    speaker = SteppedSpeaker(tts, player, cfg, clock)  # the product's speakable
    speaker.load()
    assistant = Assistant(cfg, clock, llm=llm, now=lambda: NOW, store=StateStore(tmp_path / "state"))
    return clock, llm, tl, tts, speaker, Answerer(assistant, speaker, cfg), events


def ask(answerer: Answerer, text: str, tl: Timeline) -> Turn:
    """One turn answered and spoken (as the turn loop does it)."""
    turn = Turn(tl, text=text)
    turn.finish(answerer.respond(turn))
    return turn


STORY = ["从前，", "有一只", "小兔子住在月亮上。", "它每天晚上", "都在桂花树下", "捣药，", "累了就看看地球。",
         "有一天，", "它看见一个", "小女孩在窗前", "向它挥手。", "小兔子很开心，", "也向她挥了挥耳朵。"]


def names(tl: Timeline, name: str) -> list[Event]:
    return tl.find(Ev(name))


def test_first_audio_plays_while_llm_still_generates(tmp_path: Path) -> None:
    audio_started = threading.Event()
    _clock, _llm, tl, tts, speaker, answerer, events = make(tmp_path, STORY, gate=(6, audio_started))
    events["audio_first"] = audio_started  # the gate opens only once audio has reached the player
    answered = ask(answerer, "给我讲一个关于月亮的小故事", tl)
    speaker.close()
    assert answered.route == "llm" and not answered.cancelled and answered.exception is None
    order = [str(e.name) for e in tl.events]
    assert order.index("route") < order.index("llm_first_token") < order.index("audio_first") < order.index("llm_done")
    assert order.index("llm_done") < order.index("answer") < order.index("play_end")
    assert names(tl, "route")[0].get("route") == "llm"
    whole = "".join(STORY)
    assert names(tl, "answer")[0].get("text") == whole == answered.result
    # every character spoken once, in order, in several pieces
    assert "".join(tts.calls) == speakable(whole)
    assert len(tts.calls) >= 3
    assert len(tts.calls[0]) <= Config().tts.first_chars


def test_the_llm_is_told_once_when_its_first_piece_goes_to_the_voice(tmp_path: Path) -> None:
    """So generation can leave the voice a core from then on (llama: Threads.speaking)."""
    _clock, llm, tl, _tts, speaker, answerer, _ = make(tmp_path, STORY)
    ask(answerer, "给我讲一个关于月亮的小故事", tl)
    speaker.close()
    chunker = StreamChunker(Config().tts.first_chars, Config().tts.chunk_chars)
    first_piece_at = next(i + 1 for i, d in enumerate(STORY) if chunker.feed(d))
    assert 1 < first_piece_at < len(STORY)
    assert llm.spoken_after == [first_piece_at]


def test_pieces_of_the_same_turn_keep_text_before_audio(tmp_path: Path) -> None:
    _clock, _llm, tl, _tts, speaker, answerer, _ = make(tmp_path, STORY)
    ask(answerer, "讲个故事", tl)
    speaker.close()
    chunks = {e.get("index"): e.t_ms for e in names(tl, "chunk")}
    for play in names(tl, "play_chunk"):
        assert chunks[play.get("index")] <= play.t_ms
    assert [e.get("index") for e in names(tl, "play_chunk")] == sorted(chunks)


def test_tool_answers_skip_the_llm(tmp_path: Path) -> None:
    _clock, llm, tl, tts, speaker, answerer, _ = make(tmp_path, ["不该出现"])
    answered = ask(answerer, "现在几点", tl)
    speaker.close()
    assert answered.route == "tool:time" and answered.result == "现在是晚上十点零五分。"
    assert names(tl, "route")[0].get("route") == "tool:time"
    assert not names(tl, "llm_first_token") and not llm.seen and not llm.loaded
    assert "".join(tts.calls) == "现在是晚上十点零五分。"


def test_stop_request_cancels_speech(tmp_path: Path) -> None:
    _clock, _llm, tl, tts, speaker, answerer, _ = make(tmp_path, [])
    playing = speaker.speak("一段很长的提醒，还在播放。")
    answered = ask(answerer, "别说了", tl)
    assert speaker.wait(playing, WAIT)
    speaker.close()
    assert answered.route == "tool:stop" and answered.result == ""
    assert playing.cancelled and playing.reason == "stop"  # what was speaking stops through its turn


def test_cancel_mid_answer_aborts_llm_and_keeps_no_history(tmp_path: Path) -> None:
    gate = threading.Event()
    _clock, llm, tl, _tts, speaker, answerer, events = make(tmp_path, STORY, gate=(4, gate))
    turn = Turn(tl, text="讲个故事")
    t = threading.Thread(target=lambda: turn.finish(answerer.respond(turn)))
    t.start()
    assert llm.seen or events.setdefault("llm_first_token", threading.Event()).wait(WAIT)
    turn.cancel("barge-in")  # the one way to stop a turn: the LLM and the speaker let go of it
    gate.set()
    t.join(WAIT)
    speaker.close()
    assert not t.is_alive()
    assert llm.aborted.is_set()
    assert turn.cancelled and turn.done.is_set() and turn.exception is None
    assert len(answerer.assistant.conversation.history) == 0


def test_timeout_aborts_and_says_so() -> None:
    clock = FakeClock()
    llm = FakeLlm(clock, ["第一句话。", "第二句话，", "还没完", "还在说", "一直说"], token_s=1.0)
    tl = Timeline(clock)
    stream = LlmStream(llm, [{"role": "user", "content": "x"}], clock, timeout_s=2.5, max_chars=500, turn=Turn(tl))
    out = "".join(stream)
    assert stream.timed_out and llm.aborted.is_set()
    assert out == "第一句话。第二句话，" + "。" + TIMEOUT_TEXT
    assert speakable(TIMEOUT_TEXT) == TIMEOUT_TEXT
    done = names(tl, "llm_done")[0]
    assert done.get("timed_out") is True and names(tl, "llm_timeout")


def test_max_answer_length_ends_at_a_sentence() -> None:
    clock = FakeClock()
    llm = FakeLlm(clock, ["一二三四五，", "六七八九十", "十一十二。十三", "十四十五十六"])
    stream = LlmStream(llm, [], clock, timeout_s=60, max_chars=12, turn=Turn())
    assert "".join(stream) == "一二三四五，六七八九十十一十二。"
    assert stream.truncated and llm.aborted.is_set()


def test_max_answer_length_hard_cut_without_sentence_end() -> None:
    clock = FakeClock()
    llm = FakeLlm(clock, ["一二三四五六"] * 10)
    stream = LlmStream(llm, [], clock, timeout_s=60, max_chars=10, turn=Turn())
    out = "".join(stream)
    assert stream.truncated and len(out) <= 18


def test_the_assistant_answers_to_the_configured_wake_phrases_name(tmp_path: Path) -> None:
    clock = FakeClock()
    llm = FakeLlm(clock, ["我是小白。"])
    cfg = dataclasses.replace(cfg_for(tmp_path), hear=HearConfig(wake_phrase="小白小白"))
    a = Assistant(cfg, clock, llm=llm, now=lambda: NOW, store=StateStore(tmp_path / "s"))
    assert a.reply("小白停一下", Turn()).route == "tool:stop"
    reply = a.reply("你叫什么名字", Turn())
    assert reply.route == "llm" and "".join(reply.deltas) == "我是小白。"
    assert llm.seen[0][0]["content"].startswith("你是小白，")


def test_assistant_remembers_llm_turns(tmp_path: Path) -> None:
    clock = FakeClock()
    llm = FakeLlm(clock, ["好的。"])
    a = Assistant(cfg_for(tmp_path), clock, llm=llm, now=lambda: NOW, store=StateStore(tmp_path / "s"))
    reply = a.reply("你好", Turn())
    assert reply.route == "llm" and "".join(reply.deltas) == "好的。"
    reply = a.reply("再说一次", Turn())
    "".join(reply.deltas)
    t = f"[{spoken_now(NOW)}] "  # the time opens each question (tests/test_conversation.py)
    assert llm.seen[1][1:] == [{"role": "user", "content": t + "你好"}, {"role": "assistant", "content": "好的。"},
                               {"role": "user", "content": t + "再说一次"}]


def test_registry_names_and_auto(tmp_path: Path) -> None:
    assert LLM.names() == ["llama", "rkllm"]
    assert engine_name(Config()) == "llama"
    assert engine_name(Config(models=ModelsConfig(profile="board"))) == "rkllm"
    with pytest.raises(RkvoiceError, match="choose one of: llama, rkllm"):
        engine_name(Config(llm=LlmConfig(engine="gpt")))


def test_player_about_to_run_dry_cuts_pending_text_at_a_comma(tmp_path: Path) -> None:
    deltas = ["从前有一座山。", "山里", "有座庙，", "庙里", "有个", "老和尚", "在讲", "故事。"]
    _clock, llm, tl, tts, speaker, answerer, _ = make(tmp_path, deltas, token_s=0.4)
    # every piece said so far is synthesised and with the player before the LLM's next 0.4 s pass:
    # the speaker's threads never race the fake clock
    llm.before = speaker.wait_synthesised
    ask(answerer, "讲个故事", tl)
    speaker.close()
    # 0.4 s per delta, 0.2 s of speech per character. The chunker hands "从前有一座山。" over with
    # the next delta (0.8 s): 1.4 s of audio, dry at 2.2 s. "庙里有个老和尚在讲故事。" completes only
    # at 3.2 s. At 2.0 s the player is about to run dry (0.2 s left), so "山里有座庙，" is spoken on
    # its own, early: it plays 2.2..3.4 s, and the rest arrives at 3.2 s, before it ends.
    chunks = names(tl, "chunk")
    assert [e.get("text") for e in chunks] == ["从前有一座山。", "山里有座庙，", "庙里有个老和尚在讲故事。"]
    assert [e.t_ms for e in chunks] == [800.0, 2000.0, 3200.0]
    assert "".join(tts.calls) == "".join(deltas)
    # no gap at all, where waiting for the sentence would leave 1000 ms of silence (2.2..3.2 s)
    assert tl.summary()["max_gap_ms"] == 0.0


def test_stalled_answer_fails_the_turn_by_the_gap_deadline(tmp_path: Path) -> None:
    stalled = threading.Event()
    clock, llm, tl, tts, speaker, answerer, _ = make(tmp_path, STORY, gate=(3, stalled))
    turn = Turn(tl, text="讲个故事")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            answerer.respond(turn)
        except RkvoiceError as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    assert llm.at_gate.wait(WAIT)  # the model stalls after its third delta
    waited = 0.0
    # the deadline waits on the turn's (fake) clock: move it only while the answerer waits on it
    while waited < 60 and clock.blocked(unless=lambda: not t.is_alive()):
        clock.advance(0.5)
        waited += 0.5
    t.join(WAIT)
    stalled.set()
    speaker.close()
    gap = answerer.cfg.daemon.answer_gap_timeout_s
    assert errors and getattr(errors[0], "code", "") == "timeout" and "next words" in str(errors[0])
    assert turn.reason == "timeout" and turn.exception is errors[0]
    assert llm.aborted.is_set()  # the turn's cancel reached the LLM
    assert waited == gap  # to the step: the turn failed as soon as the gap deadline passed
    assert names(tl, "answer_first_text") and names(tl, "answer")


def test_reply_stops_when_its_turn_is_cancelled(tmp_path: Path) -> None:
    clock = FakeClock()
    llm = FakeLlm(clock, ["第一句。", "第二句。", "第三句。"])
    a = Assistant(cfg_for(tmp_path), clock, llm=llm, now=lambda: NOW, store=StateStore(tmp_path / "s"))
    turn = Turn(Timeline(clock), text="讲个故事")
    reply = a.reply("讲个故事", turn)
    got = []
    for d in reply.deltas:
        got.append(d)
        turn.cancel("stop")  # from any thread
    assert got == ["第一句。"] and llm.aborted.is_set()
    assert reply.llm is not None and reply.llm.cancelled
    assert len(a.conversation.history) == 0


FS2 = Path(__file__).resolve().parent.parent / "models" / "portable" / "fastspeech2"


@pytest.mark.skipif(not (FS2 / "fastspeech2.onnx").is_file(), reason="fastspeech2 model not installed (./install.sh)")
def test_cli_text_answers_from_a_tool(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    metrics = tmp_path / "m.json"
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "xdg"))
    proc = subprocess.run(
        [sys.executable, str(root / "assistant.py"), "--text", "十二乘以八等于多少", "--no-play",
         "--metrics", str(metrics), "--tts", "fastspeech2"],
        check=False, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "十二乘以八等于九十六。"
    data = json.loads(metrics.read_text(encoding="utf-8"))
    s = data["summary"]
    assert s["route"] == "tool:arithmetic" and s["answer"] == "十二乘以八等于九十六。"
    names_ = [e["name"] for e in data["events"]]
    assert names_.index("route") < names_.index("audio_first") < names_.index("play_end")
    assert "llm_start" not in names_ and s["audio_s"] > 1.0
    assert s["spoken_chars"] == s["answer_chars"] > 0  # the whole answer was spoken
