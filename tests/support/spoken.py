"""What the speaker would play for a text, for a listener to hear: the product's piece path
(rkvoice.pieces: cut, made speakable, synthesised piece by piece) joined into one signal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import Config
from rkvoice.pieces import Pieces
from rkvoice.text import split
from rkvoice.turn import Turn

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def lines(name: str) -> list[str]:
    """The sentences of tests/fixtures/``name`` (blank and "# " lines skipped)."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


MIXED_SET = lines("mixed_set.txt")
"""Ten mixed Chinese-English sentences: product names, acronyms, code words."""


def spoken(engine: Any, cfg: Config, text: str) -> tuple[np.ndarray, int]:
    """``text`` through ``engine`` (loaded) the way the speaker says it: (float32 samples, rate)."""
    pieces = Pieces(engine, cfg, Turn(text=text))
    blocks = [p.blocks.reshape(-1) for p in pieces.pieces(text)]
    samples = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int16)
    return samples.astype(np.float32) / 32768.0, int(engine.sample_rate)


@contextmanager
def naive_cuts() -> Iterator[None]:
    """The cutter as it was (any gap between Chinese characters): no word blocks, no script-change gaps."""
    inside, changes = split.inside_words, split.script_changes
    split.inside_words, split.script_changes = (lambda _t: set()), (lambda _t: [])  # type: ignore[assignment]
    try:
        yield
    finally:
        split.inside_words, split.script_changes = inside, changes  # type: ignore[assignment]
