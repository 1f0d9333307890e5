"""First audio with pieces cut between words against the cutter that cut anywhere between Chinese
characters (the naive one: ``rkvoice.text.words`` switched off), on the installed default voice.

    py312/bin/python -m bench.word_cuts [--runs 5]

Texts: tests/fixtures/cut_corpus.txt. For each text and each cutter, the product's piece path
(rkvoice.pieces: cut, made speakable, synthesised) is timed to its first piece (= first audio for a
listener), ``--runs`` times, the two cutters alternating; medians per text, then the median over
texts and the ratio word-cut / naive. Also: how many first pieces differ, and how many naive first
pieces end inside a word. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rkvoice.config import load_config
from rkvoice.pieces import Pieces
from rkvoice.stages import default_voice
from rkvoice.text import split, words
from rkvoice.turn import Turn
from tests.support import bench_run, median
from tests.support.spoken import lines, naive_cuts


def first_piece(engine: Any, cfg: Any, text: str) -> tuple[float, str]:
    pieces = Pieces(engine, cfg, Turn(text=text))
    raw = split.split_for_tts(text, pieces.first, pieces.later)[0]  # as written, before speakable()
    t0 = time.perf_counter()
    next(pieces.pieces(text))
    return (time.perf_counter() - t0) * 1000.0, raw


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args, run = bench_run("word_cuts", ap)
    cfg = load_config()
    engine = default_voice(cfg)
    engine.load()
    words.warm()
    texts = lines("cut_corpus.txt")
    ms: dict[str, list[float]] = {"words": [], "naive": []}
    firsts: dict[str, list[str]] = {"words": [], "naive": []}
    for text in texts:
        per: dict[str, list[float]] = {"words": [], "naive": []}
        for i in range(args.runs):
            for which in ("words", "naive") if i % 2 == 0 else ("naive", "words"):
                if which == "naive":
                    with naive_cuts():
                        t, chunk = first_piece(engine, cfg, text)
                else:
                    t, chunk = first_piece(engine, cfg, text)
                per[which].append(t)
                if i == 0:
                    firsts[which].append(chunk)
        for which in ms:
            ms[which].append(median(per[which]))
    split_inside = sum(1 for text, chunk in zip(texts, firsts["naive"], strict=True)
                       if len(chunk) < len(text) and len(chunk) in words.inside_words(text))
    report = {
        "voice": engine.name,
        "texts": len(texts),
        "runs": args.runs,
        "first_audio_ms_median": {k: median(v) for k, v in ms.items()},
        "ratio_words_to_naive": round(median(ms["words"]) / median(ms["naive"]), 3),
        "first_pieces_that_differ": sum(a != b for a, b in zip(firsts["words"], firsts["naive"], strict=True)),
        "naive_first_pieces_ending_inside_a_word": split_inside,
        "first_piece_chars_mean": {k: round(sum(map(len, v)) / len(v), 1) for k, v in firsts.items()},
    }
    run.emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
