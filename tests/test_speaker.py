"""The pipelined speaker with a scripted fake engine and the null player on a FakeClock."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from rkvoice.audio.players import NullPlayer
from rkvoice.clock import FakeClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.speaker import Speaker
from rkvoice.timeline import Timeline

RATE = 16000
WAIT = 10.0  # real-time safety net for thread hand-offs; never reached when things work


class ScriptedEngine:
    """Returns a tone of a scripted length after a scripted synthesis time on the fake clock.

    ``script`` maps chunk text -> (synth_s, audio_s); a text in ``gates`` waits for that
    event before "working"; a text in ``fail`` raises.
    """

    name = "scripted"
    languages = ("zh",)
    sample_rate = RATE

    def __init__(self, clock: FakeClock, script: dict[str, tuple[float, float]]) -> None:
        self.clock = clock
        self.script = script
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}
        self.fail: set[str] = set()
        self.calls: list[tuple[str, float]] = []
        self.speaker: Speaker | None = None

    def generate(self, text: str, sid: int = 0, speed: float = 1.0):
        self.calls.append((text, self.clock.now()))
        self.entered.setdefault(text, threading.Event()).set()
        if text in self.gates:
            assert self.gates[text].wait(WAIT)
        if self.speaker is not None:
            self.speaker.wait_handed()  # let the player thread catch up before time moves
        if text in self.fail:
            raise RuntimeError(f"boom on {text}")
        synth_s, audio_s = self.script[text]
        self.clock.sleep(synth_s)
        n = round(audio_s * RATE)
        freq = 200.0 + 10 * len(self.calls)
        return (0.3 * np.sin(2 * np.pi * freq * np.arange(n) / RATE)).astype(np.float32), RATE


def bar_split(text: str, first: int, chunk: int) -> list[str]:
    return [p for p in text.split("|") if p]


def make(script, split=bar_split, cfg=None):
    clock = FakeClock()
    cfg = cfg or Config()
    engine = ScriptedEngine(clock, script)
    player = NullPlayer(cfg, clock)
    audio_first = threading.Event()

    def on_event(e):
        if e["name"] == "audio_first":
            audio_first.set()

    timeline = Timeline(clock, on_event=on_event)
    speaker = Speaker(engine, player, cfg, clock, timeline, normalize=lambda t: t, split=split)
    engine.speaker = speaker
    return clock, engine, player, timeline, speaker, audio_first


def names(timeline, name):
    return [e for e in timeline.events if e["name"] == name]


def test_pieces_play_in_order_overlapped_with_synthesis():
    script = {"a": (0.3, 1.0), "b": (0.5, 1.0), "c": (1.7, 0.5)}
    clock, engine, player, tl, sp, _ = make(script)
    turn = sp.speak("a|b|c")
    result = sp.wait_done(turn, WAIT)
    sp.close()
    assert result is not None and result.status == "done"
    assert [c[0] for c in engine.calls] == ["a", "b", "c"]
    assert [e["text"] for e in names(tl, "chunk")] == ["a", "b", "c"]
    assert [e["index"] for e in names(tl, "play_chunk")] == [0, 1, 2]
    # b is synthesised while a plays (a plays 300..1300 ms)
    b_start = names(tl, "synth_start")[1]["t_ms"]
    assert b_start == pytest.approx(300.0)
    # heard: a+b back to back from 0.3 s, c after a 200 ms gap (synthesis fell behind)
    assert player.segments == [pytest.approx([0.3, 2.3]), pytest.approx([2.5, 3.0])]
    s = tl.summary()
    assert s["first_audio_ms"] == pytest.approx(300.0)
    assert s["max_gap_ms"] == pytest.approx(200.0)
    assert s["chunks"] == 3
    assert s["synth_ms"] == pytest.approx(2500.0)
    assert s["audio_s"] == pytest.approx(2.5)
    assert s["rtf"] == pytest.approx(1.0)
    assert names(tl, "play_end")[0]["t_ms"] == pytest.approx(3000.0)
    assert player.samples == int(2.5 * RATE)


def test_fast_synthesis_leaves_no_gap():
    script = {"a": (0.2, 1.0), "b": (0.4, 2.0), "c": (0.4, 0.6)}
    clock, engine, player, tl, sp, _ = make(script)
    sp.wait_done(sp.speak("a|b|c"), WAIT)
    sp.close()
    assert tl.summary()["max_gap_ms"] == 0.0
    assert tl.summary()["first_audio_ms"] == pytest.approx(200.0)
    assert player.segments == [pytest.approx([0.2, 3.8])]


def test_each_chunk_text_event_precedes_its_audio():
    script = {"a": (0.1, 0.5), "b": (0.1, 0.5)}
    clock, engine, player, tl, sp, _ = make(script)
    sp.wait_done(sp.speak("a|b"), WAIT)
    sp.close()
    order = [(e["name"], e.get("index")) for e in tl.events if e["name"] in ("chunk", "play_chunk")]
    assert order.index(("chunk", 1)) < order.index(("play_chunk", 1))
    assert order.index(("chunk", 0)) < order.index(("play_chunk", 0))


def test_streamed_pieces_first_cut_short_later_long():
    calls = []

    def split(text, first, chunk):
        calls.append((text, first, chunk))
        return [text]

    script = {"p1": (0.1, 0.2), "p2": (0.1, 0.2), "p3": (0.1, 0.2)}
    clock, engine, player, tl, sp, _ = make(script, split=split)
    turn = sp.start_turn()
    for piece in ["p1", "p2", "p3"]:
        sp.say(piece, turn)
    sp.end_turn(turn)
    assert sp.wait_done(turn, WAIT).status == "done"
    sp.close()
    cfg = Config()
    assert calls == [
        ("p1", cfg.tts.first_chars, cfg.tts.chunk_chars),
        ("p2", cfg.tts.chunk_chars, cfg.tts.chunk_chars),
        ("p3", cfg.tts.chunk_chars, cfg.tts.chunk_chars),
    ]
    assert len(names(tl, "text_ready")) == 1


def test_cancel_silences_player_within_50ms_and_stops_synthesis():
    script = {"a": (0.2, 2.0), "b": (0.2, 2.0), "c": (0.2, 2.0)}
    clock, engine, player, tl, sp, audio_first = make(script)
    engine.gates["b"] = threading.Event()
    engine.entered["b"] = threading.Event()
    turn = sp.speak("a|b|c")
    assert audio_first.wait(WAIT)
    assert engine.entered["b"].wait(WAIT)  # b is being synthesised while a plays
    clock.advance(0.5)  # a has played 0.5 s of 2 s
    t_cancel = clock.now()
    blocks_at_cancel = player.blocks
    sp.cancel()
    result = sp.wait_done(turn, 0)  # already finished: cancel() ends the turn
    assert result is not None and result.status == "cancelled"
    assert player.heard_until() - t_cancel <= 0.05
    engine.gates["b"].set()  # b's synthesis returns after the cancel...
    sp.close()
    assert [c[0] for c in engine.calls] == ["a", "b"]  # ...and c is never started
    assert player.blocks == blocks_at_cancel  # b's audio was dropped
    cancelled = names(tl, "cancelled")
    assert len(cancelled) == 1 and cancelled[0]["t_ms"] - t_cancel * 1000 <= 50
    assert not names(tl, "play_end")


def test_stale_turn_pieces_are_dropped_and_next_turn_plays():
    script = {"a": (0.1, 1.0), "x": (0.1, 1.0), "b": (0.1, 0.4)}
    clock, engine, player, tl, sp, audio_first = make(script)
    t1 = sp.start_turn()
    sp.say("a", t1)
    assert audio_first.wait(WAIT)
    sp.cancel()
    sp.say("x", t1)  # the LLM was still streaming into the cancelled turn
    sp.end_turn(t1)
    t2 = sp.start_turn()
    assert t2 > t1
    sp.say("b", t2)
    sp.end_turn(t2)
    r2 = sp.wait_done(t2, WAIT)
    sp.close()
    assert r2.status == "done"
    assert sp.wait_done(t1, 0).status == "cancelled"
    assert [c[0] for c in engine.calls] == ["a", "b"]


def test_engine_exception_mid_answer_ends_the_turn_and_speaker_survives():
    script = {"a": (0.1, 0.6), "b": (0.1, 0.6), "c": (0.1, 0.6), "d": (0.1, 0.4)}
    clock, engine, player, tl, sp, _ = make(script)
    engine.fail.add("b")
    turn = sp.start_turn()
    sp.say("a|b", turn)
    sp.say("c", turn)
    sp.end_turn(turn)
    result = sp.wait_done(turn, WAIT)
    assert result.status == "error"
    assert isinstance(result.error, RkvoiceError) and "boom on b" in str(result.error)
    assert [e["message"] for e in names(tl, "error")] == [str(result.error)]
    assert player.samples == int(0.6 * RATE)  # a played, nothing after the failure
    # the speaker keeps working
    r2 = sp.wait_done(sp.speak("d", Timeline(clock)), WAIT)
    sp.close()
    assert r2.status == "done"
    assert [c[0] for c in engine.calls] == ["a", "b", "d"]


def test_empty_and_unspeakable_pieces_end_the_turn_quietly():
    clock, engine, player, tl, sp, _ = make({})
    turn = sp.start_turn()
    sp.say("", turn)
    sp.say("|", turn)
    sp.end_turn(turn)
    result = sp.wait_done(turn, WAIT)
    sp.close()
    assert result.status == "done" and result.chunks == 0
    assert engine.calls == [] and player.blocks == 0
    assert "first_audio_ms" not in tl.summary()


def test_turns_play_in_order_without_waiting_between_them():
    script = {"a": (0.1, 0.5), "b": (0.1, 0.5)}
    clock, engine, player, tl, sp, _ = make(script)
    t1 = sp.speak("a", Timeline(clock))
    t2 = sp.speak("b", Timeline(clock))
    r2 = sp.wait_done(t2, WAIT)
    r1 = sp.wait_done(t1, WAIT)
    sp.close()
    assert r1.status == r2.status == "done"
    assert [c[0] for c in engine.calls] == ["a", "b"]
    assert r1.timeline.find("play_end")[0]["t_ms"] <= r2.timeline.find("play_end")[0]["t_ms"]


def test_unknown_turn_and_ended_turn_are_clear_errors():
    clock, engine, player, tl, sp, _ = make({"a": (0.1, 0.2)})
    with pytest.raises(RkvoiceError, match="never started"):
        sp.say("a", 99)
    turn = sp.start_turn()
    sp.end_turn(turn)
    with pytest.raises(RkvoiceError, match="already ended"):
        sp.say("a", turn)
    sp.close()


def coalescing(chars: int) -> Config:
    cfg = Config()
    return replace(cfg, tts=replace(cfg.tts, coalesce_chars=chars))


@pytest.mark.parametrize("chars,calls", [(0, ["a", "b", "c", "d"]), (40, ["a", "bcd"]), (2, ["a", "bc", "d"])])
def test_pieces_queued_while_busy_merge_into_one_call(chars, calls):
    script = {k: (0.1, 0.4) for k in ["a", "b", "c", "d", "bc", "bcd"]}
    clock, engine, player, tl, sp, _ = make(script, split=lambda t, f, c: [t], cfg=coalescing(chars))
    engine.gates["a"] = threading.Event()
    turn = sp.start_turn()
    sp.say("a", turn)  # the first piece is never merged: it sets the first-audio time
    assert engine.entered.setdefault("a", threading.Event()).wait(WAIT)
    for piece in "bcd":
        sp.say(piece, turn)  # these queue up while "a" is being synthesised
    sp.end_turn(turn)
    engine.gates["a"].set()
    assert sp.wait_done(turn, WAIT).status == "done"
    sp.close()
    assert [c[0] for c in engine.calls] == calls
    assert [e["text"] for e in names(tl, "chunk")] == calls
    assert player.samples == int(0.4 * RATE) * len(calls)


def test_pieces_of_different_turns_never_merge_and_turns_keep_their_order():
    script = {k: (0.1, 0.4) for k in ["a", "bc", "x"]}
    clock, engine, player, tl, sp, _ = make(script, split=lambda t, f, c: [t], cfg=coalescing(40))
    engine.gates["a"] = threading.Event()
    t1 = sp.start_turn()
    sp.say("a", t1)
    assert engine.entered.setdefault("a", threading.Event()).wait(WAIT)
    t2 = sp.start_turn(Timeline(clock))
    sp.say("b", t1)
    sp.say("x", t2)
    sp.say("c", t1)
    sp.end_turn(t1)
    sp.end_turn(t2)
    engine.gates["a"].set()
    assert sp.wait_done(t1, WAIT).status == "done"
    assert sp.wait_done(t2, WAIT).status == "done"
    sp.close()
    # turn 2 waits for turn 1 to end: its piece never lands in the middle of turn 1's answer
    assert [c[0] for c in engine.calls] == ["a", "bc", "x"]
