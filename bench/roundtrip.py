"""Round trip: does speakable() make number-heavy Chinese sentences come out right?

    py312/bin/python -m bench.roundtrip [--out roundtrip.json] [--engine auto]

Each sentence (times, dates, money, temperatures, phone numbers, IPs, percentages) is
synthesised twice with the installed Chinese voice -- as written (raw) and through speakable() --
and both recordings are transcribed with the portable ASR (Whisper base via faster-whisper, int8,
prompt "以下是普通话的句子。", language zh). The reference is speakable(original) with punctuation
and spaces removed.

Two CERs per recording: ``cer`` compares the transcript after passing it through speakable() too
(Whisper writes numbers as digits or characters as it likes; this compares what was *said*), and
``cer_verbatim`` compares the transcript as Whisper wrote it. Prints one JSON object (and writes it
to --out if given) with every sentence's transcripts and CERs and the means of both sets.
Acceptance: mean normalised-set CER at most half the raw-set CER.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from rkvoice.config import load_config
from rkvoice.errors import RkvoiceError
from rkvoice.text.clean import clean
from rkvoice.text.normalize import speakable
from rkvoice.text.zh_speakable import zh_speakable
from tests.support import bench_run, cer

SENTENCES = [
    "现在是 2026-10-21 22:05。",
    "今天是2026年10月21日，星期三。",
    "明天早上 07:30 出发，下午 14:45 到达。",
    "这件衣服原价 ¥299，现在只要 239.5 元。",
    "温度 45.2℃，湿度 60%。",
    "今天最低气温 -5.5℃，注意保暖。",
    "如遇紧急情况请拨打 110 或 120。",
    "我的手机号是 13812345678。",
    "本机 IP 192.168.0.103。",
    "电池还剩 35%，大约还能用 2.5 小时。",
    "内存共 3893 兆，可用 2340 兆。",
    "会议在 3 楼 305 室，时间是 09:15。",
    "他跑了 42.195km，比去年快了 12%。",
    "请在 2026/11/01 之前交 1,200 元。",
]

def _to_16k(samples: np.ndarray, rate: int) -> np.ndarray:
    if rate == 16000:
        return samples.astype(np.float32)
    import soxr

    return soxr.resample(samples.astype(np.float32), rate, 16000).astype(np.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="auto", help="TTS engine name (default: auto for Chinese)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N sentences")
    args, run = bench_run("roundtrip", parser)

    from rkvoice.hear.whisper_asr import WhisperAsr
    from rkvoice.tts.registry import create_tts

    cfg = load_config()
    try:
        tts = create_tts(cfg, args.engine, text="中文")
        tts.load()
        asr = WhisperAsr(cfg)
        asr.load()
    except RkvoiceError as err:
        print(json.dumps({"error": str(err)}, ensure_ascii=False))
        return 1

    rows: list[dict[str, Any]] = []
    sentences = SENTENCES[: args.limit] if args.limit else SENTENCES
    for original in sentences:
        reference = speakable(original)
        row: dict[str, Any] = {"original": original, "reference": reference}
        for kind, text in (("raw", original), ("speakable", reference)):
            start = time.perf_counter()
            samples, rate = tts.generate(text)
            synth_s = time.perf_counter() - start
            heard = asr.transcribe(_to_16k(samples, rate))
            row[kind] = {
                "tts_input": text,
                "heard": heard,
                "cer": round(cer(reference, zh_speakable(clean(heard))), 4),
                "cer_verbatim": round(cer(reference, heard, read_digits=False), 4),
                "audio_s": round(len(samples) / rate, 2),
                "synth_s": round(synth_s, 3),
            }
        rows.append(row)

    def mean(kind: str, key: str) -> float:
        return round(statistics.fmean(r[kind][key] for r in rows), 4)

    result = {
        "tts_engine": type(tts).__name__,
        "asr": "whisper-base (faster-whisper int8, prompt 以下是普通话的句子。, zh)",
        "sentences": len(rows),
        "mean_cer_raw": mean("raw", "cer"),
        "mean_cer_speakable": mean("speakable", "cer"),
        "mean_cer_verbatim_raw": mean("raw", "cer_verbatim"),
        "mean_cer_verbatim_speakable": mean("speakable", "cer_verbatim"),
        "rows": rows,
    }
    result["speakable_at_most_half_of_raw"] = result["mean_cer_speakable"] <= result["mean_cer_raw"] / 2
    run.emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
