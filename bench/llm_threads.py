"""LLM thread counts, before vs after, in one run: time to first token and end of speech -> first audio.

    py312/bin/python -m bench.llm_threads [--runs 5] [--replays 2] [--question "用一句话介绍一下长城。"]

- before: ``llm.threads=1``, ``llm.threads_batch=1`` (one thread for the prompt and for generation);
- after: the defaults, ``llm.threads: auto`` and ``llm.threads_batch: auto`` (the cores free now on the
  prompt and until the first piece is spoken, then cores - 1; decided per answer; ``threads_batch_used``);
- prompt_on_every_core: ``llm.threads_batch`` fixed at every usable core (what ``auto`` gives on an
  idle machine), to show what it costs when other work holds the cores.

Part 1 (in process, the portable llama engine, the configurations loaded side by side, greedy):
time from ``stream()`` to the first text delta, the median of ``--runs`` alternating runs, for the
product's first question (system prompt already computed at load, ``prime``) and for a cold cache
(the whole prompt); then, with after's threads, the next question a minute later with the time in
the system prompt (the layout before) vs in the question (prompt tokens evaluated, first token).
Part 2 (``--replays`` > 0): the question is synthesised to a WAV once, then
``assistant.py --file q.wav --no-play --metrics`` is run alternately with each configuration
(plus ``both_cores``: threads=2 while generating too, to show what generation on every core does
to the speech running alongside); the medians of the summaries' ``end_to_first_audio_ms``,
``first_audio_from_llm_start_ms`` and ``max_gap_ms`` (the longest silence inside the answer).
Prints one JSON object with both configurations' figures and the ratios after / before.
``--text-runs N`` instead runs only ``assistant.py --text`` back to back (after, before, N rounds):
LLM start -> first token and -> first audio, the bar's check on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rkvoice.answer.conversation import Conversation
from rkvoice.answer.llm.cores import thread_counts, usable_cores
from rkvoice.answer.llm.llama import LlamaEngine
from rkvoice.config import ROOT, Config, load_config, parse_override
from rkvoice.errors import RkvoiceError, Stage
from tests.support import LOAD_KEY, bench_run, load_avg_1m

BEFORE = ["llm.threads=1", "llm.threads_batch=1"]
VARIANTS = {"before": BEFORE, "after": [], "prompt_on_every_core": ["llm.threads=1", f"llm.threads_batch={usable_cores()}"],
            "both_cores": ["llm.threads=2", "llm.threads_batch=2"]}
FIRST_TOKEN_VARIANTS = ("before", "after", "prompt_on_every_core")
REPLAY_VARIANTS = ("before", "after", "both_cores")
NOW = datetime(2026, 10, 21, 10, 5)  # fixed: the same prompt tokens in every run


class _Now:
    """A settable wall clock for Conversation."""

    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> datetime:
        return self.t


def _cfg(sets: list[str]) -> Config:
    return load_config([parse_override(s) for s in sets])


def reset_cache(engine: LlamaEngine) -> None:
    """Forget the engine's cached prompt: the next answer is computed from scratch."""
    engine._kv = []
    engine.ctx.kv_cache_clear()


def first_token_s(engine: LlamaEngine, messages: list[dict[str, str]], primed: bool) -> tuple[float, int]:
    """Seconds from stream() to the first text delta from an empty cache (or the system prompt's),
    and the prompt tokens llama.cpp evaluated for it."""
    reset_cache(engine)
    if primed:
        engine.prime(messages[:1])
    return _timed_first_token(engine, messages)


def _timed_first_token(engine: LlamaEngine, messages: list[dict[str, str]]) -> tuple[float, int]:
    engine.ctx.synchronize()
    engine.ctx.reset_perf_data()
    t = time.perf_counter()
    gen = engine.stream(messages)
    try:
        next(gen)
        return time.perf_counter() - t, int(engine.ctx.get_perf_data()["n_p_eval"])
    finally:
        gen.close()


def part_first_token(question: str, runs: int) -> dict[str, Any]:
    engines: dict[str, LlamaEngine] = {}
    out: dict[str, Any] = {}
    for name in FIRST_TOKEN_VARIANTS:
        cfg = _cfg([*VARIANTS[name], "llm.temperature=0"])
        eng = LlamaEngine(cfg)
        eng.load()
        engines[name] = eng
        out[name] = {"threads_batch_used": []}
    messages = Conversation(engines["after"].cfg, lambda: NOW).messages(question)
    for case, primed in (("primed", True), ("cold", False)):
        times: dict[str, list[float]] = {n: [] for n in engines}
        for _ in range(runs):  # alternate, so both see the same load on a shared machine
            for name, eng in engines.items():
                seconds, evaluated = first_token_s(eng, messages, primed)
                times[name].append(seconds)
                out[name]["threads_batch_used"].append(eng.threads_batch)
                out[f"prompt_tokens_evaluated_{case}"] = evaluated
        for name in engines:
            out[name][f"first_token_{case}_s"] = [round(x, 3) for x in times[name]]
            out[name][f"first_token_{case}_median_s"] = round(statistics.median(times[name]), 3)
        for name in ("after", "prompt_on_every_core"):
            out[f"ratio_{case}_{name}_vs_before"] = round(out[name][f"first_token_{case}_median_s"]
                                                          / out["before"][f"first_token_{case}_median_s"], 3)
    out["next_turn"] = part_next_turn(engines["after"], question, min(runs, 3))
    for eng in engines.values():
        eng.close()
    return out


def part_next_turn(engine: LlamaEngine, question: str, runs: int) -> dict[str, Any]:
    """The second question a minute after the first: the time in the system prompt (the layout before)
    vs in the question (now), prompt tokens evaluated and time to first token (after's threads)."""
    old_prompt = engine.cfg.llm.system_prompt + "现在是{now}。"
    layouts = {"time_in_system_prompt": old_prompt, "time_in_question": engine.cfg.llm.system_prompt}
    got: dict[str, list[tuple[float, int]]] = {n: [] for n in layouts}
    cfg0 = engine.cfg
    try:
        for _ in range(runs):
            for name, prompt in layouts.items():
                engine.cfg = replace(cfg0, llm=replace(cfg0.llm, system_prompt=prompt, max_tokens=24))
                clock = _Now()
                conv = Conversation(engine.cfg, clock)
                reset_cache(engine)
                engine.prime(conv.messages(question)[:1])
                answer = "".join(engine.stream(conv.messages(question)))
                conv.remember(question, answer)
                clock.t = NOW + timedelta(minutes=1)
                got[name].append(_timed_first_token(engine, conv.messages("再说得详细一点。")))
    finally:
        engine.cfg = cfg0
    out: dict[str, Any] = {}
    for name, runs_ in got.items():
        out[name] = {"first_token_median_s": round(statistics.median(t for t, _ in runs_), 3),
                     "prompt_tokens_evaluated": runs_[-1][1]}
    out["ratio_first_token"] = round(out["time_in_question"]["first_token_median_s"]
                                     / out["time_in_system_prompt"]["first_token_median_s"], 3)
    return out


def _speak_question(question: str, wav: Path) -> None:
    cmd = [sys.executable, str(ROOT / "assistant.py"), "--say", question, "--out", str(wav), "--no-play"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)


def _replay(wav: Path | str, sets: list[str], metrics: Path, max_tokens: int) -> dict[str, Any]:
    """One ``assistant.py`` run on a spoken question (a WAV) or a typed one (``--text``, a str)."""
    extra = [*sets, f"llm.max_tokens={max_tokens}", "llm.temperature=0", "llm.timeout_s=600",
             "daemon.answer_first_timeout_s=600", "daemon.answer_gap_timeout_s=600"]
    source = ["--text", wav] if isinstance(wav, str) else ["--file", str(wav)]
    cmd = [sys.executable, str(ROOT / "assistant.py"), *source, "--no-play", "--metrics", str(metrics)]
    for s in extra:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if not metrics.is_file():
        raise RkvoiceError(Stage.LLM, "replay-failed", f"{' '.join(cmd)} wrote no metrics: {proc.stderr[-500:]}")
    summary: dict[str, Any] = json.loads(metrics.read_text(encoding="utf-8"))["summary"]
    metrics.unlink()
    if summary.get("route") != "llm" or summary.get("errors"):
        raise RkvoiceError(Stage.LLM, "not-llm", f"the replay was not a clean LLM answer: {summary}")
    return summary


def part_replay(question: str, replays: int, max_tokens: int) -> dict[str, Any]:
    keys = ("end_to_first_audio_ms", "first_audio_from_llm_start_ms", "asr_ms", "max_gap_ms")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "question.wav"
        _speak_question(question, wav)
        got: dict[str, list[dict[str, Any]]] = {n: [] for n in REPLAY_VARIANTS}
        for _ in range(replays):
            for name in REPLAY_VARIANTS:
                got[name].append(_replay(wav, VARIANTS[name], Path(tmp) / f"{name}.json", max_tokens))
    out: dict[str, Any] = {}
    for name, runs in got.items():
        out[name] = {f"{k}_median": statistics.median(float(r[k]) for r in runs) for k in keys}
        out[name]["runs"] = [{k: r.get(k) for k in (*keys, "transcript", "answer")} for r in runs]
    for k in ("end_to_first_audio_ms", "first_audio_from_llm_start_ms"):
        out[f"ratio_{k}"] = round(out["after"][f"{k}_median"] / out["before"][f"{k}_median"], 3)
    return out


def part_text(question: str, rounds: int, max_tokens: int) -> dict[str, Any]:
    """``assistant.py --text`` back to back, alternating after / before (each run a fresh process that
    loads the model, as the issue's bar runs it): LLM start -> first token and -> first audio."""
    got: dict[str, list[dict[str, float]]] = {"after": [], "before": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name in got:
                s = _replay(question, VARIANTS[name], Path(tmp) / f"{name}.json", max_tokens)
                got[name].append({"first_token_ms": round(s["llm_first_token_ms"] - s["llm_start_ms"], 1),
                                  "first_audio_from_llm_start_ms": s["first_audio_from_llm_start_ms"],
                                  LOAD_KEY: load_avg_1m()})
    out: dict[str, Any] = {name: {"runs": runs, **{f"{k}_median": statistics.median(r[k] for r in runs)
                                                   for k in ("first_token_ms", "first_audio_from_llm_start_ms")}}
                           for name, runs in got.items()}
    for k in ("first_token_ms", "first_audio_from_llm_start_ms"):
        out[f"ratio_{k}"] = round(out["after"][f"{k}_median"] / out["before"][f"{k}_median"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--question", default="用一句话介绍一下长城。")
    ap.add_argument("--runs", type=int, default=5, help="first-token runs per configuration (median)")
    ap.add_argument("--replays", type=int, default=2, help="assistant.py --file runs per configuration; 0: skip")
    ap.add_argument("--max-tokens", type=int, default=40, help="answer length in the replays")
    ap.add_argument("--text-runs", type=int, default=0,
                    help="only assistant.py --text, after then before, this many rounds back to back")
    args, run = bench_run("llm_threads", ap)
    if args.runs < 1 or args.replays < 0:
        raise SystemExit("--runs must be >= 1 and --replays >= 0")
    cores = usable_cores()
    if args.text_runs:
        run.emit({"question": args.question, "cores": cores,
                  "text": part_text(args.question, args.text_runs, args.max_tokens)})
        return 0
    result: dict[str, Any] = {
        "question": args.question,
        "cores": cores,
        "auto_threads": thread_counts(_cfg([]).llm, cores)._asdict(),
        "first_token": part_first_token(args.question, args.runs),
    }
    if args.replays:
        result["replay"] = part_replay(args.question, args.replays, args.max_tokens)
    run.emit(result, args.out)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RkvoiceError as err:
        print(err, file=sys.stderr)
        sys.exit(2)
