"""Mixed Chinese-English speech on the portable voices: the Chinese voice alone vs routed spans.

    py312/bin/python bench/mixed_tts.py [--runs 3]

In one run, interleaved so both see the same machine load:

- mixed sentence: the plain Chinese voice (fastspeech2, which drops Latin words) and the routed
  voice (``create_tts``: Latin spans to the English Piper voice) each synthesise it ``--runs``
  times; the installed Whisper transcribes every take: CER against the text (digits as written),
  and how many takes contain "Python" and "GitHub";
- pure Chinese text: both voices speak it the way the speaker does (pieces from split_for_tts with
  tts.first_chars / tts.chunk_chars, made speakable, synthesised one after another while the
  previous piece plays): first audio = synthesis time of the first piece, max gap = the longest
  wait of a real-time listener between pieces (audio-time accounting); and whether the routed voice
  loaded its English voice (it must not);
- span noise: the routed voice (its English partner at ``PIPER_NOISE``) against the same routing
  with the partner at no sampling noise (``NO_NOISE``, the model's mean pronunciation), on MIXED and
  on OTHER: takes in which Whisper heard the English word. (No noise was heard in every take of
  MIXED but fewer takes over all the sentences; the product keeps PIPER_NOISE.)

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rkvoice.audio.post import resample  # noqa: E402
from rkvoice.config import Config, load_config  # noqa: E402
from rkvoice.hear.cer import cer  # noqa: E402
from rkvoice.hear.whisper_asr import WhisperAsr  # noqa: E402
from rkvoice.text.normalize import speakable  # noqa: E402
from rkvoice.text.split import split_for_tts  # noqa: E402
from rkvoice.tts.fastspeech2 import FastSpeech2Tts  # noqa: E402
from rkvoice.tts.mixed import MixedTts  # noqa: E402
from rkvoice.tts.registry import create_tts  # noqa: E402
from rkvoice.tts.vits import VitsTts  # noqa: E402

MIXED = "我每天用Python写代码，也用GitHub管理项目。"
WORDS = ("python", "github")
NO_NOISE = (0.0, 0.0)
OTHER = {"请用Google搜索一下明天的天气。": "google", "我的电脑装的是Linux系统。": "linux",
         "我喜欢听Taylor Swift的歌。": "taylorswift", "你可以在Amazon上买到。": "amazon",
         "我昨天下载了一个新的Windows更新。": "windows", "这个周末我们去看Avatar吧。": "avatar"}
"""Other mixed sentences, so the choice of span noise is not fitted to MIXED alone."""
PURE_ZH = "今天天气不错，我们出去走走吧。公园里的花都开了，空气也很新鲜。记得带上水和帽子。"


def pipelined(engine: Any, cfg: Config, text: str) -> dict[str, float]:
    """First audio and max gap of the speaker's piece-by-piece synthesis (no player needed)."""
    pieces = [p for p in (speakable(c) for c in split_for_tts(text, cfg.tts.first_chars, cfg.tts.chunk_chars))
              if p.strip()]
    t0 = time.monotonic()
    first_audio = max_gap = 0.0
    play_end = 0.0  # seconds after t0 when the audio handed over so far finishes playing
    for i, piece in enumerate(pieces):
        samples, rate = engine.generate(piece, sid=cfg.tts.sid, speed=cfg.tts.speed)
        ready = time.monotonic() - t0
        if i == 0:
            first_audio = ready
            play_end = ready
        else:
            max_gap = max(max_gap, ready - play_end)
        play_end = max(play_end, ready) + len(samples) / rate
    return {"first_audio_ms": first_audio * 1000.0, "max_gap_ms": max(0.0, max_gap) * 1000.0,
            "pieces": float(len(pieces))}


def heard(asr: WhisperAsr, engine: Any, text: str) -> str:
    samples, rate = engine.generate(speakable(text))
    return asr.transcribe(resample(samples, rate, 16000))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    cfg = load_config()
    plain = FastSpeech2Tts(cfg)
    plain.load()
    routed = create_tts(cfg, "fastspeech2", PURE_ZH)
    if not isinstance(routed, MixedTts):
        print(json.dumps({"error": "no English voice installed: nothing is routed (run ./install.sh)"}))
        return 1
    routed.load()
    no_noise = MixedTts(plain, {"en": VitsTts(cfg, routed.voices["en"].voice.name, piper_noise=NO_NOISE)})
    no_noise.load()
    asr = WhisperAsr(cfg)
    asr.load()

    speed: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(args.runs):
        speed["before"].append(pipelined(plain, cfg, PURE_ZH))
        speed["after"].append(pipelined(routed, cfg, PURE_ZH))
    english_loaded_on_pure_zh = routed.loaded("en")

    takes: dict[str, list[str]] = {"before": [], "after": []}
    for _ in range(args.runs):
        takes["before"].append(heard(asr, plain, MIXED))
        takes["after"].append(heard(asr, routed, MIXED))

    noise: dict[str, dict[str, int]] = {"after": {}, "no_noise": {}}
    for which, engine in (("after", routed), ("no_noise", no_noise)):
        for text, word in {MIXED: "python", **OTHER}.items():
            squeezed = [heard(asr, engine, text).lower().replace(" ", "") for _ in range(args.runs)]
            noise[which][word] = sum(word in t for t in squeezed)
            if text == MIXED:
                noise[which]["github"] = sum("github" in t for t in squeezed)

    def summary(which: str) -> dict[str, Any]:
        texts = takes[which]
        squeezed = [t.lower().replace(" ", "") for t in texts]
        runs = speed[which]
        return {
            "mixed_cer_median": round(statistics.median(cer(MIXED, t, read_digits=False) for t in texts), 3),
            "mixed_cer": [round(cer(MIXED, t, read_digits=False), 3) for t in texts],
            "takes_with_word": {w: sum(w in s for s in squeezed) for w in WORDS},
            "transcripts": texts,
            "pure_zh_first_audio_ms_median": round(statistics.median(r["first_audio_ms"] for r in runs), 1),
            "pure_zh_max_gap_ms": round(max(r["max_gap_ms"] for r in runs), 1),
            "pure_zh_first_audio_ms": [round(r["first_audio_ms"], 1) for r in runs],
        }

    report = {
        "machine": {"cpus": os.cpu_count(), "machine": platform.machine(), "loadavg_start": os.getloadavg()},
        "runs": args.runs,
        "mixed_text": MIXED,
        "pure_zh_text": PURE_ZH,
        "first_chars": cfg.tts.first_chars,
        "chunk_chars": cfg.tts.chunk_chars,
        "before": {"engine": "fastspeech2 alone", **summary("before")},
        "after": {"engine": f"fastspeech2 + {routed.voices['en'].name} for Latin spans", **summary("after"),
                  "english_voice_loaded_by_pure_zh": english_loaded_on_pure_zh},
        "span_noise": {"takes_per_sentence": args.runs, "after_piper_noise": noise["after"],
                       "no_noise": noise["no_noise"],
                       "words_heard": {k: sum(v.values()) for k, v in noise.items()},
                       "of": args.runs * (len(OTHER) + 2)},
    }
    print(json.dumps(report, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
