"""Mixed Chinese-English speech heard by the installed Whisper, on every portable ``--tts`` route,
with the other voice's pitch moved toward the main voice's and without (the join as it was).

    py312/bin/python -m bench.mixed_heard [--routes auto,fastspeech2,vits] [--broad]

For each route, in one run and on the same loaded voices: the ten sentences of
tests/fixtures/mixed_set.txt said the way the speaker says them (pieces; tests.support.spoken),
transcribed, CER per sentence and its mean; once with ``MAX_PITCH_SHIFT`` as shipped and once with
it at 1.0 (no shift). ``--broad`` adds the 40 sentences of bench/mixed_tts.py's BROAD: in how many
the English word is heard, each way. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.mixed_tts import BROAD
from rkvoice.audio.post import resample
from rkvoice.config import load_config
from rkvoice.hear.whisper_asr import WhisperAsr
from rkvoice.tts import mixed
from rkvoice.tts.registry import create_tts
from tests.support import bench_run, cer, median
from tests.support.spoken import MIXED_SET, spoken


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", default="auto,fastspeech2,vits")
    ap.add_argument("--broad", action="store_true", help="also the 40 BROAD sentences (English word heard or not)")
    args, run = bench_run("mixed_heard", ap)
    cfg = load_config()
    asr = WhisperAsr(cfg)
    asr.load()
    shipped = mixed.MAX_PITCH_SHIFT

    def hear(engine: Any, text: str) -> str:
        samples, rate = spoken(engine, cfg, text)
        return asr.transcribe(resample(samples, rate, 16000))

    report: dict[str, Any] = {"set": MIXED_SET, "max_pitch_shift": shipped, "routes": {}}
    for route in args.routes.split(","):
        engine = create_tts(cfg, route, MIXED_SET[0])
        engine.load()
        out: dict[str, Any] = {"voices": sorted({e.name for e in getattr(engine, "voices", {}).values()})}
        for label, shift in (("pitch_matched", shipped), ("unmatched", 1.0)):
            mixed.MAX_PITCH_SHIFT = shift
            getattr(engine, "_refs", {}).clear()  # measured again under this setting
            heard = [hear(engine, t) for t in MIXED_SET]
            scores = [cer(t, h, read_digits=False) for t, h in zip(MIXED_SET, heard, strict=True)]
            out[label] = {"mean_cer": round(sum(scores) / len(scores), 3), "median_cer": median(scores, 3),
                          "cer": [round(s, 3) for s in scores], "heard": heard}
            if args.broad:
                found = {t: w in hear(engine, t).lower().replace(" ", "") for t, w in BROAD.items()}
                out[label]["broad_words_heard"] = sum(found.values())
                out[label]["broad_of"] = len(found)
        mixed.MAX_PITCH_SHIFT = shipped
        out["ratio_mean_cer"] = round(out["pitch_matched"]["mean_cer"] / max(out["unmatched"]["mean_cer"], 1e-9), 3)
        report["routes"][route] = out
        if callable(close := getattr(engine, "close", None)):
            close()
    run.emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
