"""The wake acknowledgement: a short chime, or "我在" said once at start-up by the loaded voice, kept in memory."""

from __future__ import annotations

import logging

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.tts.base import TtsEngine

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
    """``load()`` renders the cue once (``hear.ack``: chime, voice, none) at ``rate``.

    ``voice`` is the loaded TTS engine the answers are spoken with (needed for ``voice``)."""

    def __init__(self, cfg: Config, voice: TtsEngine | None = None, rate: int | None = None) -> None:
        self.cfg = cfg
        self.rate = rate or cfg.audio.output_rate
        self.kind = cfg.hear.ack
        self.voice = voice
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
        if self.voice is None:
            raise RkvoiceError("hear", "no-voice", "hear.ack=voice needs the loaded voice; pass it to AckCue")
        samples, rate = self.voice.generate(text, sid=self.cfg.tts.sid, speed=self.cfg.tts.speed)
        samples = np.asarray(samples, dtype=np.float32)
        if rate != self.rate:
            import soxr

            samples = soxr.resample(samples, rate, self.rate).astype(np.float32)
        return samples
