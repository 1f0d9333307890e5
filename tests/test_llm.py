"""The llama engine with the real portable GGUF model (skipped with a reason when it is absent)."""

from __future__ import annotations

import dataclasses
import os
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from rkvoice.answer.conversation import Conversation
from rkvoice.answer.llm.base import model_path
from rkvoice.config import Config, LlmConfig
from rkvoice.errors import RkvoiceError

pytest.importorskip("cyllama", reason="cyllama (llama.cpp) is not installed: pip install cyllama==0.2.18")

from rkvoice.answer.llm import llama as llama_module
from rkvoice.answer.llm.llama import LlamaEngine, OwnCpu, thread_counts, usable_cores

# Short answers keep this fast on a busy 2-core machine; 1 generating thread (what auto gives on 2
# cores) avoids llama's spin barriers; the prompt threads follow the load (threads_batch auto).
CFG = Config(llm=dataclasses.replace(LlmConfig(), max_tokens=12, threads=1, context=512))
MODEL = model_path(CFG, "llama")


@pytest.fixture(scope="module")
def engine() -> LlamaEngine:
    if not MODEL.is_file():
        pytest.skip(f"portable LLM model {MODEL} is not installed (./install.sh downloads it)")
    eng = LlamaEngine(CFG)
    eng.load()
    return eng


MESSAGES = [{"role": "system", "content": "你是小智，用简体中文简短回答。"},
            {"role": "user", "content": "用一句话介绍一下月亮。"}]


def test_streams_chinese_text_deltas(engine: LlamaEngine) -> None:
    deltas = list(engine.stream(MESSAGES))
    text = "".join(deltas)
    assert len(deltas) >= 3, deltas
    assert any("\u4e00" <= c <= "\u9fff" for c in text), text
    assert "\ufffd" not in text
    assert engine.last_stats["new_tokens"] <= 12
    assert "<|im_end|>" not in text and "<|im_start|>" not in text


def test_prompt_uses_the_models_chat_template(engine: LlamaEngine) -> None:
    prompt = engine.prompt(MESSAGES)
    assert prompt.startswith("<|im_start|>system\n你是小智")
    assert prompt.endswith("<|im_start|>assistant\n")


def test_abort_from_another_thread(engine: LlamaEngine) -> None:
    long_cfg = dataclasses.replace(CFG, llm=dataclasses.replace(CFG.llm, max_tokens=400))
    engine.cfg = long_cfg
    try:
        got: list[str] = []
        first = threading.Event()

        def consume() -> None:
            for d in engine.stream([{"role": "user", "content": "请详细讲一个很长很长的故事。"}]):
                got.append(d)
                first.set()

        t = threading.Thread(target=consume)
        t.start()
        assert first.wait(120), "no token within 120 s"
        engine.abort()
        t.join(60)
        assert not t.is_alive(), "abort did not stop generation"
        assert engine.last_stats["new_tokens"] < 60
    finally:
        engine.cfg = CFG
    # usable again after an abort
    assert "".join(engine.stream(MESSAGES))


def test_stream_while_busy_is_refused(engine: LlamaEngine) -> None:
    gen = engine.stream(MESSAGES)
    next(gen)
    with pytest.raises(RkvoiceError, match="already generating"):
        next(engine.stream(MESSAGES))
    gen.close()


def test_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    eng = LlamaEngine(CFG, model=tmp_path / "none.gguf")
    with pytest.raises(RkvoiceError, match="not found.*install.sh"):
        eng.load()


def test_prompt_too_long_is_a_clear_error(engine: LlamaEngine) -> None:
    with pytest.raises(RkvoiceError, match="llm.context"):
        list(engine.stream([{"role": "user", "content": "月亮" * 600}]))


def test_prompt_prefix_is_reused_and_gives_the_same_answer(engine: LlamaEngine) -> None:
    short = "你是小智，用简体中文简短回答。"  # a short system prompt keeps the first turn quick
    greedy = dataclasses.replace(CFG, llm=dataclasses.replace(CFG.llm, temperature=0.0, max_tokens=6,
                                                              system_prompt=short))
    engine.cfg = greedy
    try:
        engine._kv = []  # start from an empty cache
        engine.ctx.kv_cache_clear()
        fresh = "".join(engine.stream(MESSAGES))
        assert engine.last_stats["reused_tokens"] == 0
        again = "".join(engine.stream(MESSAGES))
        stats = engine.last_stats
        assert stats["reused_tokens"] == stats["prompt_tokens"] - 1
        assert again == fresh
        follow = [*MESSAGES, {"role": "assistant", "content": fresh}, {"role": "user", "content": "再说一遍"}]
        "".join(engine.stream(follow))
        assert engine.last_stats["reused_tokens"] >= stats["prompt_tokens"] - 1
    finally:
        engine.cfg = CFG


def test_prime_computes_the_system_prompt_ahead(engine: LlamaEngine) -> None:
    engine._kv = []
    engine.ctx.kv_cache_clear()
    engine.prime(MESSAGES[:1])
    n_system = len(engine._kv)
    assert n_system > 5
    "".join(engine.stream(MESSAGES))
    assert engine.last_stats["reused_tokens"] >= n_system - 3  # all but the generation prompt


def test_close_frees_and_load_again_works() -> None:
    if not MODEL.is_file():
        pytest.skip(f"portable LLM model {MODEL} is not installed (./install.sh downloads it)")
    eng = LlamaEngine(CFG)
    eng.load()
    eng.close()
    assert eng.model is None
    with pytest.raises(RkvoiceError, match="before load"):
        list(eng.stream(MESSAGES))
    eng.load()
    assert "".join(eng.stream(MESSAGES))
    eng.close()


def test_thread_counts_auto_and_fixed() -> None:
    auto = LlmConfig()
    assert (auto.threads, auto.threads_batch) == ("auto", "auto")
    assert thread_counts(auto, cores=2, load=0.3) == (1, 2)  # generation leaves the TTS thread a core
    assert thread_counts(auto, cores=2, load=1.2) == (1, 1)  # the prompt only on free cores
    assert thread_counts(auto, cores=2, load=6.0) == (1, 1)
    assert thread_counts(auto, cores=1, load=0.0) == (1, 1)
    assert thread_counts(auto, cores=8, load=2.9) == (7, 6)
    fixed = dataclasses.replace(auto, threads=3, threads_batch=1)
    assert thread_counts(fixed, cores=2, load=0.0) == thread_counts(fixed, cores=2, load=9.0) == (3, 1)
    assert usable_cores() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("load", [0.0, 64.0])
def test_each_answer_sets_the_prompt_threads_for_the_load_now(engine: LlamaEngine, load: float,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_module.os, "getloadavg", lambda: (load, load, load))
    "".join(engine.stream(MESSAGES))
    want = (1, usable_cores() if load == 0 else 1)
    assert (engine.last_stats["threads"], engine.last_stats["threads_batch"]) == want
    assert (engine.ctx.n_threads(), engine.ctx.n_threads_batch()) == want


def test_the_next_turn_evaluates_only_the_new_question(engine: LlamaEngine) -> None:
    """The time moved out of the system prompt: a later minute still reuses the whole last turn."""
    short = "你是小智，用简体中文简短回答。"  # a short system prompt keeps the first turn quick
    greedy = dataclasses.replace(CFG, llm=dataclasses.replace(CFG.llm, temperature=0.0, max_tokens=6,
                                                              system_prompt=short))
    engine.cfg = greedy
    clock = [datetime(2026, 10, 21, 22, 5)]
    conv = Conversation(greedy, lambda: clock[0])
    try:
        engine.reset_cache()
        answer = "".join(engine.stream(conv.messages("用一句话介绍一下月亮。")))
        first = dict(engine.last_stats)
        conv.remember("用一句话介绍一下月亮。", answer)
        clock[0] += timedelta(minutes=3)
        engine.ctx.synchronize()  # llama.cpp counts a decode when its result is waited for
        engine.ctx.reset_perf_data()
        "".join(engine.stream(conv.messages("那太阳呢？")))
        second = engine.last_stats
        evaluated = engine.ctx.get_perf_data()["n_p_eval"]  # prompt tokens llama.cpp computed
    finally:
        engine.cfg = CFG
    assert second["reused_tokens"] >= first["prompt_tokens"] + first["new_tokens"] - 2  # question and answer
    assert evaluated == second["prompt_tokens"] - second["reused_tokens"]
    assert evaluated < 40 < second["prompt_tokens"]


def test_own_cpu_is_the_cores_this_process_used_in_the_last_minute() -> None:
    clock = {"wall": 100.0, "cpu": 5.0}
    own = OwnCpu(wall=lambda: clock["wall"], cpu=lambda: clock["cpu"])
    assert own.cores_used() == 0.0  # under a second since the first sample: nothing to tell
    clock["wall"], clock["cpu"] = 110.0, 20.0  # 15 s of CPU in 10 s: 1.5 cores
    assert own.cores_used() == pytest.approx(1.5)
    clock["wall"], clock["cpu"] = 200.0, 20.0  # idle for 90 s: the busy stretch has left the window
    assert own.cores_used() == pytest.approx(0.0)
    clock["wall"], clock["cpu"] = 230.0, 50.0
    assert own.cores_used() == pytest.approx(1.0)


def test_auto_prompt_threads_leave_out_this_process_own_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import rkvoice.answer.llm.llama as llama

    auto = LlmConfig(threads="auto", threads_batch="auto")
    monkeypatch.setattr(llama.os, "getloadavg", lambda: (1.4, 1.0, 1.0))
    monkeypatch.setattr(llama._OWN_CPU, "cores_used", lambda: 1.2)  # the load is the assistant's own
    assert thread_counts(auto, cores=2) == (1, 2)
    monkeypatch.setattr(llama._OWN_CPU, "cores_used", lambda: 0.1)  # another process holds a core
    assert thread_counts(auto, cores=2) == (1, 1)
