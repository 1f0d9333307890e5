"""Smart Turn v3's input computed in numpy: Whisper's log-mel features of the last 8 s of audio, the
way the model was trained (rkvoice.hear.turn_end runs the model)."""

from __future__ import annotations

import numpy as np

from rkvoice.hear.vad import SAMPLE_RATE

WINDOW_S = 8  # the model reads the last 8 s (zero-padded in front when shorter)
N_FFT = 400  # Whisper's STFT: 25 ms windows, 10 ms hop, 80 mel bands
HOP = 160
N_MELS = 80
FRAMES = WINDOW_S * SAMPLE_RATE // HOP  # 800


def _slaney_mel(hz: np.ndarray) -> np.ndarray:
    """Hz -> mel on the Slaney scale (linear to 1 kHz, logarithmic above), as Whisper's filters use."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz * 3.0 / 200.0
    log_part = 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(hz >= 1000.0, log_part, linear)


def _slaney_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp((mel - 15.0) * (np.log(6.4) / 27.0)), mel * 200.0 / 3.0)


def mel_filters() -> np.ndarray:
    """(80, 201): triangular filters evenly spaced in Slaney mels over 0-8 kHz, each scaled to unit
    area (librosa's ``norm="slaney"``), the bank Whisper's features are made with."""
    edges = _slaney_hz(np.linspace(_slaney_mel(np.array(0.0)), _slaney_mel(np.array(SAMPLE_RATE / 2)), N_MELS + 2))
    bins = np.linspace(0.0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lo) / (mid - lo)
    falling = (hi - bins[None, :]) / (hi - mid)
    bank = np.clip(np.minimum(rising, falling), 0.0, None)
    return bank * (2.0 / (hi - lo))


_FILTERS = mel_filters()
_HANN = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic, as torch.hann_window


def last_window(samples: np.ndarray) -> np.ndarray:
    """The last 8 s of ``samples`` (float32), zero-padded in front when shorter."""
    x = np.asarray(samples, dtype=np.float32)[-WINDOW_S * SAMPLE_RATE:]
    return np.pad(x, (WINDOW_S * SAMPLE_RATE - len(x), 0))


def log_mel(samples: np.ndarray) -> np.ndarray:
    """(80, 800) float32: Whisper's log-mel features of the last 8 s, the way the model was trained
    (transformers' WhisperFeatureExtractor with chunk_length 8 and do_normalize): the 8 s waveform
    scaled to zero mean and unit variance, a centred 400-point STFT (reflect padding, hop 160),
    power through the mel bank, log10 floored at 1e-10 and at 8 below its peak, then (x + 4) / 4."""
    x = last_window(samples)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:FRAMES]  # the last frame is dropped
    power = np.abs(np.fft.rfft(frames * _HANN, axis=-1)) ** 2
    mel = np.log10(np.maximum(_FILTERS @ power.T, 1e-10))
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)
