"""sherpa-onnx offline Paraformer (zh): the board profile's ASR (CPU, ~0.18 s per utterance). Its files
(``file_needs``) are checked before sherpa-onnx reads them (``rkvoice.hear.sherpa_guard``)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear import sherpa_guard as guard
from rkvoice.needs import FileNeed, present_file

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
MIN_SAMPLES = SAMPLE_RATE // 20  # 50 ms: less than one LFR window of features
PARAFORMER_KEYS = ("vocab_size", "lfr_window_size", "lfr_window_shift", "neg_mean", "inv_stddev")


def paraformer_dir(cfg: Config) -> Path:
    """``hear.paraformer_dir`` (relative to the install dir) or models.dir/board/paraformer-zh."""
    return guard.board_model_dir(cfg, "paraformer_dir", "paraformer-zh")


def fix_for(model_dir: Path) -> guard.Fix:
    return guard.Fix(Stage.ASR,
                     f"reinstall the Paraformer (./install.sh --profile board) or fix hear.paraformer_dir ({model_dir})")


def file_needs(model_dir: Path) -> tuple[FileNeed, FileNeed]:
    """The model (int8 first) and its tokens."""
    return (FileNeed("model", (model_dir / "model.int8.onnx", model_dir / "model.onnx")),
            FileNeed("tokens", (model_dir / "tokens.txt",)))


def check_paraformer(cfg: Config) -> tuple[Path, Path]:
    """Everything sherpa-onnx would exit on in an OfflineRecognizer's files, unloaded; returns (model, tokens)."""
    model_dir = paraformer_dir(cfg)
    fix = fix_for(model_dir)
    model, tokens = (present_file(f) for f in file_needs(model_dir))
    if model is None or tokens is None:
        raise fix.error(
            "missing-model", f"Paraformer model missing: need {model_dir}/model.int8.onnx and tokens.txt")
    meta = guard.onnx_metadata(model, fix)
    guard.require_keys(meta, PARAFORMER_KEYS, model, fix)
    window = guard.require_int(meta, "lfr_window_size", model, fix)
    for key in ("neg_mean", "inv_stddev"):
        n = len(meta[key].split(","))
        if n % window:
            raise fix.error("bad-model", f"{model.name}: {key} has {n} values, not a multiple of lfr_window_size {window}")
    table = guard.read_tokens(tokens, fix)
    if "</s>" not in table:
        raise fix.error("bad-model", f"{tokens} has no '</s>' token (the Paraformer's end of sentence)")
    guard.check_vocab(table, guard.require_int(meta, "vocab_size", model, fix), tokens, model, fix)
    return model, tokens


class ParaformerAsr:
    name = "paraformer"
    languages = ("zh",)

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._rec = None

    def load(self) -> None:
        model, tokens = check_paraformer(self.cfg)
        import sherpa_onnx

        self._rec = sherpa_onnx.OfflineRecognizer.from_paraformer(
            paraformer=str(model), tokens=str(tokens), num_threads=self.cfg.hear.threads
        )
        self.transcribe(np.zeros(SAMPLE_RATE, dtype=np.float32))
        log.info("paraformer loaded from %s", model)

    def transcribe(self, samples: np.ndarray) -> str:
        if self._rec is None:
            raise RuntimeError("ParaformerAsr.load() was not called")
        data = np.asarray(samples, dtype=np.float32)
        if data.ndim != 1:
            raise RkvoiceError(
                Stage.ASR, "bad-audio",
                f"the recogniser takes 16 kHz mono samples, got an array of shape {data.shape} "
                "(convert with rkvoice.hear.sources.to_mono_16k)",
            )
        if not np.all(np.isfinite(data)):
            raise RkvoiceError(Stage.ASR, "bad-audio", "the audio holds NaN or infinite samples")
        if len(data) < MIN_SAMPLES:
            return ""  # a click: sherpa-onnx would log an ONNX Runtime error for an empty feature matrix
        try:
            stream = self._rec.create_stream()
            stream.accept_waveform(SAMPLE_RATE, data)
            self._rec.decode_stream(stream)
            return stream.result.text.strip()
        except Exception as exc:  # a native decode failure is this stage's error
            raise RkvoiceError(Stage.ASR, "decode-failed", f"paraformer could not decode the audio: {exc}") from exc
