"""Wake recall and false wakes of asr-match on the wake test set, before and after the primed look.

    py312/bin/python -m bench.wake_recall [--quick] [--out .cache/wake_set]

Each clip of bench/wake_set.py is replayed through the real engine (silero VAD -> Whisper ->
pinyin match) twice: "before" is the plain decode alone (``short_s=0``, and the request's trailing
silence for every segment: the behaviour before the primed second look), "after" the shipped engine
(``short_s=SHORT_S``: a primed decode that must give the phrase whole, backed by the phrase's forced
log-probability; its phrase segmenter closes phrase-length speech after a short silence). Prints one JSON object:
recall on the wake-only positives, false-wake rate on the negatives, counts per condition, the
clips each variant got wrong with what was heard, spurious requests (a wake-only clip that came
back with a request), the decode cost of the second look, and the phrase scores it computed. Identical plain decodes are made
once and shared by both variants (same call, same input: same text).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import Config, load_config
from rkvoice.hear.sources import WavFileSource
from rkvoice.hear.vad import Segmenter
from rkvoice.hear.wake import SHORT_S, AsrMatchWake
from rkvoice.hear.whisper_asr import WhisperAsr
from tests.support import bench_run
from tests.support.wake_set import Clip, build, default_dir, spec


class SharedDecodes:
    """Wraps the loaded WhisperAsr: remembers plain decodes by input, times primed ones."""

    name = "whisper"

    def __init__(self, asr: WhisperAsr) -> None:
        self.asr = asr
        self._plain: dict[str, str] = {}
        self.primed_ms: list[float] = []
        self.plain_ms: list[float] = []
        self.scores: list[float] = []
        self.score_ms: list[float] = []

    def load(self) -> None:
        self.asr.load()

    def transcribe(self, samples: np.ndarray) -> str:
        key = hashlib.sha256(np.ascontiguousarray(samples, np.float32).tobytes()).hexdigest()
        if key not in self._plain:
            t0 = time.monotonic()
            self._plain[key] = self.asr.transcribe(samples)
            self.plain_ms.append((time.monotonic() - t0) * 1000.0)
        return self._plain[key]

    def transcribe_primed(self, samples: np.ndarray, phrase: str) -> str:
        t0 = time.monotonic()
        text = self.asr.transcribe_primed(samples, phrase)
        self.primed_ms.append((time.monotonic() - t0) * 1000.0)
        return text

    def phrase_logprob(self, samples: np.ndarray, phrase: str) -> float:
        t0 = time.monotonic()
        score = self.asr.phrase_logprob(samples, phrase)
        self.scores.append(round(score, 3))
        self.score_ms.append((time.monotonic() - t0) * 1000.0)
        return score


def replay(cfg: Config, asr: SharedDecodes, path: Path, short_s: float) -> dict[str, Any]:
    """Run one clip through a fresh engine: did it wake, on what text, with which request."""
    wake = AsrMatchWake(cfg, asr)
    if not short_s:  # before: the plain decode alone, on segments the trailing silence closes
        wake.segmenter, wake.short_s = Segmenter(cfg), 0.0
    wake.load()
    heard: list[str] = []
    wake.on_segment = lambda seg: heard.append(f"{seg.duration_s:.2f}s")
    hit = None
    for frame in WavFileSource(path).frames():
        hit = hit or wake.accept(frame)
    hit = hit or wake.flush()
    if hit is None:
        return {"woke": False, "heard": wake.last_text, "segments": heard}
    return {"woke": True, "heard": hit.text, "request": hit.request, "segments": heard}


def score(clips: list[Clip], results: list[dict[str, Any]]) -> dict[str, Any]:
    pos = [(c, r) for c, r in zip(clips, results) if c.wake]
    neg = [(c, r) for c, r in zip(clips, results) if not c.wake]
    by_cond: dict[str, dict[str, int]] = defaultdict(lambda: {"clips": 0, "woke": 0})
    for c, r in zip(clips, results):
        by_cond[c.condition]["clips"] += 1
        by_cond[c.condition]["woke"] += int(r["woke"])
    hits = sum(r["woke"] for _c, r in pos)
    false = sum(r["woke"] for _c, r in neg)
    return {
        "recall": round(hits / len(pos), 4) if pos else None,
        "woke": hits,
        "positives": len(pos),
        "false_wake_rate": round(false / len(neg), 4) if neg else None,
        "false_wakes": false,
        "negatives": len(neg),
        "spurious_requests": [(c.name, r["request"]) for c, r in pos if r["woke"] and r["request"]],
        "per_condition": dict(by_cond),
        "missed": {c.name: r["heard"] for c, r in pos if not r["woke"]},
        "false_woke": {c.name: r["heard"] for c, r in neg if r["woke"]},
    }


def run(cfg: Config, pairs: list[tuple[Clip, Path]], asr: SharedDecodes) -> dict[str, Any]:
    clips = [c for c, _p in pairs]
    before = [replay(cfg, asr, p, 0.0) for _c, p in pairs]
    t0 = time.monotonic()
    after = [replay(cfg, asr, p, SHORT_S) for _c, p in pairs]
    return {
        "clips": len(clips),
        "short_s": SHORT_S,
        "before": score(clips, before),
        "after": score(clips, after),
        "after_wall_s": round(time.monotonic() - t0, 1),
        "plain_decode_ms_mean": round(float(np.mean(asr.plain_ms)), 1) if asr.plain_ms else None,
        "primed_decodes": len(asr.primed_ms),
        "primed_decode_ms_mean": round(float(np.mean(asr.primed_ms)), 1) if asr.primed_ms else None,
        "phrase_scores": asr.scores,
        "phrase_score_ms_mean": round(float(np.mean(asr.score_ms)), 1) if asr.score_ms else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small representative subset of the set")
    ap.add_argument("--clips", type=Path, default=None, help="wake set cache folder (default .cache/wake_set)")
    args, run_info = bench_run("wake_recall", ap)
    cfg = load_config()
    pairs = build(args.clips or default_dir(args.quick), spec(args.quick), cfg)
    asr = SharedDecodes(WhisperAsr(cfg))
    asr.load()
    run_info.emit(run(cfg, pairs, asr), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
