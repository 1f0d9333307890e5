"""The wake acknowledgement: a short chime, or "我在" synthesised once at start-up, kept in memory."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)


def chime(rate: int = 16000, level: float = 0.3) -> np.ndarray:
    """Two rising tones (E6 then A6, 90 ms each) with 5 ms fades: 180 ms of float32."""
    out = []
    for freq in (1318.5, 1760.0):
        n = int(0.09 * rate)
        t = np.arange(n) / rate
        tone = np.sin(2 * np.pi * freq * t) * np.exp(-t * 12.0)
        fade = int(0.005 * rate)
        env = np.ones(n)
        env[:fade] = np.linspace(0.0, 1.0, fade)
        env[-fade:] = np.linspace(1.0, 0.0, fade)
        out.append(tone * env)
    return (np.concatenate(out) * level).astype(np.float32)


class AckCue:
    """``load()`` renders the cue once (``hear.ack``: chime, voice, none) at ``rate``."""

    def __init__(self, cfg: Config, rate: int | None = None, tts_factory: Callable[[Config, str], object] | None = None):
        self.cfg = cfg
        self.rate = rate or cfg.audio.output_rate
        self.kind = cfg.hear.ack
        self._tts_factory = tts_factory
        self.samples = np.zeros(0, dtype=np.float32)

    def load(self) -> None:
        if self.kind == "none":
            self.samples = np.zeros(0, dtype=np.float32)
        elif self.kind == "chime":
            self.samples = chime(self.rate)
        elif self.kind == "voice":
            self.samples = self._voice()
        else:
            raise RkvoiceError("hear", "bad-ack", f"hear.ack is {self.kind!r}; choose one of: chime, none, voice")
        log.info("ack cue %s: %.0f ms", self.kind, 1000 * len(self.samples) / self.rate)

    def _voice(self) -> np.ndarray:
        text = self.cfg.hear.ack_text
        if self._tts_factory is None:
            from rkvoice.tts.registry import create_tts

            tts = create_tts(self.cfg, None, text)
        else:
            tts = self._tts_factory(self.cfg, text)
        tts.load()
        samples, rate = tts.generate(text, sid=self.cfg.tts.sid, speed=self.cfg.tts.speed)
        samples = np.asarray(samples, dtype=np.float32)
        if rate != self.rate:
            import soxr

            samples = soxr.resample(samples, rate, self.rate).astype(np.float32)
        return samples
