"""TTS latency benchmark: first audio with the pipelined speaker vs synthesising the whole text.

    py312/bin/python -m bench.tts_latency [--runs 5] [--threads 1,2] [--first 12,24]

For every installed engine and thread count, the same text is spoken two ways, runs
interleaved so both see the same machine load:

- chunked: the Speaker (first piece <= FIRST characters, later <= tts.chunk_chars), first
  audio = text_ready -> first PCM handed to the player; also the largest gap a real-time
  listener would hear (audio-time accounting, see rkvoice.timeline);
- whole: one engine call on the whole text, then post-processing; first audio = when that
  finishes (the naive way).

RTF = whole-text synthesis seconds / audio seconds. Medians over the runs, raw values too.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rkvoice.audio.post import prepare_piece
from rkvoice.config import Config, load_config
from rkvoice.errors import RkvoiceError
from rkvoice.text.normalize import speakable
from rkvoice.tts.registry import create_tts, engine_languages
from tests.support import bench_run, median
from tests.support.sink import sink_speaker, speak_through

TEXTS = {
    "zh": "今天天气不错，我们出去走走吧。公园里的花都开了，空气也很新鲜。记得带上水和帽子。",
    "en": "The weather is nice today, so let's go for a walk. The flowers in the park are out, "
          "and the air is fresh. Remember to bring water and a hat.",
}


def chunked_run(engine: Any, cfg: Config, text: str) -> dict[str, float]:
    # The player drains at once (its own FakeClock), so the run doesn't wait for playback; gaps come
    # from the timeline's audio-time accounting on the real clock.
    with sink_speaker(engine, cfg) as speaker:
        s = speak_through(speaker, text).summary()
    return {"first_audio_ms": s["first_audio_ms"], "max_gap_ms": s["max_gap_ms"], "chunks": s["chunks"]}


def whole_run(engine: Any, cfg: Config, text: str) -> dict[str, float]:
    block = cfg.audio.output_rate * cfg.audio.block_ms // 1000
    t0 = time.monotonic()
    samples, rate = engine.generate(speakable(text), sid=cfg.tts.sid, speed=cfg.tts.speed)
    t1 = time.monotonic()
    prepare_piece(samples, rate, cfg.audio.output_rate, block, cfg.audio.crossfade_ms)
    t2 = time.monotonic()
    audio_s = len(samples) / rate
    return {"first_audio_ms": (t2 - t0) * 1000.0, "synth_ms": (t1 - t0) * 1000.0, "audio_s": audio_s,
            "rtf": (t1 - t0) / audio_s if audio_s else float("nan")}


def bench_engine(name: str, lang: str, threads: int, firsts: list[int], runs: int) -> dict[str, Any]:
    text = TEXTS[lang]
    base = load_config([{"tts": {"threads": threads}}])
    engine = create_tts(base, name, text)
    t0 = time.monotonic()
    engine.load()
    load_ms = (time.monotonic() - t0) * 1000.0
    cfgs = {f: load_config([{"tts": {"threads": threads, "first_chars": f}}]) for f in firsts}
    whole: list[dict[str, float]] = []
    chunked: dict[int, list[dict[str, float]]] = {f: [] for f in firsts}
    for _ in range(runs):
        whole.append(whole_run(engine, base, text))
        for f in firsts:
            chunked[f].append(chunked_run(engine, cfgs[f], text))
    out: dict[str, Any] = {
        "language": lang,
        "text_chars": len(text),
        "load_ms": round(load_ms, 1),
        "audio_s": round(whole[0]["audio_s"], 3),
        "rtf": median([r["rtf"] for r in whole], 4),
        "whole": {
            "first_audio_ms": median([r["first_audio_ms"] for r in whole], 2),
            "synth_ms": median([r["synth_ms"] for r in whole], 2),
            "raw_first_audio_ms": [round(r["first_audio_ms"], 1) for r in whole],
        },
        "chunked": {},
    }
    for f in firsts:
        rs = chunked[f]
        fa = median([r["first_audio_ms"] for r in rs], 2)
        out["chunked"][f"first_chars_{f}"] = {
            "chunks": rs[0]["chunks"],
            "first_audio_ms": fa,
            "first_audio_vs_whole": round(fa / out["whole"]["first_audio_ms"], 3),
            "max_gap_ms": max(r["max_gap_ms"] for r in rs),
            "raw_first_audio_ms": [round(r["first_audio_ms"], 1) for r in rs],
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--first", default="12,24", help="comma-separated first-piece limits (characters)")
    ap.add_argument("--engine", action="append", help="only these engines (default: every installed one)")
    args, run = bench_run("tts_latency", ap)
    threads = [int(t) for t in args.threads.split(",")]
    firsts = [int(f) for f in args.first.split(",")]
    installed = engine_languages(load_config())
    report: dict[str, Any] = {
        "runs": args.runs,
        "chunk_chars": Config().tts.chunk_chars,
        "engines": {},
    }
    for name, langs in sorted(installed.items()):
        if args.engine and name not in args.engine:
            continue
        lang = "zh" if "zh" in langs else langs[0]
        per: dict[str, Any] = {}
        for t in threads:
            try:
                per[f"threads_{t}"] = bench_engine(name, lang, t, firsts, args.runs)
            except RkvoiceError as err:
                per[f"threads_{t}"] = {"error": str(err)}
        report["engines"][name] = per
    run.emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
