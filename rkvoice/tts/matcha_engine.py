"""The ``matcha`` TTS engine: zh-en frontend -> Matcha (mel) -> Vocos (STFT) -> numpy ISTFT.

On the board the models are fixed-shape .rknn buckets on the NPU (``matcha-t{K}``: a decoder for
pieces of up to K tokens over a mel window of W frames; ``vocos-f{N}``: N frames -> mag/x/y);
elsewhere their .onnx twins, or the published dynamic-shape ONNX files, run through onnxruntime,
by the same code.

The converter splits Matcha at its length regulator (models/matcha_split.py): the encoder and
duration predictor (``matcha-encoder.onnx``) run on the CPU in fp32, the alignment in numpy
(``rkvoice.npu.length_regulator.align``), the flow-matching decoder on the NPU. The frame count is
known before the NPU call, so a piece goes straight to the smallest window holding it. A piece too
long for every window is synthesised in two halves; a mel longer than every Vocos bucket runs in
overlapping windows of the largest. The ODE noise is seeded per ``generate`` call
(``tts.matcha.seed``): one text always gives the same audio.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.npu import runtime as npu_runtime
from rkvoice.npu.istft import StftConfig, istft_mag_xy
from rkvoice.npu.length_regulator import align
from rkvoice.tts.matcha_buckets import Bucket, check_pairing, find_models, load_bucket, voice_files
from rkvoice.tts.matcha_frames import halve, split_units, vocos_windows
from rkvoice.tts.matcha_frontend import MatchaFrontend, Phonemizer, Unit, system_phonemizer

log = logging.getLogger(__name__)

MAX_SPLITS = 6
"""A piece is halved at most this deep when its frames overflow every window (64 pieces)."""


class MatchaTts:
    """Matcha + Vocos voice, Chinese and English (zh-en model, English through espeak-ng)."""

    name = "matcha"
    languages = ("zh", "en")

    def __init__(self, cfg: Config, phonemizer: Phonemizer | None = None) -> None:
        self.cfg = cfg
        mc = cfg.tts.matcha
        base = Path(mc.dir)
        self.dir = base if base.is_absolute() else cfg.models.path / base
        self.stft = StftConfig(n_fft=mc.n_fft, hop_length=mc.hop_length, win_length=mc.win_length,
                               window=mc.window)
        self._rate = mc.sample_rate
        self._phonemizer = phonemizer
        self.frontend: MatchaFrontend | None = None
        self.acoustic: list[Bucket] = []
        """Matcha buckets, smallest first (one dynamic bucket for the published ONNX)."""
        self.vocoders: list[Bucket] = []
        self._add_blank = mc.add_blank
        self._pad_id = mc.pad_id
        self.piece_chars = (mc.first_chars, mc.chunk_chars)
        """First and later piece lengths the speaker cuts text into for this voice (24/40: docs/performance.md, board)."""
        self.overflows = 0
        """Pieces whose frame count overflowed every decoder window (halved)."""
        self.encoder: npu_runtime.OnnxModel | None = None
        """A split voice's CPU encoder."""
        self._encoder_inputs: list[str] = []

    # -- loading -------------------------------------------------------------------------
    def files(self) -> dict[str, Path]:
        """Every file ``load()`` reads (a missing bucket is named by its expected path)."""
        return voice_files(self.dir, self.cfg.tts.matcha)

    def load(self) -> None:
        mc = self.cfg.tts.matcha
        files = self.files()
        missing = [f"{k} {p}" for k, p in files.items() if not p.is_file()]
        if missing:
            raise RkvoiceError(Stage.TTS, "missing-model",
                               f"matcha voice files missing: {'; '.join(missing)}; run ./install.sh "
                               "--profile board (or set tts.matcha.dir to a directory holding them)")
        phonemizer = self._phonemizer or system_phonemizer(self.cfg)
        self.frontend = MatchaFrontend.from_files(files["lexicon"], files["tokens"], phonemizer)
        threads, mask = self.cfg.tts.threads, self.cfg.tts.matcha_core_mask
        self.close()
        try:  # appended one by one so that a failure releases the models loaded before it
            for group, kind, pattern in ((self.acoustic, "matcha", mc.acoustic), (self.vocoders, "vocos", mc.vocoder)):
                for p in find_models(self.dir, pattern, mc.runtime):
                    group.append(load_bucket(p, kind, threads, mask))
                group.sort(key=lambda b: (b.window, b.size))
            self._load_encoder(threads)
            self._configure()
        except BaseException:
            self.close()
            raise
        log.info("matcha: Matcha %s + Vocos %s (%s), %d Hz, hop %d",
                 ", ".join(b.label for b in self.acoustic), ", ".join(b.label for b in self.vocoders),
                 self.acoustic[0].model.describe(), self._rate, self.stft.hop_length)
        self._warm_up()

    def _load_encoder(self, threads: int) -> None:
        """A split voice: every decoder bucket names the same CPU encoder; load it (onnxruntime, fp32)."""
        encoders = {b.encoder for b in self.acoustic}
        if None in encoders:  # the dynamic whole graph (a mix with decoders: refused by _configure)
            return
        if len(encoders) != 1:
            raise RkvoiceError(Stage.TTS, "bad-model", "matcha: the decoders name different encoders "
                               f"({', '.join(b.path.name for b in self.acoustic)}); rebuild them together")
        path = self.acoustic[0].encoder
        assert path is not None
        model = npu_runtime.OnnxModel(path, threads=threads, what="Matcha encoder")
        model.load()
        names = [s.name for s in model.input_specs()]
        outs = [s.name for s in model.output_specs()]
        if "x" not in names or outs != ["mu_x", "cum_durations", "mel_frames", "decoder_frames"]:
            model.close()
            raise RkvoiceError(Stage.TTS, "bad-model", f"{path}: not a Matcha encoder (inputs {names}, outputs {outs}); "
                               "convert the published ONNX with models/convert_rknn.py matcha")
        self.encoder, self._encoder_inputs = model, names

    def _configure(self) -> None:
        """Settings from the models' metadata, and the checks that span two models."""
        mc = self.cfg.tts.matcha
        for group, what in ((self.acoustic, "Matcha"), (self.vocoders, "Vocos")):
            if any(b.dynamic for b in group) and len(group) > 1:
                raise RkvoiceError(Stage.TTS, "bad-model", f"{what}: mix of dynamic and fixed models "
                                   f"({', '.join(b.path.name for b in group)}); keep one dynamic model or the buckets")
        meta = self.acoustic[0].meta
        if self.encoder is not None:
            meta = {**dict(self.encoder.metadata), **meta}
        if meta.get("sample_rate"):
            self._rate = int(meta["sample_rate"])
        if "add_blank" in meta:
            self._add_blank = bool(int(meta["add_blank"]))
        elif meta.get("voice") == "zh en-us":  # sherpa-onnx: the zh-en model takes no interleaved blanks
            self._add_blank = False
        self._pad_id = int(meta.get("pad_id", mc.pad_id))
        if vmeta := self.vocoders[0].meta:
            self.stft = StftConfig.from_metadata(vmeta, self.stft)
        check_pairing(self.acoustic, self.vocoders, self.stft.n_fft, self.stft.bins)
        if fixed := max((v.size for v in self.vocoders), default=0):
            vocos_windows(fixed, fixed, mc.vocoder_context)  # raises now if the context leaves no centre

    def _warm_up(self) -> None:
        """One call per bucket: the first NPU/ORT run of a model allocates its buffers."""
        assert self.frontend is not None
        units = self.frontend.units("你好。") or self.frontend.units("ok")
        ids = self.frontend.ids(units, self._add_blank, self._pad_id) or [self._pad_id]
        rng = np.random.default_rng(self.cfg.tts.matcha.seed)
        for b in self.acoustic:
            if self.encoder is not None:
                mu_x, cum, frames, dec_frames = self._encode(ids[: b.size], 1.0)
                self._decode(b, mu_x, cum, min(frames, b.window), min(dec_frames, b.window), rng)
            else:
                self._dynamic_run(b, ids, 0, 1.0)
        for v in self.vocoders:
            v.run({v.inputs[0].name: np.full((1, v.n_mels, v.size or 8), -11.5, np.float32)})

    def close(self) -> None:
        for b in self.acoustic + self.vocoders:
            b.model.close()
        self.acoustic, self.vocoders = [], []
        if self.encoder is not None:
            self.encoder.close()
            self.encoder = None

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def max_tokens(self) -> int:
        """Most tokens one piece may have: the largest bucket (no limit for a dynamic model)."""
        return max(b.size for b in self.acoustic) if self.acoustic and not self.acoustic[0].dynamic else 10**6

    # -- synthesis -----------------------------------------------------------------------
    def _loaded_frontend(self) -> MatchaFrontend:
        """The frontend, once ``load()`` has set it and the Matcha buckets up."""
        if self.frontend is None or not self.acoustic:
            raise RkvoiceError(Stage.TTS, "not-loaded", "matcha: call load() before generate()")
        return self.frontend

    def count(self, units: list[Unit]) -> int:
        return len(self._loaded_frontend().ids(units, self._add_blank))

    def pieces(self, text: str) -> list[list[Unit]]:
        """Text -> pieces whose tokens fit the largest bucket (nothing dropped, nothing truncated)."""
        units = self._loaded_frontend().units(text)
        return split_units(units, self.max_tokens, self.count) if units else []

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        if speed <= 0:
            raise RkvoiceError(Stage.TTS, "bad-speed", f"speed must be > 0, got {speed}")
        rng = np.random.default_rng(self.cfg.tts.matcha.seed)
        out = [audio for piece in self.pieces(text) for audio in self._synthesize(piece, sid, speed, rng)]
        if not out:
            return np.zeros(0, dtype=np.float32), self._rate
        return np.concatenate(out).astype(np.float32), self._rate

    def _text_feed(self, ids: list[int], speed: float) -> dict[str, np.ndarray]:
        """A Matcha graph's text inputs: ``ids``, their count, the noise and length scales."""
        return {"x": np.array([ids], dtype=np.int64), "x_length": np.array([len(ids)], dtype=np.int64),
                "noise_scale": np.array([self.cfg.tts.matcha.noise_scale], dtype=np.float32),
                "length_scale": np.array([1.0 / speed], dtype=np.float32)}

    def _dynamic_run(self, b: Bucket, ids: list[int], sid: int, speed: float) -> np.ndarray:
        """mel [1, n_mels, frames] of one call of the dynamic whole graph (its frames: the mel's length)."""
        return b.mel(self._text_feed(ids, speed) | {"sid": np.array([sid], dtype=np.int64)})

    def _encode(self, ids: list[int], speed: float) -> tuple[np.ndarray, np.ndarray, int, int]:
        """The split voice's CPU half: (encoder output [1, N, C], cumulative durations [1, N], T, T')."""
        assert self.encoder is not None
        feed = self._text_feed(ids, speed)  # never empty: a piece has a unit with ids (split_units, halve)
        mu_x, cum, frames, dec_frames = self.encoder.run([feed[k] for k in self._encoder_inputs])
        return mu_x, cum, int(np.asarray(frames).reshape(-1)[0]), int(np.asarray(dec_frames).reshape(-1)[0])

    def _decode(self, b: Bucket, mu_x: np.ndarray, cum: np.ndarray, frames: int, dec_frames: int,
                rng: np.random.Generator) -> np.ndarray:
        """Aligned input over the bucket's window -> the decoder (NPU) -> mel [1, n_mels, window]."""
        mu, mask = align(mu_x, cum, frames, b.window)
        feed = {"mu": mu, "mask": mask, "noise": rng.standard_normal((1, b.n_mels, b.window), dtype=np.float32),
                "noise_scale": np.array([self.cfg.tts.matcha.noise_scale], dtype=np.float32),
                "decoder_frames": np.array([dec_frames], dtype=np.float32)}
        return b.mel(feed)

    def _synthesize(self, piece: list[Unit], sid: int, speed: float, rng: np.random.Generator,
                    depth: int = 0) -> list[np.ndarray]:
        """A split voice: encoder on the CPU -> the smallest decoder window holding T' -> mel cut at T;
        the dynamic whole graph: one call, its mel. Then Vocos."""
        ids = self._loaded_frontend().ids(piece, self._add_blank, self._pad_id)
        if self.encoder is None:
            mel = self._dynamic_run(self.acoustic[0], ids, sid, speed)  # the one dynamic model (_configure)
            where = "the dynamic graph"
        else:
            mu_x, cum, frames, dec_frames = self._encode(ids, speed)
            bucket = next((b for b in self.acoustic if b.window >= dec_frames), None)  # sorted by window
            if bucket is None:
                self.overflows += 1
                return self._in_halves(piece, len(ids), dec_frames, sid, speed, rng, depth)
            if frames <= 0:
                return []
            mel = self._decode(bucket, mu_x, cum, frames, dec_frames, rng)[:, :, :frames]
            where = f"{bucket.label} (window {bucket.window})"
        if mel.shape[-1] <= 0:
            return []
        samples = self._vocode(mel)
        log.debug("matcha piece: %d tokens, %d frames in %s, %d samples", len(ids), mel.shape[-1], where, len(samples))
        return [samples]

    def _in_halves(self, piece: list[Unit], n_ids: int, frames: int, sid: int, speed: float,
                   rng: np.random.Generator, depth: int) -> list[np.ndarray]:
        """A piece longer than every window: synthesised as two halves (longer text is split, never cut)."""
        if depth >= MAX_SPLITS:
            raise RkvoiceError(Stage.TTS, "too-long", f"matcha: {piece[0].text!r}... still needs {frames} "
                               f"frames after {depth} splits; is the model's duration output broken?")
        log.info("matcha: %d tokens need %d frames > every window; synthesising it in two halves", n_ids, frames)
        a, b = halve(piece)
        return self._synthesize(a, sid, speed, rng, depth + 1) + self._synthesize(b, sid, speed, rng, depth + 1)

    def _vocode(self, mel: np.ndarray) -> np.ndarray:
        """mel [1, C, T] -> waveform (Vocos in the smallest frame bucket holding T, or windows)."""
        frames = mel.shape[-1]
        fit = next((v for v in self.vocoders if v.dynamic or v.size >= frames), None)  # sorted by size
        mag, x, y = self._vocos_call(fit, mel, frames) if fit else self._windowed(mel)
        return istft_mag_xy(mag, x, y, self.stft)

    def _vocos_call(self, v: Bucket, mel: np.ndarray, keep: int) -> list[np.ndarray]:
        """Run ``v`` on ``mel`` zero-padded to its size (as Vocos's first convolution pads: stand-in, 150 of
        200 frames, 66.6 dB from a 150-frame run, 43-44 dB padded with -11.5 or the last frame); the first
        ``keep`` frames of mag, x, y."""
        t = mel.shape[-1]
        if not v.dynamic and t < v.size:
            mel = np.concatenate([mel, np.zeros(mel.shape[:2] + (v.size - t,), np.float32)], axis=2)
        return [o[..., :keep] for o in v.run({v.inputs[0].name: mel})]

    def _windowed(self, mel: np.ndarray) -> list[np.ndarray]:
        """A mel longer than the largest Vocos bucket: overlapping windows, centres kept."""
        v = self.vocoders[-1]
        windows = []  # per window: the centres of mag, x, y
        for start, k0, k1 in vocos_windows(mel.shape[-1], v.size, self.cfg.tts.matcha.vocoder_context):
            outs = self._vocos_call(v, mel[:, :, start : start + v.size], v.size)
            windows.append([o[..., k0 - start : k1 - start] for o in outs])
        return [np.concatenate(parts, axis=-1) for parts in zip(*windows)]
