"""sherpa-onnx offline Paraformer (zh): the board profile's ASR (CPU, ~0.18 s per utterance)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)


def paraformer_dir(cfg: Config) -> Path:
    return cfg.models.path / "board" / "paraformer-zh"


class ParaformerAsr:
    """Files: ``models/board/paraformer-zh/{model.int8.onnx | model.onnx, tokens.txt}``."""

    name = "paraformer"

    def __init__(self, cfg: Config, model_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.model_dir = model_dir or paraformer_dir(cfg)
        self._rec = None

    def model_files(self) -> tuple[Path, Path]:
        tokens = self.model_dir / "tokens.txt"
        for name in ("model.int8.onnx", "model.onnx"):
            model = self.model_dir / name
            if model.is_file() and tokens.is_file():
                return model, tokens
        raise RkvoiceError(
            "asr",
            "missing-model",
            f"Paraformer model missing: need {self.model_dir}/model.int8.onnx and tokens.txt; "
            "run ./install.sh --profile board",
        )

    def load(self) -> None:
        model, tokens = self.model_files()
        import sherpa_onnx

        self._rec = sherpa_onnx.OfflineRecognizer.from_paraformer(
            paraformer=str(model), tokens=str(tokens), num_threads=self.cfg.hear.threads
        )
        self.transcribe(np.zeros(16000, dtype=np.float32))
        log.info("paraformer loaded from %s", model)

    def transcribe(self, samples: np.ndarray) -> str:
        if self._rec is None:
            raise RuntimeError("ParaformerAsr.load() was not called")
        try:
            stream = self._rec.create_stream()
            stream.accept_waveform(16000, np.asarray(samples, dtype=np.float32))
            self._rec.decode_stream(stream)
            return stream.result.text.strip()
        except Exception as exc:  # a native decode failure is this stage's error
            raise RkvoiceError("asr", "decode-failed", f"paraformer could not decode the audio: {exc}") from exc
