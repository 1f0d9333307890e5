"""bench/board_budget.py's board times and bench/turn_latency.py's per-turn parts (no models: scripted
timelines on a FakeClock)."""

from __future__ import annotations

import pytest

from bench.board_budget import BOARD, tts_seconds
from bench.fake_clock import FakeClock
from bench.turn_latency import Script, asked, from_system_prompt, llm_record, report, turn_parts
from rkvoice.timeline import Ev, Timeline
from rkvoice.turn import Turn


def test_a_piece_runs_in_the_smallest_buckets_that_hold_it() -> None:
    per_frame = 0.2936 / 599
    seconds, audio_s = tts_seconds("现在是晚上十点零五分。")  # 10 characters: 20 tokens, t32; 150 frames, f200
    assert audio_s == pytest.approx(2.4)
    assert seconds == pytest.approx(312 * per_frame + 200 * 0.0547 / 600 + 150 * 0.050 / 600)
    long_s, _ = tts_seconds("一" * 20)  # 40 tokens: t64, 300 frames: f600
    assert long_s == pytest.approx(616 * per_frame + 0.0547 + 300 * 0.050 / 600)
    huge_s, _ = tts_seconds("一" * 40)  # 80 tokens: two t64 windows
    assert huge_s > 2 * 616 * per_frame
    assert BOARD.matcha_windows == ((32, 312), (64, 616))


def _turn(clock: FakeClock, route: str, first_token_s: float, piece_s: float, synth_s: float) -> Turn:
    tl = Timeline(clock)
    tl.mark(Ev.SPEECH_END, silence_ms=500.0)
    clock.advance(0.2)
    tl.mark(Ev.ASR_DONE, text="问题", asr_ms=200.0)
    clock.advance(0.001)
    tl.mark(Ev.ROUTE, route=route)
    if route == "llm":
        tl.mark(Ev.LLM_START)
        clock.advance(first_token_s)
        tl.mark(Ev.LLM_FIRST_TOKEN)
        clock.advance(piece_s)
    tl.mark(Ev.TEXT_READY)
    tl.mark(Ev.CHUNK, index=0, text="第一块，")
    clock.advance(synth_s)
    tl.mark(Ev.AUDIO_FIRST)
    tl.mark(Ev.ANSWER, text="第一块，", route="llm" if route == "llm" else "tool:time")
    return Turn(tl, text="问题")


def test_turn_parts_and_the_no_wasted_wait_bound() -> None:
    clock = FakeClock()
    llm = turn_parts(_turn(clock, "llm", 0.5, 0.3, 0.1))
    assert llm["route"] == "llm" and llm["first_piece"] == "第一块，" and llm["unaccounted_ms"] == 0.0
    assert llm["end_to_first_audio_ms"] == pytest.approx(1101.0)
    assert (llm["asr_ms"], llm["route_ms"], llm["llm_first_token_ms"], llm["llm_first_piece_gen_ms"],
            llm["first_piece_synth_ms"]) == (200.0, 1.0, 500.0, 300.0, 100.0)
    tool = turn_parts(_turn(clock, "time", 0, 0, 0.1))
    assert tool["route"] == "tool" and tool["end_to_first_audio_ms"] == pytest.approx(301.0)
    out = report({"per": {"default": [llm, tool], "one_thread": [llm, tool]}}, ["default", "one_thread"])
    assert out["tool_p50_ms"] == 301.0 and out["llm_p50_ms"] == 1101.0
    assert out["llm_bound_ms"] == 301.0 + 500.0 + 300.0 + 150.0 and out["llm_within_bound"]
    assert out["llm_vs_one_thread"] == 1.0


def test_the_script_interleaves_variants_and_alternates_their_order() -> None:
    turns = Script(["a", "b"], rounds=2, warmup=1).turns
    assert [v for v, _ in turns] == ["warmup", "warmup", "a", "a", "b", "b", "b", "b", "a", "a"]
    assert all("小智小智" in text for _, text in turns)
    by_round = [turns[2:6], turns[6:10]]
    for r in by_round:  # within a round every variant hears the same two requests
        assert {v for v, _ in r} == {"a", "b"} and r[0][1] == r[2][1] and r[1][1] == r[3][1]
        assert [asked(text) for _, text in r] == ["tool", "llm", "tool", "llm"]
    assert by_round[0][1][1] != by_round[1][1][1]  # rounds move on to other questions


class _Primed:
    def __init__(self) -> None:
        self.primed: list[list[dict[str, str]]] = []

    def prime(self, messages: list[dict[str, str]]) -> None:
        self.primed.append(messages)


class _Conversation:
    def __init__(self) -> None:
        self.history = [("q", "a")]

    def system_prompt(self) -> str:
        return "你是小智。"


def test_every_llm_turn_starts_from_the_system_prompt_alone() -> None:
    assistant = type("A", (), {"llm": _Primed(), "conversation": _Conversation()})()
    from_system_prompt(assistant)
    assert assistant.conversation.history == []
    assert assistant.llm.primed == [[{"role": "system", "content": "你是小智。"}]]
    assistant.llm = object()  # an engine without a cache (rkllm) is left alone
    from_system_prompt(assistant)


def test_an_llm_turn_records_the_prompt_tokens_it_evaluated() -> None:
    stats = {"prompt_tokens": 110, "reused_tokens": 77, "prefill_s": 1.2345, "threads_batch": 2,
             "threads_quiet": [1, 2], "threads": 1}
    assert llm_record(stats) == {"threads_batch": 2, "threads_quiet": [1, 2], "threads": 1,
                                 "prompt_tokens_evaluated": 33, "prefill_ms": 1234.5}
    assert llm_record({}) == {"threads_batch": None, "threads_quiet": None, "threads": None}
