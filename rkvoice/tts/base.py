"""The TTS engine interface shared by every voice."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class TtsEngine(Protocol):
    """A text-to-speech engine.

    The constructor only records settings; ``load()`` reads the model files, builds
    sessions and runs one warm-up synthesis, raising RkvoiceError("tts", ...) that names
    a missing or corrupt file and how to get it. ``generate`` is called from one worker
    thread at a time.
    """

    name: str
    languages: tuple[str, ...]  # e.g. ("zh",), ("en",), ("zh", "en")

    def load(self) -> None: ...

    @property
    def sample_rate(self) -> int: ...

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        """Synthesize already-speakable text; returns (float32 mono samples in [-1, 1], rate)."""
        ...
