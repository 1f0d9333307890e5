#!/usr/bin/env python3
"""TTS engine speed: RTF and first-clause latency per installed engine at 1 and 2 threads (JSON).

    py312/bin/python -m bench.tts_engines [--repeat 3] [--threads 1 2] [--engines fastspeech2 vits]

For each engine and thread count: load time (not in the other figures), then, after warm-up,
the median over --repeat runs of
- ``first_clause_ms``: synthesis time of the first clause (what the pipelined speaker waits for
  before the first sound),
- ``whole_text_ms``: synthesis time of the whole paragraph in one call (the naive way's wait
  before the first sound), and
- ``rtf``: whole-text synthesis seconds / audio seconds.
``--spin`` adds fastspeech2 runs with onnxruntime's default spinning intra-op threads (the naive
setting) beside the engine's non-spinning ones. The machine's load average is printed with the figures: on a shared machine they are noisy.
"""

from __future__ import annotations

import argparse
import sys
import time

from rkvoice.config import load_config
from rkvoice.errors import RkvoiceError
from rkvoice.tts import fastspeech2
from rkvoice.tts.registry import create_tts
from tests.support import bench_run, median

TEXTS = {
    "zh": ("今天天气不错，我们出去走走吧。",
           "今天天气不错，我们出去走走吧。公园里的花都开了，空气也很新鲜。记得带上水和帽子。"),
    "en": ("The weather is nice today,",
           "The weather is nice today, let us go for a walk. The flowers in the park are in "
           "bloom and the air is fresh. Remember to bring water and a hat."),
}


def bench(engine_name: str, threads: int, repeat: int, spin: bool = False) -> dict:
    fastspeech2.ALLOW_SPINNING = spin
    cfg = load_config(overrides=[{"tts": {"threads": threads}}])
    lang = "en" if engine_name == "vits" else "zh"
    first, whole = TEXTS[lang]
    engine = create_tts(cfg, engine_name, whole)
    t0 = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - t0
    first_ms, whole_ms, rtfs, audio_s = [], [], [], 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        engine.generate(first)
        first_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        audio, rate = engine.generate(whole)
        dt = time.perf_counter() - t0
        audio_s = len(audio) / rate
        whole_ms.append(dt * 1000)
        rtfs.append(dt / audio_s)
    return {
        "engine": engine_name,
        "voice": getattr(getattr(engine, "voice", None), "name", engine_name),
        "threads": threads,
        "spinning": spin if engine_name == "fastspeech2" else None,
        "load_s": round(load_s, 2),
        "first_clause_ms": median(first_ms),
        "whole_text_ms": median(whole_ms),
        "rtf": median(rtfs, 4),
        "audio_s": round(audio_s, 2),
        "runs": repeat,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--engines", nargs="+", default=["fastspeech2", "vits"])
    parser.add_argument("--spin", action="store_true",
                        help="also run fastspeech2 with onnxruntime's default busy-waiting threads")
    args, run = bench_run("tts_engines", parser)
    results, skipped = [], {}
    for name in args.engines:
        for threads in args.threads:
            try:
                results.append(bench(name, threads, args.repeat))
                if args.spin and name == "fastspeech2" and threads > 1:
                    results.append(bench(name, threads, args.repeat, spin=True))
            except RkvoiceError as exc:
                skipped[name] = str(exc)
                break
    run.emit({"results": results, "skipped": skipped}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
