"""Inverse STFT in numpy for Vocos-style vocoders (magnitude + phase -> waveform).

Vocos predicts the STFT of the waveform; its parameters come from the vocoder's ONNX metadata
(``n_fft``, ``hop_length``, ``win_length``, ``window_type``, ``center``, ``normalized``) or
config.yaml. As ``torch.istft``: periodic window, overlap-add divided by the summed squared window;
with ``center`` ``T`` frames give ``hop * (T - 1)`` samples.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

_WINDOWS = ("hann",)
"""The window every Vocos model here declares (window_type); no model or config asks for another."""


@dataclass(frozen=True)
class StftConfig:
    n_fft: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    window: str = "hann"
    center: bool = True
    normalized: bool = False

    def __post_init__(self) -> None:
        if self.n_fft < 2 or self.hop_length < 1 or not 1 <= self.win_length <= self.n_fft:
            raise RkvoiceError(Stage.TTS, "bad-stft-config", "STFT config needs n_fft >= 2, hop_length >= 1 and "
                               f"1 <= win_length <= n_fft; got n_fft={self.n_fft}, hop_length={self.hop_length}, "
                               f"win_length={self.win_length}")
        if self.window not in _WINDOWS:
            raise RkvoiceError(Stage.TTS, "bad-stft-config",
                               f"unknown STFT window {self.window!r}; choose one of: {', '.join(_WINDOWS)}")
        if self.hop_length > self.win_length:
            raise RkvoiceError(Stage.TTS, "bad-stft-config", f"hop_length {self.hop_length} > win_length "
                               f"{self.win_length}: frames would not overlap and the signal cannot be reconstructed")

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any], base: StftConfig | None = None) -> StftConfig:
        """Build from ONNX custom metadata (string values), falling back to ``base``."""
        b = base or cls()

        def num(key: str, default: int) -> int:
            raw = meta.get(key)
            try:
                return default if raw is None or raw == "" else int(raw)
            except (TypeError, ValueError):
                raise RkvoiceError(Stage.TTS, "bad-stft-config", f"vocoder metadata {key}={raw!r} is not an "
                                   "integer") from None

        sizes = {k: num(k, getattr(b, k)) for k in ("n_fft", "hop_length", "win_length")}
        return cls(**sizes, window=str(meta.get("window_type", b.window) or b.window),
                   center=bool(num("center", int(b.center))), normalized=bool(num("normalized", int(b.normalized))))


def make_window(cfg: StftConfig) -> np.ndarray:
    """Periodic Hann analysis/synthesis window of ``win_length``, zero-padded (centred) to n_fft."""
    n = cfg.win_length
    w = np.hanning(n + 1)[:-1]  # numpy's is symmetric: the periodic one of n is the symmetric one of n + 1, last cut
    left = (cfg.n_fft - n) // 2
    return np.pad(w, (left, cfg.n_fft - n - left))


def istft(spec: np.ndarray, cfg: StftConfig) -> np.ndarray:
    """Complex [bins, frames] (or [1, bins, frames]) -> float32 samples, as ``torch.istft``."""
    s = np.asarray(spec)
    if s.ndim == 3 and s.shape[0] == 1:
        s = s[0]
    if s.ndim != 2 or s.shape[0] != cfg.bins:
        raise RkvoiceError(
            Stage.TTS,
            "bad-shape",
            f"istft expects [{cfg.bins}, frames] for n_fft={cfg.n_fft}, got shape {np.shape(spec)}; "
            "check n_fft in the vocoder configuration",
        )
    frames_n = s.shape[1]
    if frames_n == 0:
        return np.zeros(0, dtype=np.float32)
    n_fft, hop = cfg.n_fft, cfg.hop_length
    win = make_window(cfg)
    frames = np.fft.irfft(s.T, n=n_fft, axis=1)  # [T, n_fft]
    if cfg.normalized:
        frames = frames * np.sqrt(n_fft)
    frames *= win[None, :]

    # Overlap-add in hop-sized blocks: r strided adds instead of a Python loop over frames.
    r = -(-n_fft // hop)
    pad = r * hop - n_fft
    blocks = np.pad(frames, ((0, 0), (0, pad))).reshape(frames_n, r, hop)
    wsq = np.pad(win * win, (0, pad)).reshape(r, hop)
    out = np.zeros((frames_n + r - 1) * hop)
    env = np.zeros_like(out)
    for k in range(r):
        out[k * hop : (k + frames_n) * hop] += blocks[:, k].reshape(-1)
        env[k * hop : (k + frames_n) * hop] += np.tile(wsq[k], frames_n)

    start = n_fft // 2 if cfg.center else 0
    n_out = hop * (frames_n - 1) + (0 if cfg.center else n_fft)
    out = out[start : start + n_out]
    env = env[start : start + n_out]
    ok = env > 1e-11
    if not ok.all():
        log.debug("istft: %d samples with a zero window envelope", int((~ok).sum()))
    out[ok] /= env[ok]
    out[~ok] = 0.0
    return out.astype(np.float32)


def istft_mag_xy(mag: np.ndarray, x: np.ndarray, y: np.ndarray, cfg: StftConfig) -> np.ndarray:
    """ISTFT from Vocos's three outputs: magnitude, x = cos(phase), y = sin(phase)."""
    m = np.asarray(mag, dtype=np.float64)
    return istft(m * np.asarray(x, dtype=np.float64) + 1j * (m * np.asarray(y, dtype=np.float64)), cfg)
