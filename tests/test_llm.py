"""The llama engine with the real portable GGUF model (skipped with a reason when it is absent)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from rkvoice.answer.conversation import Conversation
from rkvoice.answer.llm.base import model_path
from rkvoice.config import Config, LlmConfig
from rkvoice.errors import RkvoiceError

pytest.importorskip("cyllama", reason="cyllama (llama.cpp) is not installed: pip install cyllama==0.2.18")

from rkvoice.answer.llm import cores as cores_module
from rkvoice.answer.llm.cores import CpuWindow, FreeCores, busy_elsewhere, thread_counts, usable_cores
from rkvoice.answer.llm.llama import LlamaEngine

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


def test_every_decode_runs_on_the_engines_one_thread(engine: LlamaEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prime on this thread and answers streamed from two others all decode on one thread: libgomp
    keeps a team per calling thread, and more threads than cores throttle every barrier's spin."""
    seen: set[str] = set()
    real = engine.ll.llama_batch_get_one

    def batch(tokens: list[int], pos: int) -> object:
        seen.add(threading.current_thread().name)
        return real(tokens, pos)

    monkeypatch.setattr(engine.ll, "llama_batch_get_one", batch)  # the bindings' module, restored after
    engine.prime(MESSAGES[:1])
    for _ in range(2):
        answer: list[str] = []
        t = threading.Thread(target=lambda out=answer: out.append("".join(engine.stream(MESSAGES))))
        t.start()
        t.join(120)
        assert answer and answer[0]
    assert len(seen) == 1 and seen.pop().startswith("rkvoice-llama"), seen


def test_close_ends_the_decoding_thread() -> None:
    if not MODEL.is_file():
        pytest.skip(f"portable LLM model {MODEL} is not installed (./install.sh downloads it)")

    def decoding() -> int:
        return sum(t.name.startswith("rkvoice-llama") for t in threading.enumerate())

    before = decoding()
    eng = LlamaEngine(CFG)
    eng.load()
    eng.prime(MESSAGES[:1])
    assert decoding() == before + 1
    eng.close()
    assert decoding() == before  # a reload (SIGHUP) leaves no thread, nor libgomp team, behind


def test_thread_counts_auto_and_fixed() -> None:
    auto = LlmConfig()
    assert (auto.threads, auto.threads_batch) == ("auto", "auto")
    # (before speech, while speaking, prompt): every free core until the voice starts, then one less
    assert thread_counts(auto, cores=2, busy=0.0)[:3] == (2, 1, 2)
    assert thread_counts(auto, cores=2, busy=1.0)[:3] == (1, 1, 1)  # another process holds a core now
    assert thread_counts(auto, cores=2, busy=6.0)[:3] == (1, 1, 1)
    assert thread_counts(auto, cores=1, busy=0.0)[:3] == (1, 1, 1)
    assert thread_counts(auto, cores=8, busy=2.4)[:3] == (6, 6, 6)
    assert thread_counts(auto, cores=8, busy=0.0)[:3] == (8, 7, 8)
    fixed = dataclasses.replace(auto, threads=3, threads_batch=1)
    assert thread_counts(fixed, cores=2, busy=0.0) == thread_counts(fixed, cores=2, busy=9.0) == (3, 3, 1, False)
    assert thread_counts(auto, cores=2, busy=0.0).follow  # auto generation follows the machine per token
    assert usable_cores() == len(os.sched_getaffinity(0))


def _fake_proc(root: Path, running: int, own_states: str) -> Path:
    tasks = root / "self" / "task"
    tasks.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  1 2 3 4\nintr 5 6\nprocs_running {running}\nprocs_blocked 0\n")
    for old in tasks.iterdir():
        (old / "stat").unlink()
        old.rmdir()
    for i, state in enumerate(own_states):
        (tasks / str(100 + i)).mkdir()
        (tasks / str(100 + i) / "stat").write_text(f"{100 + i} (py (x) {i}) {state} 1 2 3\n")
    return root


def test_busy_elsewhere_counts_other_processes_runnable_now(tmp_path: Path) -> None:
    """The kernel's running count less this process's own running threads (a name with ") " in it
    does not fool the state field), the median of the samples."""
    proc = _fake_proc(tmp_path, running=3, own_states="RSS")
    assert busy_elsewhere(proc, samples=3, sleep=lambda _s: None) == 2.0
    _fake_proc(tmp_path, running=2, own_states="RRS")
    assert busy_elsewhere(proc, samples=3, sleep=lambda _s: None) == 0.0
    readings = iter([(4, "R"), (1, "R")])  # a moment's spike among three samples is outvoted

    def next_reading(_s: float) -> None:
        running, own = next(readings)
        _fake_proc(tmp_path, running, own)

    _fake_proc(tmp_path, 1, "R")
    assert busy_elsewhere(proc, samples=3, sleep=next_reading) == 0.0
    assert busy_elsewhere(tmp_path / "absent") == 0.0  # no /proc: every core counts as free
    assert busy_elsewhere() >= 0.0  # the real /proc reads


def test_busy_elsewhere_does_not_count_its_own_thread_that_just_slept(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One of ours running when the kernel counted but asleep when its state is read (llama's threads
    between barriers) is still ours: read before and after the count, either sighting counts."""
    proc = _fake_proc(tmp_path, running=1, own_states="S")
    for sightings in ([1, 0], [0, 1]):  # seen running before the count and not after, and the reverse
        own = iter(sightings)
        monkeypatch.setattr(cores_module, "_own_running", lambda _tasks, own=own: next(own))
        assert busy_elsewhere(proc, samples=1) == 0.0, sightings


def test_cpu_window_keeps_its_span_when_read_before_every_token(tmp_path: Path) -> None:
    """Readings many times a period (before every token) do not push the older samples out: the window
    still spans the last second and says what other processes used over it."""
    (tmp_path / "self").mkdir()
    now = [0.0]

    def at(t: float, busy: int) -> None:
        now[0] = t
        (tmp_path / "stat").write_text(f"cpu  {busy} 0 0 1000 0 0 0 0 0 0\n")
        (tmp_path / "self" / "stat").write_text(f"7 (py) S {' '.join(['1'] * 10)} 0 0 0 0\n")

    window = cpu_window(tmp_path, now)
    for i in range(5):  # the watcher's samples, a period apart: one core busy elsewhere
        at(i * 0.25, i * 25)
        window.sample()
    for k in range(1, 41):  # 40 tokens 25 ms apart, each reading the window
        at(1.0 + k * 0.025, 100 + round(k * 2.5))
        got = window.others()
        assert got is not None and got == pytest.approx(1.0, abs=0.1), (k, got)


def test_free_cores_follow_other_work_token_by_token() -> None:
    """A process runnable at three snapshots in a row takes a thread away at the next token, and gives
    it back as soon as one snapshot misses it; until three snapshots exist the decision made before
    the prompt holds."""
    readings = iter([0, 0, 1, 1, 1, 1, 0, 0, 3, 3, 3])
    free = FreeCores(cores=2, start=2, snapshot=lambda: float(next(readings)), window=lambda: 0.15)
    assert [free.threads() for _ in range(11)] == [2, 2, 2, 2, 1, 1, 2, 2, 2, 2, 1]
    held = FreeCores(cores=2, start=1, snapshot=lambda: 0.0, window=lambda: 0.0)
    assert [held.threads() for _ in range(4)] == [1, 1, 2, 2]


def test_free_cores_ignore_a_snapshot_that_sees_a_process_every_other_token() -> None:
    """The daemon's snapshots between tokens counted a runnable thread that was nobody's in 30-55 % of
    readings, often every other token: that never takes the second thread away (the median of three
    did, in 4 of 6 answers), even with the window above its confirming level."""
    phantoms = iter([1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0] * 3)
    free = FreeCores(cores=2, start=2, snapshot=lambda: float(next(phantoms)), window=lambda: 0.15)
    assert {free.threads() for _ in range(36)} == {2}


def test_free_cores_need_the_cpu_window_to_confirm_three_snapshots() -> None:
    """Runs of phantom snapshots (four in a row seen in the daemon) take no thread while the window
    says no other process used CPU; the same snapshots beside a process using CPU do."""
    idle = FreeCores(cores=2, start=2, snapshot=lambda: 1.0, window=lambda: 0.0)
    assert {idle.threads() for _ in range(10)} == {2}
    busy = FreeCores(cores=2, start=2, snapshot=lambda: 1.0, window=lambda: 0.12)
    assert [busy.threads() for _ in range(4)] == [2, 2, 1, 1]
    unknown = FreeCores(cores=2, start=2, snapshot=lambda: 1.0, window=lambda: None)  # no window yet
    assert [unknown.threads() for _ in range(4)] == [2, 2, 1, 1]


def test_free_cores_take_a_thread_at_once_when_the_last_second_was_busy() -> None:
    """The CPU window (other processes' CPU time, which a phantom snapshot is not) needs no three in a row."""
    window = iter([0.0, 0.2, 0.9, 1.0])
    free = FreeCores(cores=2, start=2, snapshot=lambda: 0.0, window=lambda: next(window))
    assert [free.threads() for _ in range(4)] == [2, 2, 1, 1]


def test_cpu_window_is_other_processes_cpu_over_the_last_second(tmp_path: Path) -> None:
    """Machine CPU time less this process's own over the kept samples (ticks of 1/100 s); idle and
    I/O wait are not busy; None until two samples a period apart exist."""
    (tmp_path / "self").mkdir()
    now = [0.0]

    def at(t: float, machine: tuple[int, ...], own: tuple[int, int]) -> None:
        now[0] = t
        (tmp_path / "stat").write_text("cpu  " + " ".join(map(str, machine)) + " 0 0\ncpu0 1 2 3\n")
        (tmp_path / "self" / "stat").write_text(f"7 (py (x)) S {' '.join(['1'] * 10)} {own[0]} {own[1]} 0 0\n")

    window = cpu_window(tmp_path, now)
    at(0.0, (100, 0, 50, 1000, 7, 0, 0, 0), (30, 10))
    assert window.others() is None  # one sample: nothing to tell
    at(0.5, (150, 0, 60, 1050, 90, 0, 0, 0), (60, 15))  # +60 busy ticks, +35 own: 0.25 s of others in 0.5 s
    assert window.others() == pytest.approx(0.5)
    at(1.0, (150, 0, 60, 1150, 90, 0, 0, 0), (60, 15))  # idle since: the window (both ends kept) averages
    assert window.others() == pytest.approx(0.25)


def cpu_window(proc: Path, now: list[float]) -> CpuWindow:
    return CpuWindow(proc, period_s=0.25, keep=4, clock=lambda: now[0])


@pytest.mark.parametrize("busy", [0.0, 64.0])
def test_each_answer_sets_the_threads_for_the_cores_free_now(engine: LlamaEngine, busy: float,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores_module, "busy_elsewhere", lambda **_kw: busy)
    monkeypatch.setattr(cores_module.WINDOW, "others", lambda: None)  # only the snapshot decides here
    engine.cfg = dataclasses.replace(CFG, llm=dataclasses.replace(CFG.llm, threads="auto"))
    try:
        "".join(engine.stream(MESSAGES))
    finally:
        engine.cfg = CFG
    free = usable_cores() if busy == 0 else 1
    want = (free, free)  # nothing was spoken: every free core generated
    assert (engine.last_stats["threads"], engine.last_stats["threads_batch"]) == want
    assert (engine.ctx.n_threads(), engine.ctx.n_threads_batch()) == want


def test_generation_leaves_a_core_once_the_voice_speaks(engine: LlamaEngine,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores_module, "busy_elsewhere", lambda **_kw: 0.0)
    monkeypatch.setattr(cores_module.WINDOW, "others", lambda: None)
    monkeypatch.setattr(cores_module, "usable_cores", lambda: 2)
    engine.cfg = dataclasses.replace(CFG, llm=dataclasses.replace(CFG.llm, threads="auto"))
    seen = []
    try:
        for delta in engine.stream(MESSAGES):
            seen.append(engine.ctx.n_threads())
            if delta:
                engine.speaking()  # the first piece went to the voice
    finally:
        engine.cfg = CFG
    assert seen[0] == 2 and len(seen) >= 2 and set(seen[1:]) == {1}, seen
    assert engine.last_stats["threads_quiet"] == [2] and engine.last_stats["threads"] == 1
    assert engine.ctx.n_threads_batch() == 2


def test_the_next_turn_evaluates_only_the_new_question(engine: LlamaEngine) -> None:
    """The time moved out of the system prompt: a later minute still reuses the whole last turn."""
    short = "你是小智，用简体中文简短回答。"  # a short system prompt keeps the first turn quick
    greedy = dataclasses.replace(CFG, llm=dataclasses.replace(CFG.llm, temperature=0.0, max_tokens=6,
                                                              system_prompt=short))
    engine.cfg = greedy
    clock = [datetime(2026, 10, 21, 22, 5)]
    conv = Conversation(greedy, lambda: clock[0])
    try:
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



@pytest.mark.parametrize(("preset", "spin"), [({}, "20000"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "30000000000"),
                                             ({"GOMP_SPINCOUNT": "1000"}, "1000")])
def test_llama_threads_spin_briefly_at_their_barriers_unless_the_environment_says(preset: dict[str, str],
                                                                                   spin: str) -> None:
    """How long llama.cpp's own libgomp lets a waiting thread spin, as it reports when it loads
    (OMP_DISPLAY_ENV=VERBOSE; its default, with no policy set, is 300000 spins)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    env.update(preset)
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, "-c", "import rkvoice.answer.llm.llama as m; m.native()"], cwd=root,
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    assert f"GOMP_SPINCOUNT = '{spin}'" in run.stderr


def test_importing_the_llm_engines_changes_no_environment_and_loads_no_libgomp() -> None:
    """GOMP_SPINCOUNT is set when the llama engine loads its bindings (native()), not on import."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    code = ("import os, rkvoice.answer.llm, rkvoice.answer.llm.llama, rkvoice.answer.llm.registry; "
            "print(sorted(k for k in os.environ if k.startswith('GOMP_')))")
    run = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == "[]" and "GOMP_SPINCOUNT" not in run.stderr  # libgomp did not load either
