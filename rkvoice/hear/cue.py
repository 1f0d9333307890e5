"""The wake acknowledgement: a short chime, or "我在" said once at start-up by the loaded voice, kept in memory."""

from __future__ import annotations

import logging

import numpy as np

from rkvoice.audio.post import resample
from rkvoice.config import Config
from rkvoice.tts.base import TtsEngine

log = logging.getLogger(__name__)


def chime(rate: int = 16000, level: float = 0.3) -> np.ndarray:
    """Two rising tones (E6 then A6, 90 ms each) with 5 ms fades: 180 ms of float32."""
    n, fade = int(0.09 * rate), int(0.005 * rate)
    t = np.arange(n) / rate
    env = np.exp(-t * 12.0)
    env[:fade] *= np.linspace(0.0, 1.0, fade)
    env[-fade:] *= np.linspace(1.0, 0.0, fade)
    tones = [np.sin(2 * np.pi * freq * t) * env for freq in (1318.5, 1760.0)]
    return (np.concatenate(tones) * level).astype(np.float32)


def ack_cue(cfg: Config, voice: TtsEngine, rate: int) -> np.ndarray:
    """The cue ``hear.ack`` names (chime, voice, none) at ``rate``, rendered once at load; ``voice`` is
    the loaded TTS engine the answers are spoken with (it says ``voice``)."""
    kind = cfg.hear.ack
    if kind == "chime":
        samples = chime(rate)
    elif kind == "voice":
        said, said_rate = voice.generate(cfg.hear.ack_text, sid=cfg.tts.sid, speed=cfg.tts.speed)
        samples = resample(said, said_rate, rate)
    else:  # none (hear.ack is checked by the config)
        samples = np.zeros(0, dtype=np.float32)
    log.info("ack cue %s: %.0f ms", kind, 1000 * len(samples) / rate)
    return samples
