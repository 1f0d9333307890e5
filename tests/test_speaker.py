"""The pipelined speaker with a scripted fake engine and the null player on a FakeClock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from fakes import RecordingPlayer, RuledSpeaker, SeenTimeline, SteppedSpeaker, heard_until, wait_until

from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.speaker import Speaker
from rkvoice.timeline import Ev, Event, Timeline
from rkvoice.turn import Turn
from tests.support import FakeClock, ManualClock

RATE = 16000
WAIT = 10.0  # real-time safety net for thread hand-offs; never reached when things work


class ScriptedEngine:
    """Returns a tone of a scripted length after a scripted synthesis time on the fake clock.

    ``script`` maps chunk text -> (synth_s, audio_s); a text in ``gates`` waits for that
    event before "working"; a text in ``fail`` raises.
    """

    name = "scripted"
    languages: tuple[str, ...] = ("zh",)
    sample_rate = RATE

    def __init__(self, clock: FakeClock, script: dict[str, tuple[float, float]]) -> None:
        self.clock = clock
        self.script = script
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}
        self.fail: set[str] = set()
        self.calls: list[tuple[str, float]] = []
        self.speaker: SteppedSpeaker | None = None

    def load(self) -> None:
        pass

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
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


Split = Callable[[str, int, int], list[str]]


def make(
    script: dict[str, tuple[float, float]], split: Split = bar_split, cfg: Config | None = None
) -> tuple[FakeClock, ScriptedEngine, RecordingPlayer, Timeline, SteppedSpeaker, threading.Event]:
    """A loaded speaker, and the timeline the tests give their turns (``audio_first`` is set from it)."""
    clock = FakeClock()
    cfg = cfg or Config()
    engine = ScriptedEngine(clock, script)
    player = RecordingPlayer(cfg, clock)
    audio_first = threading.Event()

    def on_event(e: Event) -> None:
        if e.name is Ev.AUDIO_FIRST:
            audio_first.set()

    timeline = SeenTimeline(clock, on_event)
    speaker = SteppedSpeaker(engine, player, cfg, clock, normalize=lambda t: t, split=split)
    speaker.load()
    engine.speaker = speaker
    return clock, engine, player, timeline, speaker, audio_first


def names(timeline: Timeline, name: Ev) -> list[Event]:
    return timeline.find(name)


def finished(sp: Speaker, turn: Turn) -> bool:
    """``sp.wait(turn)`` in real time: the fake clock only moves when synthesis or a test moves it,
    so a clock-time timeout would never run out if the speaker hung."""
    return wait_until(lambda: sp.wait(turn, 0), WAIT)


def spoke(turn: Turn) -> bool:
    """The turn played to its end: neither cancelled nor failed."""
    return not turn.cancelled and turn.exception is None


def started(sp: Speaker, tl: Timeline) -> Turn:
    turn = Turn(tl)
    sp.start(turn)
    return turn


def test_pieces_play_in_order_overlapped_with_synthesis() -> None:
    script = {"a": (0.3, 1.0), "b": (0.5, 1.0), "c": (1.7, 0.5)}
    clock, engine, player, tl, sp, _ = make(script)
    turn = sp.speak("a|b|c", tl)
    assert finished(sp, turn)
    sp.close()
    assert spoke(turn) and turn.timeline is tl
    assert [c[0] for c in engine.calls] == ["a", "b", "c"]
    assert [e.get("text") for e in names(tl, Ev.CHUNK)] == ["a", "b", "c"]
    assert [e.get("index") for e in names(tl, Ev.PLAY_CHUNK)] == [0, 1, 2]
    # b is synthesised while a plays (a plays 300..1300 ms)
    b_start = names(tl, Ev.SYNTH_START)[1].t_ms
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
    assert names(tl, Ev.PLAY_END)[0].t_ms == pytest.approx(3000.0)
    assert player.samples == int(2.5 * RATE)


def test_fast_synthesis_leaves_no_gap() -> None:
    script = {"a": (0.2, 1.0), "b": (0.4, 2.0), "c": (0.4, 0.6)}
    clock, engine, player, tl, sp, _ = make(script)
    assert finished(sp, sp.speak("a|b|c", tl))
    sp.close()
    assert tl.summary()["max_gap_ms"] == 0.0
    assert tl.summary()["first_audio_ms"] == pytest.approx(200.0)
    assert player.segments == [pytest.approx([0.2, 3.8])]


def test_each_chunk_text_event_precedes_its_audio() -> None:
    script = {"a": (0.1, 0.5), "b": (0.1, 0.5)}
    clock, engine, player, tl, sp, _ = make(script)
    assert finished(sp, sp.speak("a|b", tl))
    sp.close()
    order = [(e.name, e.get("index")) for e in tl.events if e.name in (Ev.CHUNK, Ev.PLAY_CHUNK)]
    assert order.index((Ev.CHUNK, 1)) < order.index((Ev.PLAY_CHUNK, 1))
    assert order.index((Ev.CHUNK, 0)) < order.index((Ev.PLAY_CHUNK, 0))


def test_speak_without_a_timeline_gives_the_turn_its_own() -> None:
    clock, engine, player, tl, sp, _ = make({"a": (0.1, 0.5)})
    turn = sp.speak("a")
    assert finished(sp, turn)
    sp.close()
    assert spoke(turn) and turn.text == "a" and turn.timeline is not tl
    assert [e.name for e in turn.timeline.events][-1] is Ev.PLAY_END


def test_streamed_pieces_first_cut_short_later_long() -> None:
    calls = []

    def split(text: str, first: int, chunk: int) -> list[str]:
        calls.append((text, first, chunk))
        return [text]

    script = {"p1": (0.1, 0.2), "p2": (0.1, 0.2), "p3": (0.1, 0.2)}
    clock, engine, player, tl, sp, _ = make(script, split=split)
    turn = started(sp, tl)
    for piece in ["p1", "p2", "p3"]:
        sp.say(turn, piece)
    sp.end(turn)
    assert finished(sp, turn) and spoke(turn)
    sp.close()
    cfg = Config()
    assert calls == [
        ("p1", cfg.tts.first_chars, cfg.tts.chunk_chars),
        ("p2", cfg.tts.chunk_chars, cfg.tts.chunk_chars),
        ("p3", cfg.tts.chunk_chars, cfg.tts.chunk_chars),
    ]
    assert len(names(tl, Ev.TEXT_READY)) == 1


def test_cancel_silences_player_within_50ms_and_stops_synthesis() -> None:
    script = {"a": (0.2, 2.0), "b": (0.2, 2.0), "c": (0.2, 2.0)}
    clock, engine, player, tl, sp, audio_first = make(script)
    engine.gates["b"] = threading.Event()
    engine.entered["b"] = threading.Event()
    turn = sp.speak("a|b|c", tl)
    assert audio_first.wait(WAIT)
    assert engine.entered["b"].wait(WAIT)  # b is being synthesised while a plays
    clock.advance(0.5)  # a has played 0.5 s of 2 s
    t_cancel = clock.now()
    blocks_at_cancel = player.blocks
    assert turn.cancel("barge-in")
    assert sp.wait(turn, 0)  # no clock time passes: the cancel itself ends the wait
    assert turn.cancelled and turn.reason == "barge-in" and turn.exception is None
    heard = heard_until(player)
    assert heard is not None and heard - t_cancel <= 0.05
    engine.gates["b"].set()  # b's synthesis returns after the cancel...
    sp.close()
    assert [c[0] for c in engine.calls] == ["a", "b"]  # ...and c is never started
    assert player.blocks == blocks_at_cancel  # b's audio was dropped
    cancelled = names(tl, Ev.CANCELLED)
    assert len(cancelled) == 1 and cancelled[0].t_ms - t_cancel * 1000 <= 50
    assert cancelled[0].get("reason") == "barge-in"
    assert not names(tl, Ev.PLAY_END)
    assert not turn.cancel("stop")  # a turn is cancelled once; the first reason stays
    assert turn.reason == "barge-in"


def test_stale_turn_pieces_are_dropped_and_next_turn_plays() -> None:
    script = {"a": (0.1, 1.0), "x": (0.1, 1.0), "b": (0.1, 0.4)}
    clock, engine, player, tl, sp, audio_first = make(script)
    t1 = started(sp, tl)
    sp.say(t1, "a")
    assert audio_first.wait(WAIT)
    t1.cancel("barge-in")
    sp.say(t1, "x")  # the LLM was still streaming into the cancelled turn
    sp.end(t1)
    t2 = started(sp, Timeline(clock))
    assert t2.id > t1.id
    sp.say(t2, "b")
    sp.end(t2)
    assert finished(sp, t2)
    sp.close()
    assert spoke(t2)
    assert sp.wait(t1, 0) and t1.cancelled and t1.reason == "barge-in"
    assert [c[0] for c in engine.calls] == ["a", "b"]


def test_cancelling_one_turn_leaves_the_turn_queued_behind_it() -> None:
    script = {"a": (0.1, 1.0), "b": (0.1, 0.4)}
    clock, engine, player, tl, sp, audio_first = make(script)
    t1 = started(sp, tl)
    t2 = started(sp, Timeline(clock))
    sp.say(t2, "b")  # waits for t1, which is still open
    sp.end(t2)
    sp.say(t1, "a")
    assert audio_first.wait(WAIT)
    t1.cancel("barge-in")
    sp.end(t1)
    assert finished(sp, t2)
    sp.close()
    assert t1.cancelled and spoke(t2)
    assert [c[0] for c in engine.calls] == ["a", "b"]
    assert names(t2.timeline, Ev.PLAY_END) and not names(tl, Ev.PLAY_END)


def test_cancel_all_cancels_every_started_turn() -> None:
    script = {"a": (0.1, 2.0), "b": (0.1, 0.4)}
    clock, engine, player, tl, sp, _ = make(script)
    engine.gates["a"] = threading.Event()
    t1 = sp.speak("a", tl)
    t2 = sp.speak("b", Timeline(clock))  # queued behind t1
    assert engine.entered.setdefault("a", threading.Event()).wait(WAIT)
    sp.cancel_all("stop")
    assert sp.wait(t1, 0) and sp.wait(t2, 0)
    engine.gates["a"].set()
    sp.close()
    assert (t1.reason, t2.reason) == ("stop", "stop")
    assert [c[0] for c in engine.calls] == ["a"]  # the queued turn was never synthesised
    assert player.blocks == 0  # nor was the audio of the cancelled one played
    t3 = Turn(Timeline(clock))
    with pytest.raises(RkvoiceError, match="closed"):
        sp.start(t3)


def test_engine_exception_mid_answer_fails_the_turn_and_speaker_survives() -> None:
    script = {"a": (0.1, 0.6), "b": (0.1, 0.6), "c": (0.1, 0.6), "d": (0.1, 0.4)}
    clock, engine, player, tl, sp, _ = make(script)
    engine.fail.add("b")
    turn = started(sp, tl)
    sp.say(turn, "a|b")
    sp.say(turn, "c")
    sp.end(turn)
    assert finished(sp, turn)
    assert turn.cancelled and turn.reason == "error"
    assert isinstance(turn.exception, RkvoiceError) and "boom on b" in str(turn.exception)
    with pytest.raises(RkvoiceError, match="boom on b"):
        turn.raise_if_failed()
    assert [e.get("message") for e in names(tl, Ev.ERROR)] == [str(turn.exception)]
    assert player.samples == int(0.6 * RATE)  # a played, nothing after the failure
    # the speaker keeps working
    t2 = sp.speak("d", Timeline(clock))
    assert finished(sp, t2)
    sp.close()
    assert spoke(t2)
    t2.raise_if_failed()
    assert [c[0] for c in engine.calls] == ["a", "b", "d"]


def test_empty_and_unspeakable_pieces_end_the_turn_quietly() -> None:
    clock, engine, player, tl, sp, _ = make({})
    turn = started(sp, tl)
    sp.say(turn, "")
    sp.say(turn, "|")
    sp.end(turn)
    assert finished(sp, turn)
    sp.close()
    assert spoke(turn) and names(tl, Ev.PLAY_END)
    assert tl.summary()["chunks"] == 0 and not names(tl, Ev.CHUNK)
    assert engine.calls == [] and player.blocks == 0
    assert "first_audio_ms" not in tl.summary()


def test_turns_play_in_order_without_waiting_between_them() -> None:
    script = {"a": (0.1, 0.5), "b": (0.1, 0.5)}
    clock, engine, player, tl, sp, _ = make(script)
    t1 = sp.speak("a", Timeline(clock))
    t2 = sp.speak("b", Timeline(clock))
    assert finished(sp, t2)
    assert finished(sp, t1)
    sp.close()
    assert spoke(t1) and spoke(t2)
    assert [c[0] for c in engine.calls] == ["a", "b"]
    assert t1.timeline.find(Ev.PLAY_END)[0].t_ms <= t2.timeline.find(Ev.PLAY_END)[0].t_ms


def test_wait_times_out_on_the_speakers_clock() -> None:
    clock, engine, player, tl, sp, _ = make({"a": (0.1, 0.5)})
    engine.gates["a"] = threading.Event()
    turn = sp.speak("a", tl)
    assert engine.entered.setdefault("a", threading.Event()).wait(WAIT)
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(sp.wait(turn, 2.0)))
    waiter.start()

    def later() -> bool:  # synthesis is still blocked, so the turn cannot play: the wait gives up
        clock.advance(0.5)
        return not waiter.is_alive()

    assert wait_until(later, WAIT)
    waiter.join(WAIT)
    assert waited == [False] and not turn.cancelled
    engine.gates["a"].set()
    assert finished(sp, turn)
    sp.close()
    assert spoke(turn)


def test_audio_ahead_counts_what_the_player_still_has_of_the_turn() -> None:
    script = {"a": (0.3, 1.0), "b": (0.5, 1.0)}
    clock, engine, player, tl, sp, _ = make(script)
    turn = started(sp, tl)
    assert sp.audio_ahead_s(turn) is None  # nothing played yet
    sp.say(turn, "a")
    assert wait_until(lambda: sp.audio_ahead_s(turn) is not None, WAIT)
    assert sp.audio_ahead_s(turn) == pytest.approx(1.0)  # handed at 0.3 s, plays until 1.3 s
    clock.advance(0.6)
    assert sp.audio_ahead_s(turn) == pytest.approx(0.4)
    engine.gates["b"] = threading.Event()
    sp.say(turn, "b")
    assert engine.entered.setdefault("b", threading.Event()).wait(WAIT)
    assert sp.audio_ahead_s(turn) is None  # more audio is on its way
    engine.gates["b"].set()  # synthesised 0.9..1.4 s: the player ran dry at 1.3 s, then 1 s more
    assert wait_until(lambda: (sp.audio_ahead_s(turn) or 0.0) > 0.5, WAIT)
    assert sp.audio_ahead_s(turn) == pytest.approx(1.0)
    sp.end(turn)
    assert finished(sp, turn)
    sp.close()


def test_unknown_turn_ended_turn_and_unloaded_speaker_are_clear_errors() -> None:
    clock, engine, player, tl, sp, _ = make({"a": (0.1, 0.2)})
    with pytest.raises(RkvoiceError, match="never started"):
        sp.say(Turn(tl), "a")
    turn = started(sp, tl)
    sp.end(turn)
    with pytest.raises(RkvoiceError, match="already ended"):
        sp.say(turn, "a")
    sp.close()
    idle = Speaker(engine, player, Config(), clock)  # nothing starts before load()
    with pytest.raises(RkvoiceError, match="not loaded"):
        idle.start(Turn(tl))


def coalescing(chars: int) -> Config:
    cfg = Config()
    return replace(cfg, tts=replace(cfg.tts, coalesce_chars=chars))


def whole(text: str, first: int, chunk: int) -> list[str]:
    return [text]


@pytest.mark.parametrize("chars,calls", [(0, ["a", "b", "c", "d"]), (40, ["a", "bcd"]), (2, ["a", "bc", "d"])])
def test_pieces_queued_while_busy_merge_into_one_call(chars: int, calls: list[str]) -> None:
    script = {k: (0.1, 0.4) for k in ["a", "b", "c", "d", "bc", "bcd"]}
    clock, engine, player, tl, sp, _ = make(script, split=whole, cfg=coalescing(chars))
    engine.gates["a"] = threading.Event()
    turn = started(sp, tl)
    sp.say(turn, "a")  # the first piece is never merged: it sets the first-audio time
    assert engine.entered.setdefault("a", threading.Event()).wait(WAIT)
    for piece in "bcd":
        sp.say(turn, piece)  # these queue up while "a" is being synthesised
    sp.end(turn)
    engine.gates["a"].set()
    assert finished(sp, turn) and spoke(turn)
    sp.close()
    assert [c[0] for c in engine.calls] == calls
    assert [e.get("text") for e in names(tl, Ev.CHUNK)] == calls
    assert player.samples == int(0.4 * RATE) * len(calls)


def test_pieces_of_different_turns_never_merge_and_turns_keep_their_order() -> None:
    script = {k: (0.1, 0.4) for k in ["a", "bc", "x"]}
    clock, engine, player, tl, sp, _ = make(script, split=whole, cfg=coalescing(40))
    engine.gates["a"] = threading.Event()
    t1 = started(sp, tl)
    sp.say(t1, "a")
    assert engine.entered.setdefault("a", threading.Event()).wait(WAIT)
    t2 = started(sp, Timeline(clock))
    sp.say(t1, "b")
    sp.say(t2, "x")
    sp.say(t1, "c")
    sp.end(t1)
    sp.end(t2)
    engine.gates["a"].set()
    assert finished(sp, t1) and spoke(t1)
    assert finished(sp, t2) and spoke(t2)
    sp.close()
    # turn 2 waits for turn 1 to end: its piece never lands in the middle of turn 1's answer
    assert [c[0] for c in engine.calls] == ["a", "bc", "x"]


# -- audio still queued for the player counts as ahead; a played turn's late cancel leaves the player alone


class DeviceFull(RecordingPlayer):
    """A sound card whose buffer is full: write() blocks after the first block until released."""

    def __init__(self, cfg, clock):
        super().__init__(cfg, clock)
        self.release = threading.Event()
        self.blocked = threading.Event()

    def write(self, block):
        if self.blocks >= 1 and not self.release.is_set():
            self.blocked.set()
            self.release.wait(10)
        super().write(block)


class TwoSecondsThenOne:
    name, languages, sample_rate = "v", ("zh",), 16000

    def load(self):
        pass

    def generate(self, text, sid=0, speed=1.0):
        return np.full(int({"a": 2.0, "b": 1.0}[text] * 16000), 0.1, np.float32), 16000


def test_audio_waiting_for_the_player_counts_as_ahead():
    clock, cfg = FakeClock(), Config()
    player = DeviceFull(cfg, clock)
    sp = RuledSpeaker(TwoSecondsThenOne(), player, cfg, clock, normalize=lambda t: t, split=lambda t, f, c: [t])
    sp.load()
    turn = Turn(clock=clock)
    sp.start(turn)
    sp.say(turn, "a")
    assert player.blocked.wait(10)           # a (2 s) is being written; the device is full
    sp.say(turn, "b")
    assert wait_until(lambda: len(turn.timeline.find(Ev.SYNTH_END)) == 2 and sp.audio_ahead_s(turn) is not None)
    clock.advance(1.7)                       # a has 0.3 s left; b's 1 s waits in the speaker's queue
    ahead = sp.audio_ahead_s(turn)
    player.release.set()
    sp.end(turn)
    sp.close()
    assert ahead is not None and ahead >= 1.0, f"audio_ahead_s={ahead}: b's synthesised second is not counted"


class Voice:
    name, languages, sample_rate = "v", ("zh",), 16000

    def load(self):
        pass

    def generate(self, text, sid=0, speed=1.0):
        return np.full(int({"a": 0.5, "b": 2.0}[text] * 16000), 0.1, np.float32), 16000


class Clears(NullPlayer):
    def __init__(self, cfg, clock):
        super().__init__(cfg, clock)
        self.clears = 0

    def clear(self):
        self.clears += 1
        super().clear()


def test_cancelling_a_played_turn_leaves_the_next_turns_audio_alone():
    clock, cfg = FakeClock(), Config()
    player = Clears(cfg, clock)
    sp = RuledSpeaker(Voice(), player, cfg, clock, normalize=lambda t: t, split=lambda t, f, c: [t])
    sp.load()
    t1 = sp.speak("a")
    assert wait_until(lambda: sp.wait(t1, 0))      # played out; its owner has not finished it yet
    tl2 = Timeline(clock)
    t2 = sp.speak("b", tl2)                        # e.g. a reminder, queued right after
    assert wait_until(lambda: bool(tl2.find(Ev.AUDIO_FIRST)))
    t1.cancel("barge-in")                          # a late cancel of the old turn
    sp.close()
    assert not t2.cancelled
    assert player.clears == 0, "the player was cleared under turn 2's audio"


# -- a barge-in's wake cue is not cleared by the cancelled turn's last block


class LateBlock:
    """A player like aplay: the block being written when a clear() comes still goes in after it. The
    speaker thread's first write hands its block over only once the "hear" thread has written the wake
    cue (the order that lost the cue) or waits on the clock for that write (a cancel that waits for it)."""

    name, rate = "late", RATE

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.buffer: list[np.ndarray] = []
        self.entered = threading.Event()
        self.cue_written = threading.Event()
        self._lock = threading.Lock()

    def write(self, block: np.ndarray) -> None:
        if threading.current_thread().name == "rkvoice-player" and not self.entered.is_set():
            self.entered.set()
            assert wait_until(lambda: self.cue_written.is_set() or self.clock.blocked("hear"), WAIT)
        with self._lock:
            self.buffer.append(np.array(block))
        if threading.current_thread().name == "hear":
            self.cue_written.set()

    def clear(self) -> None:
        with self._lock:
            self.buffer.clear()

    def drain(self) -> None:
        pass


def test_a_cue_written_after_the_cancel_is_not_cleared_by_the_turns_last_block():
    clock, cfg = ManualClock(), Config()
    player = LateBlock(clock)
    sp = RuledSpeaker(Voice(), player, cfg, clock, normalize=lambda t: t, split=lambda t, f, c: [t])  # type: ignore[arg-type]
    sp.load()
    turn = sp.speak("a")
    assert player.entered.wait(WAIT)                 # the player thread is writing the answer's first block
    cue = [np.full(320, 7, np.int16) for _ in range(3)]

    def hear() -> None:                              # the turn loop on a wake: barge-in, then the cue
        turn.cancel("barge-in")
        for row in cue:
            player.write(row)

    t = threading.Thread(target=hear, name="hear")
    t.start()
    t.join(WAIT)
    assert not t.is_alive()
    sp.close()                                       # the player thread is done with the turn
    played = np.concatenate(player.buffer) if player.buffer else np.zeros(0, np.int16)
    assert played.size == 960 and np.all(played == 7), f"{played.size} samples left of the 960 of the cue"


def test_the_backlog_says_what_is_left_to_synthesise_and_to_hand_on() -> None:
    """Speaker.backlog, the public view of its queues: a piece in synthesis, the pieces said after it,
    then nothing once the turn has played out (and nothing of a cancelled turn)."""
    script = {"a": (0.1, 0.2), "b": (0.1, 0.2), "c": (0.1, 0.2)}
    clock, engine, player, tl, sp, _ = make(script)
    assert (sp.backlog.text, sp.backlog.synthesising, sp.backlog.audio, sp.backlog.synthesis_due) == (0, 0, 0, False)
    engine.gates["a"] = threading.Event()
    turn = started(sp, tl)
    for piece in ("a", "b", "c"):
        sp.say(turn, piece)
    assert engine.entered.setdefault("a", threading.Event()).wait(WAIT)
    held = sp.backlog
    assert (held.text, held.synthesising, held.synthesis_due) == (2, 1, True)
    engine.gates["a"].set()
    sp.end(turn)
    assert finished(sp, turn) and spoke(turn)
    assert wait_until(lambda: sp.backlog == type(held)(0, 0, 0, False), WAIT)
    second = started(sp, Timeline(clock))
    engine.gates["b"] = threading.Event()
    sp.say(second, "b")
    sp.say(second, "c")
    assert wait_until(lambda: sp.backlog.synthesising == 1, WAIT)
    second.cancel("stop")
    assert (sp.backlog.text, sp.backlog.synthesising) == (0, 0)  # a cancelled turn's pieces count for nothing
    engine.gates["b"].set()
    sp.close()
