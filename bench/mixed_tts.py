"""Mixed Chinese-English speech on the portable voices: the Chinese voice alone vs routed spans.

    py312/bin/python -m bench.mixed_tts [--runs 3]

In one run, interleaved so both see the same machine load:

- mixed sentence: the plain Chinese voice (fastspeech2, which drops Latin words) and the routed
  voice (``create_tts``: Latin spans to the English Piper voice) each synthesise it ``--runs``
  times; the installed Whisper transcribes every take: CER against the text (digits as written),
  and how many takes contain "Python" and "GitHub";
- pure Chinese text: both voices speak it the way the speaker does (its one speech path,
  ``rkvoice.pieces``: cut with the engine's own piece sizes, made speakable, synthesised and
  post-processed one after another while the previous piece plays): first audio = when the first
  piece is ready, max gap = the longest wait of a real-time listener between pieces (audio-time
  accounting), at least 6 runs each, the order alternating; and whether the routed voice loaded
  its English voice (it must not);
- span noise: the routed voice (its English partner at ``SPAN_NOISE``: none, the model's mean
  pronunciation) against the same routing with the partner sampling at ``PIPER_NOISE`` (what a
  Piper voice speaking English alone uses), on MIXED and on BROAD, 40 other mixed sentences with
  brand and tech words, so the choice is not fitted to MIXED: the takes in which Whisper heard the
  English word. The unsampled voice says each sentence the same way every time: one take each.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rkvoice.audio.post import resample
from rkvoice.config import Config, load_config
from rkvoice.hear.whisper_asr import WhisperAsr
from rkvoice.pieces import Pieces, piece_chars
from rkvoice.text.normalize import speakable
from rkvoice.timeline import max_gap_ms
from rkvoice.tts.fastspeech2 import FastSpeech2Tts
from rkvoice.tts.mixed import MixedTts
from rkvoice.tts.registry import create_tts
from rkvoice.tts.vits import PIPER_NOISE, VitsTts
from rkvoice.turn import Turn
from tests.support import bench_run, cer, median

MIXED = "我每天用Python写代码，也用GitHub管理项目。"
WORDS = ("python", "github")
BROAD = {
    "请用Google搜索一下明天的天气。": "google",
    "我的电脑装的是Linux系统。": "linux",
    "我喜欢听Taylor Swift的歌。": "taylorswift",
    "你可以在Amazon上买到。": "amazon",
    "我昨天下载了一个新的Windows更新。": "windows",
    "这个周末我们去看Avatar吧。": "avatar",
    "他刚买了一台新的iPhone。": "iphone",
    "我在YouTube上看了一个视频。": "youtube",
    "这个项目是用Java写的。": "java",
    "晚上我们一起玩Minecraft吧。": "minecraft",
    "她在Microsoft工作了五年。": "microsoft",
    "这台电脑用的是Intel的处理器。": "intel",
    "我用Excel做了一张表格。": "excel",
    "明天的会议在Zoom上开。": "zoom",
    "我们去Starbucks喝杯咖啡吧。": "starbucks",
    "他开的是一辆Tesla。": "tesla",
    "这个文件请用Word打开。": "word",
    "我把照片存在Dropbox里了。": "dropbox",
    "你试过Spotify的推荐歌单吗？": "spotify",
    "我在Netflix上看完了这部剧。": "netflix",
    "他的新手机是Samsung的。": "samsung",
    "这个网站是用React做的。": "react",
    "我们用Docker部署服务。": "docker",
    "数据都放在Oracle数据库里。": "oracle",
    "我每天早上看一会儿Twitter。": "twitter",
    "她用Photoshop修了这张照片。": "photoshop",
    "这款游戏只能在Steam上买。": "steam",
    "把代码推到GitHub上就行了。": "github",
    "我在学习Python编程。": "python",
    "他们公司用的是Slack聊天。": "slack",
    "我订了一张Uber的车。": "uber",
    "这首歌在Apple Music上能听到。": "applemusic",
    "我们用Chrome浏览器打开它。": "chrome",
    "周末去Disney乐园玩吧。": "disney",
    "这个模型是Facebook发布的。": "facebook",
    "我把文档放在Notion里了。": "notion",
    "他们用Kubernetes管理集群。": "kubernetes",
    "我给你发了一封Gmail邮件。": "gmail",
    "晚上想吃McDonald's的汉堡。": "mcdonald",
    "这个应用支持Android手机。": "android",
}
"""Other mixed sentences and the English word in each, so the span noise is not chosen on MIXED alone."""
PURE_ZH = "今天天气不错，我们出去走走吧。公园里的花都开了，空气也很新鲜。记得带上水和帽子。"


def pipelined(engine: Any, cfg: Config, text: str) -> dict[str, float]:
    """First audio and max gap of the speaker's piece-by-piece synthesis (no player needed)."""
    pieces = Pieces(engine, cfg, Turn(text=text), out_rate=cfg.audio.output_rate)
    t0 = time.monotonic()
    plays = [((time.monotonic() - t0) * 1000.0, piece.audio_s) for piece in pieces.pieces(text)]
    return {"first_audio_ms": plays[0][0], "max_gap_ms": max_gap_ms(plays), "pieces": float(len(plays))}


def heard(asr: WhisperAsr, engine: Any, text: str) -> str:
    samples, rate = engine.generate(speakable(text))
    return asr.transcribe(resample(samples, rate, 16000))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args, run = bench_run("mixed_tts", ap)
    cfg = load_config()
    plain = FastSpeech2Tts(cfg)
    plain.load()
    routed = create_tts(cfg, "fastspeech2", PURE_ZH)
    if not isinstance(routed, MixedTts):
        print(json.dumps({"error": "no English voice installed: nothing is routed (run ./install.sh)"}))
        return 1
    routed.load()
    sampled = MixedTts(plain, {"en": VitsTts(cfg, routed.voices["en"].voice.name, piper_noise=PIPER_NOISE)})
    sampled.load()
    asr = WhisperAsr(cfg)
    asr.load()

    speed: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(max(args.runs, 6)):  # order alternates: neither voice always goes first
        for which in ("before", "after") if i % 2 else ("after", "before"):
            speed[which].append(pipelined(plain if which == "before" else routed, cfg, PURE_ZH))
    english_loaded_on_pure_zh = id(routed.voices["en"]) in routed._loaded

    takes: dict[str, list[str]] = {"before": [], "after": []}
    for _ in range(args.runs):
        takes["before"].append(heard(asr, plain, MIXED))
        takes["after"].append(heard(asr, routed, MIXED))

    noise: dict[str, dict[str, int]] = {"after": {}, "sampled": {}}
    for which, engine, runs in (("after", routed, 1), ("sampled", sampled, args.runs)):
        for text, word in {MIXED: "python", **BROAD}.items():
            squeezed = [heard(asr, engine, text).lower().replace(" ", "") for _ in range(runs)]
            noise[which][text] = sum(word in t for t in squeezed)
            if text == MIXED:
                noise[which][text + " (github)"] = sum("github" in t for t in squeezed)

    def summary(which: str) -> dict[str, Any]:
        texts = takes[which]
        squeezed = [t.lower().replace(" ", "") for t in texts]
        runs = speed[which]
        return {
            "mixed_cer_median": median([cer(MIXED, t, read_digits=False) for t in texts], 3),
            "mixed_cer": [round(cer(MIXED, t, read_digits=False), 3) for t in texts],
            "takes_with_word": {w: sum(w in s for s in squeezed) for w in WORDS},
            "transcripts": texts,
            "pure_zh_first_audio_ms_median": median([r["first_audio_ms"] for r in runs]),
            "pure_zh_max_gap_ms": round(max(r["max_gap_ms"] for r in runs), 1),
            "pure_zh_first_audio_ms": [round(r["first_audio_ms"], 1) for r in runs],
        }

    report = {
        "runs": args.runs,
        "mixed_text": MIXED,
        "pure_zh_text": PURE_ZH,
        "piece_chars": piece_chars(cfg, plain),
        "before": {"engine": "fastspeech2 alone", **summary("before")},
        "after": {"engine": f"fastspeech2 + {routed.voices['en'].name} for Latin spans", **summary("after"),
                  "english_voice_loaded_by_pure_zh": english_loaded_on_pure_zh},
        "span_noise": {
            "after_no_noise": {"takes_per_sentence": 1, "words_heard": sum(noise["after"].values()),
                               "of": len(noise["after"]), "per_sentence": noise["after"]},
            "sampled_piper_noise": {"noise": list(PIPER_NOISE), "takes_per_sentence": args.runs,
                                    "words_heard": sum(noise["sampled"].values()),
                                    "of": args.runs * len(noise["sampled"]), "per_sentence": noise["sampled"]},
        },
    }
    run.emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
