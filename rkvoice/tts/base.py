"""The TTS engine interface shared by every voice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

from rkvoice.errors import RkvoiceError, Stage

MIN_SPEED, MAX_SPEED = 0.25, 4.0
"""The speeds the onnxruntime/sherpa-onnx voices synthesise at."""


def check_request(voice: str, speakers: int, sid: int, speed: float) -> None:
    """Refuse a speaker ``sid`` that ``voice`` does not have, or a speed outside MIN_SPEED..MAX_SPEED."""
    if not 0 <= sid < speakers:
        raise RkvoiceError(Stage.TTS, "bad-speaker", f"{voice} has {speakers} speaker(s); sid {sid} is out of range")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise RkvoiceError(Stage.TTS, "bad-speed", f"speed {speed} is outside {MIN_SPEED}..{MAX_SPEED}")


class TtsEngine(Protocol):
    """A text-to-speech engine. The constructor only records settings; ``load()`` reads the model
    files and warms up, raising an RkvoiceError that names a missing or corrupt file and how to get
    it. ``generate`` is called from one worker thread at a time."""

    name: str
    languages: tuple[str, ...]  # e.g. ("zh",), ("en",), ("zh", "en")

    def load(self) -> None: ...

    @property
    def sample_rate(self) -> int: ...

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        """Synthesize already-speakable text; returns (float32 mono samples in [-1, 1], rate)."""
        ...


class StreamingTts(TtsEngine, Protocol):
    """A voice that can also give a piece's audio in parts as they are made (the Piper voice)."""

    @property
    def streaming(self) -> bool:
        """Whether ``stream`` works now (loaded, with what streaming needs)."""
        ...

    def stream(self, text: str, sid: int = 0, speed: float = 1.0) -> Iterator[tuple[np.ndarray, bool]]:
        """``text``'s audio at ``sample_rate`` in parts as they are made, each with "is it the last"."""
        ...


def streams(engine: TtsEngine) -> bool:
    """Whether ``engine`` is a StreamingTts that streams now. Looked up as attributes (a composite voice
    forwards them to its primary voice), not by isinstance()."""
    return bool(getattr(engine, "streaming", False)) and callable(getattr(engine, "stream", None))
