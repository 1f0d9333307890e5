"""Overlap benchmark: first audio from the start of LLM generation, overlapped vs waiting for
the whole answer, in the same run (same models, same question, one after the other).

    py312/bin/python -m bench.overlap [--question "给我讲一个关于月亮的小故事"] [--png overlap.png]
                                      [--set llm.threads=1] [--tts fastspeech2]

- overlapped: deltas -> StreamChunker -> speaker while the LLM generates (the product path);
- wait_full: the naive way, collect the whole answer, then hand it to the same speaker.
Both play into the paced null sink (real time). Prints one JSON object and draws the
overlapped turn's timeline (LLM deltas, synthesis, playback) above the naive one as a PNG.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.llm.base import LlmEngine
from rkvoice.answer.respond import Answerer
from rkvoice.clock import MonotonicClock
from rkvoice.config import load_config, parse_override
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.speaker import Speaker
from rkvoice.timeline import Event, Timeline
from rkvoice.tts.registry import create_tts
from rkvoice.turn import Turn
from tests.support import bench_run
from tests.support.sink import sink_speaker


def forget_prompt(engine: Any) -> None:
    """A llama engine's cached prompt is forgotten (bench/llm_threads.reset_cache); other engines keep none."""
    if getattr(engine, "name", "") == "llama":
        from bench.llm_threads import reset_cache

        reset_cache(engine)


class RecordingLlm(LlmEngine):
    """Wraps an engine and records the clock time of every delta (for the plot)."""

    def __init__(self, engine: Any, clock: MonotonicClock) -> None:
        self.engine = engine
        self.clock = clock
        self.name = getattr(engine, "name", "llm")
        self.deltas: list[tuple[float, str]] = []

    def load(self) -> None:
        self.engine.load()

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        self.deltas = []
        for d in self.engine.stream(messages):
            self.deltas.append((self.clock.now(), d))
            yield d

    def abort(self) -> None:
        self.engine.abort()


def first(events: list[Event], name: str) -> float | None:
    return next((e.t_ms for e in events if e.name == name), None)


def turn_figures(tl: Timeline, t_llm_start: float, t_llm_done: float) -> dict[str, Any]:
    ev = tl.events
    audio = first(ev, "audio_first")
    s = tl.summary()
    return {
        "first_audio_from_llm_start_ms": None if audio is None else round(audio - t_llm_start, 1),
        "llm_done_from_llm_start_ms": round(t_llm_done - t_llm_start, 1),
        "audio_first_before_llm_done": audio is not None and audio < t_llm_done,
        "max_gap_ms": s.get("max_gap_ms"),
        "chunks": s.get("chunks"),
        "synth_ms": s.get("synth_ms"),
        "audio_s": s.get("audio_s"),
        "total_ms_from_llm_start": None if first(ev, "play_end") is None
        else round(first(ev, "play_end") - t_llm_start, 1),  # type: ignore[operator]
    }


def run_overlapped(answerer: Answerer, question: str, clock: MonotonicClock) -> tuple[Timeline, dict[str, Any]]:
    tl = Timeline(clock)
    tl.start()
    turn = Turn(tl, text=question)
    turn.finish(answerer.respond(turn))
    start, done = first(tl.events, "llm_start"), first(tl.events, "llm_done")
    if start is None or done is None:
        raise RkvoiceError(Stage.LLM, "not-llm", f"{question!r} was answered by {turn.route}, not the LLM")
    fig = turn_figures(tl, start, done)
    fig["answer"] = turn.result
    fig["llm_first_token_from_llm_start_ms"] = round(first(tl.events, "llm_first_token") - start, 1)  # type: ignore[operator]
    return tl, fig


def run_wait_full(assistant: Assistant, speaker: Speaker, question: str,
                  clock: MonotonicClock) -> tuple[Timeline, dict[str, Any]]:
    tl = Timeline(clock)
    tl.start()
    reply = assistant.reply(question, Turn(tl))
    text = "".join(reply.deltas)  # wait for the whole answer
    start, done = first(tl.events, "llm_start"), first(tl.events, "llm_done")
    assert start is not None and done is not None
    turn = speaker.speak(text, tl)
    speaker.wait(turn)
    fig = turn_figures(tl, start, done)
    fig["answer"] = text
    return tl, fig


def coalescing(tts: Any, chunks: list[str], limit: int, repeats: int = 3) -> dict[str, Any]:
    """Synthesis time of consecutive pieces one call each vs merged into calls of <= ``limit`` chars.

    Measures what merging queued pieces of one turn would save (best of ``repeats`` runs each).
    """
    groups: list[list[str]] = []
    for c in chunks:
        if groups and sum(map(len, groups[-1])) + len(c) <= limit:
            groups[-1].append(c)
        else:
            groups.append([c])

    def best(texts: list[str]) -> tuple[float, float]:
        times, audio = [], 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            audio = 0.0
            for text in texts:
                samples, rate = tts.generate(text)
                audio += len(samples) / rate
            times.append(time.perf_counter() - t)
        return min(times) * 1000, audio

    sep_ms, sep_audio = best(chunks)
    merged_ms, merged_audio = best(["".join(g) for g in groups])
    return {"pieces": len(chunks), "calls_merged": len(groups), "limit_chars": limit,
            "separate_ms": round(sep_ms, 1), "merged_ms": round(merged_ms, 1),
            "separate_audio_s": round(sep_audio, 2), "merged_audio_s": round(merged_audio, 2),
            "saved_pct": round(100 * (sep_ms - merged_ms) / sep_ms, 1) if sep_ms else None}


def llm_speed(cfg: Any, threads: list[int], question: str) -> list[dict[str, Any]]:
    """The LLM alone per thread count: first token from a fresh and from a cached prompt, tokens/s."""
    import dataclasses

    from rkvoice.answer.llm.registry import create_llm

    out = []
    msgs = [{"role": "system", "content": "你是小智，一个中文语音助手。"}, {"role": "user", "content": question}]
    for n in threads:
        c = dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, threads=n, max_tokens=60))
        eng = create_llm(c)
        eng.load()
        row: dict[str, Any] = {"threads": n}
        for label in ("fresh", "cached_prompt"):
            t = time.monotonic()
            first_s = None
            for _ in eng.stream(msgs):
                if first_s is None:
                    first_s = time.monotonic() - t
            st = getattr(eng, "last_stats", {})
            gen_s = st.get("total_s", 0) - st.get("prefill_s", 0)
            row[label] = {"first_token_ms": round((first_s or 0) * 1000, 1),
                          "tokens_per_s": round(st.get("new_tokens", 0) / gen_s, 1) if gen_s > 0 else None,
                          "reused_tokens": st.get("reused_tokens")}
        out.append(row)
        del eng
    return out


def draw(png: Path, runs: list[tuple[str, Timeline, list[tuple[float, str]]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 2.6 * len(runs)), sharex=True)
    for ax, (title, tl, deltas) in zip(axes, runs):
        ev = tl.events
        t0 = first(ev, "llm_start") or 0.0
        t_done = first(ev, "llm_done") or t0
        ax.barh(2, (t_done - t0) / 1000, left=0, height=0.5, color="#9ecae1", label="LLM generating")
        wall0 = deltas[0][0] * 1000 - (first(ev, "llm_first_token") or t0) if deltas else 0.0
        for t, _ in deltas:
            ax.plot([(t * 1000 - wall0 - t0) / 1000] * 2, [1.75, 2.25], color="#08519c", lw=0.6)
        starts = {e.get("index"): e.t_ms for e in ev if e.name == "synth_start"}
        dry: float | None = None  # when everything handed to the player so far has been heard
        for e in ev:
            if e.name == "synth_end":
                s = starts[e.get("index")]
                ax.barh(1, (e.t_ms - s) / 1000, left=(s - t0) / 1000, height=0.5, color="#fd8d3c")
            if e.name == "play_chunk":  # handed to a real-time player: heard from max(handed, dry)
                heard = e.t_ms if dry is None else max(e.t_ms, dry)
                dry = heard + e.get("audio_s") * 1000
                ax.barh(0, e.get("audio_s"), left=(heard - t0) / 1000, height=0.5, color="#74c476",
                        edgecolor="white")
        af = first(ev, "audio_first")
        if af is not None:
            ax.axvline((af - t0) / 1000, color="red", ls="--", lw=1)
            ax.text((af - t0) / 1000, 2.5, f" first audio {(af - t0) / 1000:.2f} s", color="red", fontsize=8)
        ax.set_yticks([0, 1, 2], ["playback", "synthesis", "LLM tokens"])
        ax.set_ylim(-0.5, 2.9)
        ax.set_title(title, fontsize=10)
    axes[-1].set_xlabel("seconds from the start of generation")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--question", default="给我讲一个关于月亮的小故事")
    ap.add_argument("--png", default="overlap.png")
    ap.add_argument("--tts", default=None, help="TTS engine (default: tts.engine)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--compare-threads", metavar="N,M", help="also time the LLM alone with these thread counts")
    args, run_info = bench_run("overlap", ap)
    # a fixed sampling seed: both runs speak the same answer (override with --set llm.seed=-1)
    cfg = load_config([{"llm": {"seed": 1234}}, *(parse_override(s) for s in args.set)])
    clock = MonotonicClock()
    tts = create_tts(cfg, args.tts, args.question)
    tts.load()
    asked_at = datetime.now().astimezone()  # one "now" for both runs: the same prompt
    assistant = Assistant(cfg, clock, now=lambda: asked_at)
    llm = RecordingLlm(assistant.llm, clock)
    assistant._llm = llm  # record delta times
    t = time.monotonic()
    llm.load()
    load_s = time.monotonic() - t
    forget_prompt(llm.engine)
    with sink_speaker(tts, cfg, clock, drain=False) as speaker:  # played at the listener's pace
        answerer = Answerer(assistant, speaker, cfg)
        tl_o, over = run_overlapped(answerer, args.question, clock)
        deltas_o = list(llm.deltas)
        assistant.conversation.history.clear()  # same prompt for the second run
        forget_prompt(llm.engine)  # computed from scratch like the first run: same seed -> same answer
        tl_w, wait = run_wait_full(assistant, speaker, args.question, clock)
        deltas_w = list(llm.deltas)
    for fig_, deltas in ((over, deltas_o), (wait, deltas_w)):
        gen_s = deltas[-1][0] - deltas[0][0] if len(deltas) > 1 else 0.0
        fig_["llm_chars_per_s"] = round(len(fig_["answer"]) / gen_s, 2) if gen_s > 0 else None
        fig_["speech_chars_per_s"] = round(len(fig_["answer"]) / fig_["audio_s"], 2) if fig_["audio_s"] else None
    chunks = [e.get("text") for e in tl_o.events if e.name == "chunk"]
    coalesce = coalescing(tts, chunks, cfg.tts.chunk_chars * 2) if len(chunks) > 1 else None
    result = {
        "question": args.question,
        "llm": llm.name,
        "llm_threads": cfg.llm.threads,
        "llm_load_s": round(load_s, 2),
        "tts": getattr(tts, "name", "tts"),
        "overlapped": over,
        "wait_full": wait,
        "same_answer": over["answer"] == wait["answer"],
        "first_audio_saved_ms": None if over["first_audio_from_llm_start_ms"] is None
        else round(wait["first_audio_from_llm_start_ms"] - over["first_audio_from_llm_start_ms"], 1),
        "png": str(Path(args.png).resolve()),
        "coalescing": coalesce,
    }
    if args.compare_threads:
        result["llm_alone"] = llm_speed(cfg, [int(x) for x in args.compare_threads.split(",")], args.question)
    draw(Path(args.png), [("overlapped: pieces spoken while the LLM generates", tl_o, deltas_o),
                          ("naive: wait for the whole answer, then speak", tl_w, deltas_w)])
    run_info.emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
