"""How much quiet Whisper is given around the speech (``rkvoice.hear.whisper_asr.settle``), chosen by
measurement: the mean CER of the portable voices heard by the installed Whisper for each pad.

    py312/bin/python -m bench.settle_pad [--pads 0.1,0.15,0.25,0.5] [--gains 0.9,1.0,1.1]

Two sets, each said once per voice and heard at every gain (the same speech a little louder or softer:
Whisper's transcript moves with changes that small, so one gain alone measures mostly chance): the
ten mixed sentences (tests/fixtures/mixed_set.txt, said as the speaker says them) on the FastSpeech2
and VITS routes, and the Chinese sentences of tests/fixtures/cut_corpus.txt under 30 characters
plus requests for the home and the tools, said by the test voice. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from rkvoice.audio.post import resample
from rkvoice.config import load_config
from rkvoice.hear import whisper_asr
from rkvoice.tts.registry import create_tts
from tests.support import bench_run, cer
from tests.support.spoken import MIXED_SET, lines, spoken

REQUESTS = ["空调调到26度", "打开大灯", "关闭客厅的灯", "设置定时十秒", "现在几点", "明天早上七点叫我起床",
            "卧室空调调到二十五度", "今天天气怎么样", "帮我把客厅灯打开", "提醒我下午三点开会", "把书房的风扇关掉",
            "打开卧室的窗帘", "客厅空调调到二十二度", "今天是几号", "一百二十三加四百五十六等于多少", "播放音乐",
            "明天会下雨吗", "关闭所有的灯", "把亮度调到百分之五十", "定一个五分钟的计时器"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pads", default="0.1,0.15,0.25,0.5")
    ap.add_argument("--gains", default="0.9,1.0,1.1")
    args, run = bench_run("settle_pad", ap)
    cfg = load_config()
    asr = whisper_asr.WhisperAsr(cfg)
    asr.load()
    pads = [float(p) for p in args.pads.split(",")]
    gains = [float(g) for g in args.gains.split(",")]
    chinese = REQUESTS + [s for s in lines("cut_corpus.txt") if len(s) < 30][:20]
    sets: dict[str, list[tuple[str, np.ndarray]]] = {}
    for route in ("fastspeech2", "vits"):
        engine = create_tts(cfg, route, MIXED_SET[0])
        engine.load()
        texts = MIXED_SET + (chinese if route == "fastspeech2" else [])
        said = [(t, resample(*spoken(engine, cfg, t), 16000)) for t in texts]
        sets[f"mixed-{route}"] = said[: len(MIXED_SET)]
        if route == "fastspeech2":
            sets["chinese-fastspeech2"] = said[len(MIXED_SET):]
    shipped = whisper_asr.settle.__defaults__
    report: dict[str, Any] = {"shipped_pad_s": whisper_asr.QUIET_PAD_S, "gains": gains, "sets": {}}
    try:
        for name, said in sets.items():
            out: dict[str, float] = {}
            for pad in pads:
                whisper_asr.settle.__defaults__ = (pad,)
                scores = [cer(t, asr.transcribe(a * g), read_digits=not name.startswith("mixed"))
                          for g in gains for t, a in said]
                out[str(pad)] = round(float(np.mean(scores)), 3)
            report["sets"][name] = {"n": len(said), "mean_cer_by_pad": out}
    finally:
        whisper_asr.settle.__defaults__ = shipped
    run.emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
