"""ASR engines: a small protocol and the registry (``hear.asr``: whisper, paraformer, auto), each
engine with what it needs and what ``--check`` reads of it; each engine class declares its languages."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import numpy as np

from rkvoice.board.runtimes import display_path
from rkvoice.config import Config
from rkvoice.errors import Stage
from rkvoice.needs import FileNeed, Needs, PackageNeed
from rkvoice.registry import Registry, guarded

log = logging.getLogger(__name__)


class AsrEngine(Protocol):
    name: str
    languages: tuple[str, ...]
    """What it transcribes, as primary language codes ("zh")."""

    def load(self) -> None:
        """Load the model and run one warm-up decode."""

    def transcribe(self, samples: np.ndarray) -> str:
        """16 kHz mono float32 speech -> simplified Chinese text ('' when nothing was said)."""


def whisper_needs(cfg: Config, **_: Any) -> Needs:
    """CTranslate2 Whisper base (models/portable/whisper-base); opencc makes its output simplified."""
    from rkvoice.hear.whisper_asr import FILES, whisper_dir

    d = whisper_dir(cfg)
    return Needs(files=tuple(FileNeed(n, (d / n,)) for n in FILES),
                 packages=(PackageNeed("faster_whisper", "faster-whisper"), PackageNeed("opencc", "opencc")),
                 profile="portable")


def paraformer_needs(cfg: Config, **_: Any) -> Needs:
    from rkvoice.hear.paraformer_asr import file_needs, paraformer_dir

    return Needs(files=file_needs(paraformer_dir(cfg)), packages=(PackageNeed("sherpa_onnx", "sherpa-onnx"),),
                 profile="board")


def paraformer_model(cfg: Config) -> str:
    """What sherpa-onnx would exit the process on (metadata, tokens), checked; the model's name."""
    from rkvoice.hear.paraformer_asr import check_paraformer

    return f"model {display_path(check_paraformer(cfg)[0], cfg.models.path.parent)}"


ASR = Registry(Stage.ASR, auto=("paraformer", "whisper"))
ASR.register("whisper", "rkvoice.hear.whisper_asr:WhisperAsr",
             "Whisper base, CTranslate2 int8 via faster-whisper (portable)",
             "pip install faster-whisper==1.2.1 and run ./install.sh for the portable models", needs=whisper_needs)
ASR.register("paraformer", "rkvoice.hear.paraformer_asr:ParaformerAsr",
             "sherpa-onnx offline Paraformer zh (board profile)",
             "pip install sherpa-onnx and run ./install.sh --profile board", needs=paraformer_needs,
             check=guarded(paraformer_model))


def asr_name(cfg: Config) -> str:
    """Resolve ``auto``: paraformer on the board profile, whisper elsewhere."""
    return ASR.resolve(cfg.hear.asr, cfg.models.profile)


def create_asr(cfg: Config) -> AsrEngine:
    """The configured ASR engine, not loaded yet."""
    return ASR.create(asr_name(cfg), cfg)
