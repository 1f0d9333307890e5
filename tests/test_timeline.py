"""Timeline marks on a controlled clock, the summary figures and the atomic write."""

from __future__ import annotations

import json
import os

import pytest

from rkvoice.clock import FakeClock
from rkvoice.errors import RkvoiceError
from rkvoice.timeline import Timeline, max_gap_ms


def test_marks_are_relative_to_the_first_mark_or_start():
    clock = FakeClock(100.0)
    tl = Timeline(clock)
    tl.mark("text_ready")
    clock.advance(0.25)
    e = tl.mark("chunk", text="你好", index=0)
    assert e == {"t_ms": 250.0, "name": "chunk", "text": "你好", "index": 0}
    clock2 = FakeClock(5.0)
    tl2 = Timeline(clock2)
    tl2.start()
    clock2.advance(1.0)
    assert tl2.mark("x")["t_ms"] == 1000.0


def test_on_event_sees_every_mark():
    seen = []
    tl = Timeline(FakeClock(), on_event=seen.append)
    tl.mark("a")
    tl.mark("b", n=1)
    assert [e["name"] for e in seen] == ["a", "b"]


def build_turn():
    clock = FakeClock()
    tl = Timeline(clock)
    tl.mark("text_ready")
    tl.mark("chunk", index=0, text="a")
    tl.mark("synth_start", index=0)
    clock.advance(0.3)
    tl.mark("synth_end", index=0, synth_ms=300.0, audio_s=1.0)
    tl.mark("audio_first")
    tl.mark("play_chunk", index=0, audio_s=1.0)
    tl.mark("chunk", index=1, text="b")
    tl.mark("synth_start", index=1)
    clock.advance(1.2)
    tl.mark("synth_end", index=1, synth_ms=1200.0, audio_s=2.0)
    tl.mark("play_chunk", index=1, audio_s=2.0)  # handed at 1.5 s, player dry since 1.3 s
    clock.advance(2.0)
    tl.mark("play_end")
    return clock, tl


def test_summary_figures():
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
    tl.mark("whole_text_synth", synth_ms=1400.0, audio_s=3.0)
    s = tl.summary()
    assert s["whole_text_synth_ms"] == 1400.0
    assert s["first_audio_vs_whole"] == pytest.approx(300.0 / 1400.0, abs=1e-4)


def test_max_gap_accounts_audio_time_not_hand_over_spacing():
    # chunks handed 1 s apart but each 1.5 s long: the player never runs dry
    assert max_gap_ms([(0.0, 1.5), (1000.0, 1.5), (2000.0, 1.5)]) == 0.0
    # a long first chunk buys time for a slow second one
    assert max_gap_ms([(0.0, 3.0), (2500.0, 0.5), (4000.0, 1.0)]) == pytest.approx(500.0)
    assert max_gap_ms([]) == 0.0


def test_write_is_atomic_json(tmp_path):
    clock, tl = build_turn()
    path = tmp_path / "m.json"
    tl.write(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert [e["name"] for e in data["events"]][:2] == ["text_ready", "chunk"]
    assert data["summary"]["first_audio_ms"] == 300.0
    assert os.listdir(tmp_path) == ["m.json"]  # no temp file left behind


def test_write_to_unwritable_place_is_a_clear_error(tmp_path):
    clock, tl = build_turn()
    with pytest.raises(RkvoiceError, match="cannot write"):
        tl.write(tmp_path / "missing-dir" / "m.json")
