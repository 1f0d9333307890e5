"""ASR benchmark: RTF and CER of each installed ASR engine on speech made by the portable voice.

    py312/bin/python -m bench.asr [--beams 1,5] [--threads 2]

Prints one JSON object: per engine (and Whisper beam size) the mean CER, the real-time factor
(decode seconds / audio seconds), mean decode ms, and every transcript.
"""

from __future__ import annotations

import argparse
import time

from rkvoice.config import load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.hear.asr import ASR
from rkvoice.hear.sources import to_mono_16k
from tests.support import bench_run, cer, normalise

SENTENCES = [
    "今天天气怎么样",
    "帮我设置一个明天早上七点的闹钟",
    "给我讲一个笑话",
    "现在几点了",
    "小智小智，现在几点",
    "我们明天一起去公园散步吧",
    "提醒我下午三点去开会",
    "把客厅的灯关掉",
    "北京明天会下雨吗",
    "播放一首轻松的音乐",
]


def voice(cfg):
    try:
        from rkvoice.tts.registry import create_tts

        tts = create_tts(cfg, "fastspeech2")
    except ImportError:
        from rkvoice.tts.fastspeech2 import FastSpeech2Tts

        tts = FastSpeech2Tts(cfg)
    tts.load()
    return tts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beams", default="1,5", help="Whisper beam sizes to compare")
    ap.add_argument("--threads", type=int, default=2)
    args, run_info = bench_run("asr", ap)
    cfg = load_config([parse_override(f"hear.threads={args.threads}")])
    tts = voice(cfg)
    clips = []
    for text in SENTENCES:
        audio, rate = tts.generate(text)
        clips.append((text, to_mono_16k(audio, rate)))
    audio_s = sum(len(a) for _, a in clips) / 16000
    engines, runs = [], []
    for name in ASR.names():
        variants = [int(b) for b in args.beams.split(",")] if name == "whisper" else [None]
        for beam in variants:
            try:
                engine = ASR.create(name, cfg, beam_size=beam) if beam else ASR.create(name, cfg)
                t0 = time.perf_counter()
                engine.load()
                load_s = time.perf_counter() - t0
            except RkvoiceError as exc:
                runs.append({"engine": name, "installed": False, "why": str(exc)})
                break
            run = {"engine": name, "beam": beam, "threads": args.threads, "load_s": round(load_s, 2),
                   "decode_s": 0.0, "errors": 0, "chars": 0, "utterances": []}
            engines.append((engine, run))
            runs.append(run)
    # interleaved (clip by clip, every engine in turn) so a busy machine hurts all engines alike
    for text, audio in clips:
        for engine, run in engines:
            t0 = time.perf_counter()
            hyp = engine.transcribe(audio)
            dt = time.perf_counter() - t0
            c = cer(text, hyp)
            run["decode_s"] += dt
            run["errors"] += round(c * len(normalise(text)))
            run["chars"] += len(normalise(text))
            run["utterances"].append({"ref": text, "hyp": hyp, "cer": round(c, 3), "ms": round(dt * 1000)})
    for _engine, run in engines:
        decode_s, errors, chars = run.pop("decode_s"), run.pop("errors"), run.pop("chars")
        run["cer"] = round(errors / chars, 4)
        run["rtf"] = round(decode_s / audio_s, 3)
        run["mean_ms"] = round(1000 * decode_s / len(clips))
    run_info.emit({"audio_s": round(audio_s, 2), "utterances": len(clips), "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
