"""Speed of speakable() per sentence, side by side with the raw wetext normaliser alone.

Prints JSON: cold first-call time, then median and p95 milliseconds per sentence over a set of
number-heavy Chinese, English and mixed sentences (each timed individually, several rounds), and
the time for one 20,000-character text. Run: py312/bin/python -m bench.normalize_speed
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from rkvoice.config import ROOT
from tests.support import bench_run, median, percentile

SENTENCES = [
    "现在是 2026-10-21 22:05，星期三。",
    "温度 45.2℃，湿度 60%，风速 12km/h。",
    "本机 IP 192.168.0.103，网关 192.168.0.1。",
    "如遇紧急情况请拨打 110 或 120 急救电话。",
    "您的快递单号是 773201456789，预计 10月23日 送达。",
    "内存共 3893 兆，可用 2340 兆，磁盘剩余 12.5GB。",
    "今天最低气温 -5.5℃，最高 3℃，注意保暖。",
    "这件衣服原价 ¥299，现在打 8 折只要 239.2 元。",
    "会议时间改到明天 14:30，地点在 3 楼 305 会议室。",
    "2026年的 GDP 增长了 5.2%，比去年高 0.3 个百分点。",
    "请在 2026/11/01 之前完成 1,000 份问卷。",
    "他跑了 42.195km，用时 3 小时 28 分。",
    "客服电话 400-800-1234，手机 13812345678。",
    "12 乘以 8 等于 96，3/4 的人同意。",
    "**提醒**：明天 07:15 起床 😀",
    "Your visit is at 14:30 [kb-hours].",
    "Dr. Smith will see you at 9:30 a.m. on Monday.",
    "The copay is $25 and parking is $5.",
    "If you need help, call 911 or our desk at 555-1234.",
    "Fast for 8 to 12 hours before your blood test.",
    "Your appointment is on 2026-10-21 at 09:00.",
    "您的预约在 2026-10-21 14:30，Dr. Lee will see you then.",
    "Python 3.12 比 3.8 快了大约 25%。",
    "下载速度 100Mbps，延迟 20ms，丢包率 0.5%。",
    "第 3 名的成绩是 9.58 秒，比第 1 名慢 0.12 秒。",
]



def _time_each(fn, sentences: list[str], rounds: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(rounds):
        for s in sentences:
            start = time.perf_counter()
            fn(s)
            times.append((time.perf_counter() - start) * 1000)
    return times


def _cold(setup: str, call: str, sentence: str = SENTENCES[0]) -> float:
    """Milliseconds for import + construct + first call, in a fresh interpreter."""
    code = (f"import time; t = time.perf_counter(); {setup}; {call}({sentence!r}); "
            "print((time.perf_counter() - t) * 1000)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args, run = bench_run("normalize_speed", parser)

    # cold first calls each in a fresh interpreter (they share wetext's FST cache otherwise)
    cold_speakable_ms = _cold("from rkvoice.text.normalize import speakable as f", "f")
    # a first sentence that needs wetext (a fraction) also pays for loading its FSTs
    cold_speakable_wetext_ms = _cold("from rkvoice.text.normalize import speakable as f", "f", "3/4 的人同意。")
    cold_wetext_ms = _cold("from wetext import Normalizer", "Normalizer(lang='auto', operator='tn').normalize")

    from wetext import Normalizer

    from rkvoice.text.normalize import speakable

    raw = Normalizer(lang="auto", operator="tn")
    speakable(SENTENCES[0])
    raw.normalize(SENTENCES[0])

    ours = _time_each(speakable, SENTENCES, args.rounds)
    theirs = _time_each(raw.normalize, SENTENCES, args.rounds)

    huge = ("".join(SENTENCES) * 40)[:20000]
    start = time.perf_counter()
    speakable(huge)
    huge_ms = (time.perf_counter() - start) * 1000

    result = {
        "sentences": len(SENTENCES),
        "rounds": args.rounds,
        "speakable": {
            "cold_first_call_ms": round(cold_speakable_ms, 1),
            "cold_first_call_needing_wetext_ms": round(cold_speakable_wetext_ms, 1),
            "median_ms": median(ours, 3),
            "p95_ms": percentile(ours, 95, 3),
            "max_ms": round(max(ours), 3),
        },
        "wetext_raw": {
            "cold_first_call_ms": round(cold_wetext_ms, 1),
            "median_ms": median(theirs, 3),
            "p95_ms": percentile(theirs, 95, 3),
            "max_ms": round(max(theirs), 3),
        },
        "huge_text_chars": len(huge),
        "huge_text_speakable_ms": round(huge_ms, 1),
        "budget_median_ms": 5.0,
        "within_budget": statistics.median(ours) <= 5.0,
    }
    run.emit(result, args.out)


if __name__ == "__main__":
    main()
