"""ASR engines: a small protocol and the registry (``hear.asr``: whisper, paraformer, auto)."""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np

from rkvoice.config import Config
from rkvoice.registry import Registry

log = logging.getLogger(__name__)


class AsrEngine(Protocol):
    name: str

    def load(self) -> None:
        """Load the model and run one warm-up decode."""

    def transcribe(self, samples: np.ndarray) -> str:
        """16 kHz mono float32 speech -> simplified Chinese text ('' when nothing was said)."""


ASR = Registry("asr")
ASR.register(
    "whisper",
    "rkvoice.hear.whisper_asr:WhisperAsr",
    "Whisper base, CTranslate2 int8 via faster-whisper (portable)",
    install_hint="pip install faster-whisper==1.2.1 and run ./install.sh for the portable models",
)
ASR.register(
    "paraformer",
    "rkvoice.hear.paraformer_asr:ParaformerAsr",
    "sherpa-onnx offline Paraformer zh (board profile)",
    install_hint="pip install sherpa-onnx and run ./install.sh --profile board",
)


def asr_name(cfg: Config, name: str | None = None) -> str:
    """Resolve ``auto``: paraformer on the board profile, whisper elsewhere."""
    name = name or cfg.hear.asr
    if name == "auto":
        return "paraformer" if cfg.models.profile == "board" else "whisper"
    ASR.backend(name)  # unknown names fail here, naming the choices
    return name


def create_asr(cfg: Config, name: str | None = None) -> AsrEngine:
    """The configured ASR engine, not loaded yet."""
    return ASR.create(asr_name(cfg, name), cfg)
