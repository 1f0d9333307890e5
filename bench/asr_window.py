"""Whisper's encoder window: decode time and CER of the full 30 s window against shorter ones.

    py312/bin/python bench/asr_window.py [--windows 30,10] [--runs 2] [--threads 2]

faster-whisper pads every request to Whisper's 30 s window (3000 feature frames) before the
encoder, most of a short request's decode. CTranslate2 also runs the encoder on fewer frames; this
bench feeds it the first ``window`` seconds of that padded input instead (at least the audio + 1 s)
and times whole decodes of the same clips, interleaved window by window, clip by clip. Every decode
is timed cold: WhisperAsr keeps the last encoder output, so a repeated decode of the same audio
would time the decoder alone (the first call of three took ~1.3 s, the next two ~0.45 s).

Clips: bench/turn_latency's requests (wake phrase + request, one breath) and bench/asr's sentences,
spoken by the portable FastSpeech2 voice. Prints JSON: per window the median decode ms, its ratio
to the full window's, the CER against the written text, how many transcripts differ from the full
window's, and every transcript.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.asr import SENTENCES, voice
from bench.cer import cer, normalise
from bench.turn_latency import LLM_REQUESTS, TOOL_REQUESTS
from rkvoice.config import load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.hear.sources import to_mono_16k
from rkvoice.hear.whisper_asr import WhisperAsr

FULL_S = 30
FRAMES_PER_S = 100


class Windowed:
    """``asr``'s model with its encoder fed the first ``seconds`` of the padded features."""

    def __init__(self, asr: WhisperAsr) -> None:
        self.asr = asr
        self.frames: int | None = None
        self._encode = asr._model.encode  # WhisperAsr's caching wrapper

    def __enter__(self) -> Windowed:
        self.asr._model.encode = self._fitted
        return self

    def __exit__(self, *_exc: object) -> None:
        self.asr._model.encode = self._encode

    def _fitted(self, features: np.ndarray) -> Any:
        if self.frames is not None:
            features = np.ascontiguousarray(features[..., : self.frames])
        return self._encode(features)

    def decode(self, audio: np.ndarray, seconds: int) -> tuple[str, float]:
        """(transcript, seconds) of one cold decode with an encoder window of ``seconds``."""
        need = int(np.ceil(len(audio) / 16000)) + 1
        self.frames = None if seconds >= FULL_S else max(seconds, need) * FRAMES_PER_S
        self.asr._encoded = None  # cold: not the encoder output of the decode before
        t0 = time.perf_counter()
        text = self.asr.transcribe(audio)
        return text, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", default="30,10", help="encoder windows in seconds (30: the full one)")
    ap.add_argument("--runs", type=int, default=2, help="cold decodes per clip and window (median)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    try:
        asked = {int(w) for w in args.windows.split(",")}
    except ValueError:
        ap.error(f"--windows takes whole seconds separated by commas (e.g. 30,10), not {args.windows!r}")
    if min(asked) < 1:
        ap.error(f"--windows must be at least 1 s each, got {args.windows!r}")
    windows = sorted(asked | {FULL_S}, reverse=True)
    cfg = load_config([parse_override(f"hear.threads={args.threads}")])
    tts = voice(cfg)
    texts = TOOL_REQUESTS + LLM_REQUESTS + SENTENCES
    clips = []
    for text in texts:
        audio, rate = tts.generate(text)
        clips.append((text, to_mono_16k(audio, rate)))
    asr = WhisperAsr(cfg)
    asr.load()
    rows: dict[int, list[dict[str, Any]]] = {w: [] for w in windows}
    with Windowed(asr) as win:
        for text, audio in clips:
            for w in windows:
                runs = [win.decode(audio, w) for _ in range(max(1, args.runs))]
                heard = runs[0][0]
                rows[w].append({"ref": text, "hyp": heard, "cer": round(cer(text, heard), 3),
                                "ms": round(statistics.median(s for _, s in runs) * 1000),
                                "stable": all(t == heard for t, _ in runs)})
    full = rows[FULL_S]
    full_ms = statistics.median(r["ms"] for r in full)
    out: dict[str, Any] = {"clips": len(clips), "audio_s": round(sum(len(a) for _, a in clips) / 16000, 2),
                           "runs": args.runs, "threads": args.threads, "windows": {}}
    for w in windows:
        chars = sum(len(normalise(r["ref"])) for r in rows[w])
        errors = sum(r["cer"] * len(normalise(r["ref"])) for r in rows[w])
        median_ms = statistics.median(r["ms"] for r in rows[w])
        out["windows"][str(w)] = {
            "median_ms": median_ms, "vs_full": round(median_ms / full_ms, 3), "cer": round(errors / chars, 4),
            "differs_from_full": sum(r["hyp"] != f["hyp"] for r, f in zip(rows[w], full, strict=True)),
            "utterances": rows[w]}
    print(json.dumps(out, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except RkvoiceError as err:  # a missing model or voice: its message names the fix
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
