"""Timeline marks on a controlled clock, the summary figures and the atomic write."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.timeline import Ev, Timeline, max_gap_ms
from tests.support import FakeClock


def test_marks_are_relative_to_the_first_mark_or_start() -> None:
    clock = FakeClock(100.0)
    tl = Timeline(clock)
    tl.mark(Ev.TEXT_READY)
    clock.advance(0.25)
    e = tl.mark(Ev.CHUNK, text="你好", index=0)
    assert (e.name, e.t_ms, e.get("text"), e.get("index"), e.get("absent", "-")) == (Ev.CHUNK, 250.0, "你好", 0, "-")
    assert e.name == "chunk"  # a StrEnum: compares equal to its JSON name
    assert e.to_dict() == {"t_ms": 250.0, "name": "chunk", "text": "你好", "index": 0}
    assert type(e.to_dict()["name"]) is str
    clock2 = FakeClock(5.0)
    tl2 = Timeline(clock2)
    tl2.start()
    clock2.advance(1.0)
    assert tl2.mark(Ev.PLAY_END).t_ms == 1000.0


def test_events_are_frozen_and_names_are_typed() -> None:
    tl = Timeline(FakeClock())
    e = tl.mark(Ev.CHUNK, index=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.t_ms = 5.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        e.data["index"] = 1  # type: ignore[index]
    assert tl.mark("chunk").name is Ev.CHUNK  # type: ignore[arg-type]  # a known name given as text
    with pytest.raises(ValueError, match="chunkk"):
        tl.mark("chunkk")  # type: ignore[arg-type]  # a misspelt event never lands in --metrics
    assert [x.name for x in tl.events] == [Ev.CHUNK, Ev.CHUNK]


def test_find_selects_by_event_name() -> None:
    clock, tl = build_turn()
    assert [e.get("index") for e in tl.find(Ev.CHUNK)] == [0, 1]
    assert tl.find(Ev.PLAY_CHUNK)[0].t_ms == 300.0
    assert tl.find(Ev.CANCELLED) == []


def build_turn() -> tuple[FakeClock, Timeline]:
    clock = FakeClock()
    tl = Timeline(clock)
    tl.mark(Ev.TEXT_READY)
    tl.mark(Ev.CHUNK, index=0, text="a")
    tl.mark(Ev.SYNTH_START, index=0)
    clock.advance(0.3)
    tl.mark(Ev.SYNTH_END, index=0, synth_ms=300.0, audio_s=1.0)
    tl.mark(Ev.AUDIO_FIRST)
    tl.mark(Ev.PLAY_CHUNK, index=0, audio_s=1.0)
    tl.mark(Ev.CHUNK, index=1, text="b")
    tl.mark(Ev.SYNTH_START, index=1)
    clock.advance(1.2)
    tl.mark(Ev.SYNTH_END, index=1, synth_ms=1200.0, audio_s=2.0)
    tl.mark(Ev.PLAY_CHUNK, index=1, audio_s=2.0)  # handed at 1.5 s, player dry since 1.3 s
    clock.advance(2.0)
    tl.mark(Ev.PLAY_END)
    return clock, tl


def test_summary_figures() -> None:
    clock, tl = build_turn()
    s = tl.summary()
    assert s["first_audio_ms"] == 300.0
    assert s["synth_ms"] == 1500.0
    assert s["audio_s"] == 3.0
    assert s["rtf"] == 0.5
    assert s["chunks"] == 2
    assert s["max_gap_ms"] == pytest.approx(200.0)
    assert s["total_ms"] == 3500.0
    assert "whole_text_synth_ms" not in s
    assert not {"cancelled", "errors", "answer", "transcript"} & set(s)  # only what happened
    tl.mark(Ev.WHOLE_TEXT_SYNTH, synth_ms=1400.0, audio_s=3.0)
    s = tl.summary()
    assert s["whole_text_synth_ms"] == 1400.0
    assert s["first_audio_vs_whole"] == pytest.approx(300.0 / 1400.0, abs=1e-4)


def test_summary_of_a_heard_and_answered_turn() -> None:
    clock = FakeClock()
    tl = Timeline(clock)
    tl.start()
    clock.advance(1.0)
    tl.mark(Ev.SPEECH_END, audio_s=2.5, silence_ms=500.0, truncated=False)
    clock.advance(0.2)
    tl.mark(Ev.ASR_DONE, text="讲个笑话", heard="讲个笑话", asr_ms=200.0, woke=False)
    tl.mark(Ev.LLM_START)
    clock.advance(0.1)
    tl.mark(Ev.LLM_FIRST_TOKEN)
    tl.mark(Ev.TEXT_READY)
    tl.mark(Ev.CHUNK, index=0, text="好的，")
    clock.advance(0.15)
    tl.mark(Ev.SYNTH_END, index=0, synth_ms=150.0, audio_s=0.5)
    tl.mark(Ev.AUDIO_FIRST)
    tl.mark(Ev.PLAY_CHUNK, index=0, audio_s=0.5)
    clock.advance(0.3)
    tl.mark(Ev.LLM_DONE, chars=9)
    tl.mark(Ev.ANSWER, text="好的，这是笑话。", route="llm")
    s = tl.summary()
    assert (s["transcript"], s["asr_ms"], s["woke"], s["vad_silence_ms"]) == ("讲个笑话", 200.0, False, 500.0)
    assert s["end_to_first_audio_ms"] == pytest.approx(450.0)  # speech end 1000 ms -> audio 1450 ms
    assert (s["answer"], s["route"]) == ("好的，这是笑话。", "llm")
    assert (s["llm_start_ms"], s["llm_first_token_ms"], s["audio_first_ms"]) == (1200.0, 1300.0, 1450.0)
    assert s["first_audio_from_llm_start_ms"] == pytest.approx(250.0)
    assert s["audio_first_before_llm_done"] is True
    assert (s["spoken_chars"], s["answer_chars"]) == (2, 6)  # only "好的" was cut for speech so far
    assert s["first_audio_ms"] == pytest.approx(150.0)
    assert "cancelled" not in s and "errors" not in s
    tl.mark(Ev.WAKE, text="小智小智", barge_in=True)
    tl.mark(Ev.CANCELLED, reason="barge-in")
    tl.mark(Ev.ERROR, message="tts failed")
    s = tl.summary()
    assert s["woke"] is True and s["cancelled"] is True and s["errors"] == ["tts failed"]


def test_max_gap_accounts_audio_time_not_hand_over_spacing() -> None:
    # chunks handed 1 s apart but each 1.5 s long: the player never runs dry
    assert max_gap_ms([(0.0, 1.5), (1000.0, 1.5), (2000.0, 1.5)]) == 0.0
    # a long first chunk buys time for a slow second one
    assert max_gap_ms([(0.0, 3.0), (2500.0, 0.5), (4000.0, 1.0)]) == pytest.approx(500.0)
    assert max_gap_ms([]) == 0.0


def test_write_is_atomic_json(tmp_path: Path) -> None:
    clock, tl = build_turn()
    path = tmp_path / "m.json"
    tl.write(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert [e["name"] for e in data["events"]][:2] == ["text_ready", "chunk"]
    assert data["summary"]["first_audio_ms"] == 300.0
    assert data == json.loads(json.dumps(tl.to_dict()))  # the file is to_dict(), nothing else
    assert os.listdir(tmp_path) == ["m.json"]  # no temp file left behind


def test_write_to_unwritable_place_is_a_clear_error(tmp_path: Path) -> None:
    clock, tl = build_turn()
    with pytest.raises(RkvoiceError, match="cannot write"):
        tl.write(tmp_path / "missing-dir" / "m.json")
