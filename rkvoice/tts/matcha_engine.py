"""The ``matcha`` TTS engine: lexicon frontend -> Matcha (mel) -> Vocos (STFT) -> numpy ISTFT.

On the board both models are fixed-shape .rknn files on the NPU (64 tokens -> 599 mel frames;
600 frames -> mag/x/y [1, 513, 600]); elsewhere the same graphs run as .onnx through
onnxruntime. Everything but the NPU call (frontend, bucket padding, frame estimate, ISTFT,
tail trim) is the same code for both.

For a fixed-shape acoustic model the mel is cut at the corrected frame estimate before the
ISTFT, so the noise the model renders into unused frames is mostly never synthesised, and
each piece's tail is trimmed (last voiced run >= 0.4 s kept) before pieces are joined.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.audio.post import trim_tail
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.npu.istft import StftConfig, istft_mag_phase, istft_mag_xy
from rkvoice.npu.runtime import ModelRuntime, OnnxModel, open_model
from rkvoice.tts.matcha_frames import Bucket, FrameEstimator, choose_bucket, split_units
from rkvoice.tts.matcha_frontend import MatchaFrontend, Phonemizer, Unit, ids_of

log = logging.getLogger(__name__)


class MatchaTts:
    """Matcha + Vocos voice, Chinese (and English with the zh-en model and espeak-ng)."""

    name = "matcha"
    languages = ("zh", "en")

    def __init__(self, cfg: Config, phonemizer: Phonemizer | None = None) -> None:
        self.cfg = cfg
        mc = cfg.tts.matcha
        base = Path(mc.dir)
        self.dir = base if base.is_absolute() else cfg.models.path / base
        self.buckets = [Bucket.parse(b) for b in mc.buckets]
        self.stft = StftConfig(n_fft=mc.n_fft, hop_length=mc.hop_length, win_length=mc.win_length,
                               window=mc.window)
        self._rate = mc.sample_rate
        self._phonemizer = phonemizer
        self.frontend: MatchaFrontend | None = None
        self.acoustic: ModelRuntime | None = None
        self.vocoder: ModelRuntime | None = None
        self._dynamic = False
        self._vocoder_frames = mc.vocoder_frames
        self._add_blank = mc.add_blank
        self._pad_id = mc.pad_id

    # -- loading -------------------------------------------------------------------------
    def files(self) -> dict[str, Path]:
        mc = self.cfg.tts.matcha
        return {"acoustic": self.dir / mc.acoustic, "vocoder": self.dir / mc.vocoder,
                "lexicon": self.dir / mc.lexicon, "tokens": self.dir / mc.tokens}

    def load(self) -> None:
        mc = self.cfg.tts.matcha
        files = self.files()
        missing = [f"{k} {p}" for k, p in files.items() if not p.is_file()]
        if missing:
            raise RkvoiceError("tts", "missing-model",
                               f"matcha voice files missing: {'; '.join(missing)}; run ./install.sh "
                               "--profile board (or set tts.matcha.dir to a directory holding them)")
        phonemizer = self._phonemizer or _system_phonemizer(self.cfg)
        self.frontend = MatchaFrontend.from_files(files["lexicon"], files["tokens"], phonemizer)
        threads, mask = self.cfg.tts.threads, self.cfg.tts.matcha_core_mask
        self.acoustic = open_model(files["acoustic"], threads=threads, core_mask=mask, what="Matcha acoustic")
        self.vocoder = open_model(files["vocoder"], threads=threads, core_mask=mask, what="Vocos vocoder")
        self.acoustic.load()
        self.vocoder.load()
        meta = self.acoustic.metadata
        if meta.get("sample_rate"):
            self._rate = int(meta["sample_rate"])
        self._add_blank = bool(int(meta.get("add_blank", int(mc.add_blank))))
        self._pad_id = int(meta.get("pad_id", mc.pad_id))
        if self.vocoder.metadata:
            self.stft = StftConfig.from_metadata(self.vocoder.metadata, self.stft)
        if isinstance(self.acoustic, OnnxModel):
            names = self.acoustic.input_names
            if "x" not in names:
                raise RkvoiceError("tts", "bad-model", f"{files['acoustic']} is not a Matcha acoustic model: "
                                   f"inputs {', '.join(names)} (expected x, x_length, noise_scale, length_scale)")
            shape = self.acoustic.input_shapes()[names.index("x")]
            self._dynamic = not isinstance(shape[-1], int)
        if isinstance(self.vocoder, OnnxModel):
            vshape = self.vocoder.input_shapes()[0]
            self._vocoder_frames = vshape[-1] if isinstance(vshape[-1], int) else 0
        log.info("matcha: %s + %s, %d Hz, hop %d, %s", self.acoustic.describe(), self.vocoder.describe(),
                 self._rate, self.stft.hop_length, "dynamic shapes" if self._dynamic else f"buckets {mc.buckets}")
        self.generate("你好。")  # warm-up: first NPU/ORT run allocates

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def estimator(self) -> FrameEstimator:
        mc = self.cfg.tts.matcha
        return FrameEstimator(frame_rate=self._rate / self.stft.hop_length, zh_syllables_per_s=mc.zh_syllables_per_s,
                              en_phones_per_s=mc.en_phones_per_s, margin=mc.frame_margin)

    # -- synthesis -----------------------------------------------------------------------
    def pieces(self, text: str, speed: float = 1.0) -> list[list[Unit]]:
        if self.frontend is None:
            raise RkvoiceError("tts", "not-loaded", "matcha: call load() before generate()")
        units = self.frontend.units(text)
        if not units:
            return []
        if self._dynamic:
            big = [Bucket(10**6, 10**6)]
            return split_units(units, big, self.estimator, speed, self._add_blank)
        return split_units(units, self.buckets, self.estimator, speed, self._add_blank)

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        if speed <= 0:
            raise RkvoiceError("tts", "bad-speed", f"speed must be > 0, got {speed}")
        out = [self._synthesize(p, sid, speed) for p in self.pieces(text, speed)]
        if not out:
            return np.zeros(0, dtype=np.float32), self._rate
        return np.concatenate(out).astype(np.float32), self._rate

    def _acoustic_inputs(self, ids: list[int], units: list[Unit], sid: int, speed: float) -> tuple[list[np.ndarray], int | None]:
        mc = self.cfg.tts.matcha
        n = len(ids)
        est = self.estimator.frames(units, speed)
        bucket = None
        x = np.asarray(ids, dtype=np.int64)[None, :]
        if not self._dynamic:
            bucket = choose_bucket(self.buckets, n, est)
            if n > bucket.tokens:
                raise RkvoiceError("tts", "too-long", f"matcha piece of {n} tokens exceeds the {bucket.tokens}-token bucket")
            x = np.full((1, bucket.tokens), self._pad_id, dtype=np.int64)
            x[0, :n] = ids
        values = {"x": x, "x_length": np.array([n], dtype=np.int64),
                  "noise_scale": np.array([mc.noise_scale], dtype=np.float32),
                  "length_scale": np.array([1.0 / speed], dtype=np.float32),
                  "sid": np.array([sid], dtype=np.int64)}
        assert self.acoustic is not None
        names = self.acoustic.input_names if isinstance(self.acoustic, OnnxModel) else list(mc.acoustic_inputs)
        try:
            feed = [values[name] for name in names]
        except KeyError as exc:
            raise RkvoiceError("tts", "bad-model", f"Matcha acoustic model input {exc} is not one of "
                               f"{', '.join(values)}; set tts.matcha.acoustic_inputs") from None
        return feed, (min(est, bucket.frames) if bucket else None)

    def _synthesize(self, units: list[Unit], sid: int, speed: float) -> np.ndarray:
        ids = ids_of(units, self._add_blank, self._pad_id)
        feed, est = self._acoustic_inputs(ids, units, sid, speed)
        assert self.acoustic is not None
        mel = np.asarray(self.acoustic.run(feed)[0], dtype=np.float32)
        if mel.ndim == 2:
            mel = mel[None]
        frames = mel.shape[-1]
        use = frames if est is None else min(frames, est)
        mag, a, b = self._vocode(mel[:, :, :use])
        if b is None:
            samples = istft_mag_phase(mag, a, self.stft)
        else:
            samples = istft_mag_xy(mag, a, b, self.stft)
        log.debug("matcha piece: %d tokens, %d/%d frames, %d samples", len(ids), use, frames, len(samples))
        return trim_tail(samples, self._rate)

    def _vocode(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        """mel [1, C, T] -> (mag, x, y) or (mag, phase, None), each [1, bins, T]."""
        assert self.vocoder is not None
        t = mel.shape[-1]
        fixed = self._vocoder_frames
        if fixed <= 0:
            outs = self.vocoder.run([mel])
            return _stft_parts(outs, t)
        silence = float(mel.min()) if mel.size else 0.0
        parts = []
        for start in range(0, t, fixed):  # longer mels (dynamic acoustic model) go through in windows
            chunk = mel[:, :, start : start + fixed]
            n = chunk.shape[-1]
            if n < fixed:
                chunk = np.concatenate([chunk, np.full(chunk.shape[:2] + (fixed - n,), silence, np.float32)], axis=2)
            parts.append(_stft_parts(self.vocoder.run([chunk]), n))
        if len(parts) == 1:
            return parts[0]
        return tuple(None if p[0] is None else np.concatenate(p, axis=-1) for p in zip(*parts))  # type: ignore[return-value]


def _stft_parts(outs: list[np.ndarray], frames: int) -> tuple[np.ndarray, np.ndarray, Any]:
    if len(outs) >= 3:
        return outs[0][..., :frames], outs[1][..., :frames], outs[2][..., :frames]
    if len(outs) == 2:
        return outs[0][..., :frames], outs[1][..., :frames], None
    raise RkvoiceError("tts", "bad-model", f"Vocos vocoder gave {len(outs)} outputs; expected mag, x, y "
                       "(or mag, phase)")


def _system_phonemizer(cfg: Config) -> Phonemizer | None:
    """espeak-ng for English words: the unpacked board copy (tts.matcha.espeak_lib_dir) or the system's."""
    try:
        from rkvoice.board.espeak import Espeak, espeak_lib_dir

        return Espeak.open(espeak_lib_dir(cfg)).phonemize
    except RkvoiceError as exc:
        log.warning("matcha: English words will be skipped: %s", exc)
        return None
