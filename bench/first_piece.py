"""The first piece of an LLM answer: before (first clause of a useful length) vs after (the first clause
of a few words / characters), first audio and the ASR round trip, in one run.

    py312/bin/python -m bench.first_piece [--max-tokens 48] [--first-chars N] [--out first_piece.json]

Each question is answered once by the portable LLM (greedy, so the answer is fixed), its text deltas
recorded with their times. Both rules then cut the *same* deltas at the *same* times (the stream
chunker, rkvoice.text.stream_chunker): before = ``first_clause_words=6, first_clause_chars=8`` (a
first clause needed more than five English words / a useful length like a later one), after = the
defaults. ``--first-chars N`` compares the piece sizes instead: before = the voice's first piece
(rkvoice.pieces.piece_chars), after = at most N characters, both with the default rule. Per answer:

- the first piece and when it was ready (ms after the stream started);
- its synthesis time with the installed Chinese voice (median of 3, both rules interleaved);
- first audio from the LLM's start = ready + synthesis;
- the round trip: every piece synthesised on its own and the audio joined (as the speaker plays it),
  transcribed by Whisper base; CER against the answer (both through speakable()).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime
from typing import Any

import numpy as np

from rkvoice.answer.conversation import Conversation
from rkvoice.answer.llm.llama import LlamaEngine
from rkvoice.config import load_config
from rkvoice.text.clean import clean
from rkvoice.text.normalize import speakable
from rkvoice.text.stream_chunker import StreamChunker
from rkvoice.text.zh_speakable import zh_speakable
from tests.support import bench_run, cer, median

QUESTIONS = ["用一句话介绍一下月亮。", "用一句话介绍一下长城。", "熊猫为什么喜欢吃竹子？", "给我讲一个很短的笑话。",
             "下雨天适合做什么？", "推荐一本适合小孩的书。", "怎么才能睡得更好？", "为什么天空是蓝色的？"]
NOW = datetime(2026, 10, 21, 10, 5)  # fixed: the same prompt in every run
RULES = {"before": {"first_clause_words": 6, "first_clause_chars": 8}, "after": {}}


def record(engine: LlamaEngine, conv: Conversation, question: str) -> list[tuple[float, str]]:
    """(seconds since the stream started, delta) of one greedy answer."""
    t0 = time.perf_counter()
    return [(time.perf_counter() - t0, d) for d in engine.stream(conv.messages(question))]


def cut(deltas: list[tuple[float, str]], rule: dict[str, int], first: int, chunk: int) -> tuple[float, list[str]]:
    """When the first piece was ready (s) and every piece, for one rule (``first`` in it: that size)."""
    rule = dict(rule)
    first = rule.pop("first", first)
    c = type("Rule", (StreamChunker,), rule)(first, chunk)  # the rules are class attributes
    pieces: list[str] = []
    ready = deltas[-1][0] if deltas else 0.0
    for t, d in deltas:
        got = c.feed(d)
        if got and not pieces:
            ready = t
        pieces += got
    pieces += c.flush()
    return ready, pieces


def to_16k(samples: np.ndarray, rate: int) -> np.ndarray:
    import soxr

    return samples if rate == 16000 else soxr.resample(samples, rate, 16000).astype(np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--first-chars", type=int, default=0,
                    help="compare first pieces of at most N characters (after) with the voice's (before)")
    args, run = bench_run("first_piece", ap)
    if args.first_chars:
        RULES.update(before={}, after={"first": args.first_chars})
    from rkvoice.hear.whisper_asr import WhisperAsr
    from rkvoice.pieces import piece_chars
    from rkvoice.tts.registry import create_tts

    cfg = load_config([{"llm": {"temperature": 0.0, "max_tokens": args.max_tokens}}])
    engine = LlamaEngine(cfg)
    engine.load()
    tts = create_tts(cfg, "auto", text="中文")
    tts.load()
    asr = WhisperAsr(cfg)
    asr.load()
    first, chunk = piece_chars(cfg, tts)
    rows: list[dict[str, Any]] = []
    for q in QUESTIONS:
        deltas = record(engine, Conversation(cfg, lambda: NOW), q)
        answer = "".join(d for _, d in deltas)
        row: dict[str, Any] = {"question": q, "answer": answer}
        cuts = {name: cut(deltas, rule, first, chunk) for name, rule in RULES.items()}
        synth: dict[str, list[float]] = {name: [] for name in RULES}
        for _ in range(3):
            for name, (_ready, pieces) in cuts.items():
                t = time.perf_counter()
                tts.generate(speakable(pieces[0]))
                synth[name].append(time.perf_counter() - t)
        for name, (ready, pieces) in cuts.items():
            audio = [to_16k(*tts.generate(speakable(p))) for p in pieces if speakable(p).strip()]
            heard = asr.transcribe(np.concatenate(audio)) if audio else ""
            s_ms = statistics.median(synth[name]) * 1000.0
            row[name] = {"first_piece": pieces[0], "pieces": len(pieces), "first_piece_ready_ms": round(ready * 1000, 1),
                         "first_piece_synth_ms": round(s_ms, 1),
                         "first_audio_from_llm_start_ms": round(ready * 1000 + s_ms, 1),
                         "heard": heard, "cer": round(cer(speakable(answer), zh_speakable(clean(heard))), 4)}
        rows.append(row)
        print(f"first_piece: {q} {row['before']['first_piece']!r} -> {row['after']['first_piece']!r}",
              file=sys.stderr, flush=True)
    engine.close()

    def med(name: str, key: str) -> float | None:
        return median([r[name][key] for r in rows])

    out: dict[str, Any] = {
        "answers": len(rows), "tts": getattr(tts, "name", type(tts).__name__), "asr": "whisper base",
        "first_audio_from_llm_start_ms_p50": {n: med(n, "first_audio_from_llm_start_ms") for n in RULES},
        "first_piece_ready_ms_p50": {n: med(n, "first_piece_ready_ms") for n in RULES},
        "mean_cer": {n: round(statistics.fmean(r[n]["cer"] for r in rows), 4) for n in RULES},
        "answers_with_an_earlier_first_piece": sum(r["after"]["first_piece_ready_ms"] < r["before"]["first_piece_ready_ms"]
                                                   for r in rows),
        "rows": rows}
    run.emit(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
