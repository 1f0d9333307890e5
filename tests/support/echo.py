"""The echo bench's room and its measure, shared with the echo tests: a small room's impulse response,
speech level (RMS over the active part), echo return loss enhancement, and the voices (the assistant's
and other users') cached under .cache/echo."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from rkvoice.config import ROOT, Config

RATE = 16000
USER_DBFS = -26.0
"""The user's speech level at the microphone (RMS over speech)."""
CACHE = ROOT / ".cache" / "echo"


def erle_db(echo: np.ndarray, residual: np.ndarray) -> float:
    """Echo return loss enhancement: the echo's power over what is left of it after cancelling, in dB
    (both silent: 0 dB)."""
    e = float(np.mean(np.square(echo, dtype=np.float64)))
    r = float(np.mean(np.square(residual, dtype=np.float64)))
    return float(10.0 * np.log10((e + 1e-12) / (r + 1e-12)))


def rms(x: np.ndarray) -> float:
    """RMS over the active part (samples above a tenth of the peak): a speech level that pauses do not lower."""
    active = x[np.abs(x) > 0.1 * np.max(np.abs(x))] if np.any(x) else x
    return float(np.sqrt(np.mean(np.square(active)))) if len(active) else 0.0


def room_ir(delay_ms: float, seed: int) -> np.ndarray:
    """A small room seen from a speaker a few cm from the microphone: the direct path after
    ``delay_ms`` (device buffering + flight), five early reflections in the next 2-15 ms, and a
    diffuse exponential tail (RT60 0.25 s) 8 dB under the direct path. Unit energy."""
    rng = np.random.default_rng(seed)
    n = int(0.3 * RATE)
    h = np.zeros(n)
    h[0] = 1.0
    for _ in range(5):
        h[int(rng.uniform(0.002, 0.015) * RATE)] += rng.uniform(-0.5, 0.5)
    t = np.arange(n) / RATE
    tail = rng.standard_normal(n) * np.exp(-6.9 * t / 0.25) * (t > 0.005)
    tail *= np.sqrt(10 ** (-8 / 10) / np.sum(tail**2))
    h = np.concatenate([np.zeros(int(delay_ms * RATE / 1000)), h + tail])
    return h / np.sqrt(np.sum(h**2))


class Voices:
    """Synthesised speech, cached as .npy under .cache/echo (assistant: the configured voice; users: the
    portable voice at other speeds and pitches, the wake set's trick)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._assistant: Any = None
        self._maker: Any = None
        CACHE.mkdir(parents=True, exist_ok=True)

    def _cached(self, key: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        path = CACHE / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".npy")
        if not path.is_file():
            np.save(path, make().astype(np.float32))
        return np.load(path)

    def assistant(self, text: str) -> tuple[np.ndarray, int]:
        """The answer at ``audio.output_rate`` (what the player is handed)."""
        rate = self.cfg.audio.output_rate

        def make() -> np.ndarray:
            import soxr

            from rkvoice.tts.registry import create_tts

            if self._assistant is None:
                self._assistant = create_tts(self.cfg, None, text=text)
                self._assistant.load()
            audio, r = self._assistant.generate(text)
            return soxr.resample(np.asarray(audio, np.float32), r, rate) if r != rate else np.asarray(audio)

        return self._cached(f"assistant|{self.cfg.tts.engine}|{rate}|{text}", make), rate

    def user(self, text: str, speed: float, semitones: float) -> np.ndarray:
        def make() -> np.ndarray:
            from tests.support.wake_set import Maker

            if self._maker is None:
                self._maker = Maker(self.cfg)
            return np.asarray(self._maker.voice(text, speed, semitones))

        return self._cached(f"user|{text}|{speed}|{semitones}", make)
