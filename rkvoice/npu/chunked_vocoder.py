"""Run a fixed-length vocoder over a mel of any length, in overlapping windows.

The NPU build of MB-MelGAN takes a fixed number of frames (<= 50: longer windows overflow the
compiler's registers). Each window of ``frames`` keeps its centre; ``context`` frames either side
only feed the generator's receptive field, the last window is padded with the mel's quietest value.
Against one whole-mel CPU run: context 12 of 50 frames gives ~34 dB SNR, 16 ~48 dB.
"""

from __future__ import annotations

import numpy as np

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.npu.runtime import ModelRuntime


class ChunkedVocoder:
    """mel [1, T, C] -> waveform [T * hop] through a runtime taking [1, frames, C] (frames > 2 * context:
    the tts.fastspeech2 config refuses any other window)."""

    def __init__(self, runtime: ModelRuntime, frames: int = 50, context: int = 12, hop: int = 300) -> None:
        self.runtime = runtime
        self.frames = frames
        self.context = context
        self.hop = hop

    def windows(self, total: int) -> list[tuple[int, int, int]]:
        """(window start, kept from, kept to) in frames for a mel of ``total`` frames."""
        out, core = [], self.frames - 2 * self.context  # core: the frames kept of each window
        for keep0 in range(0, total, core):
            # stay inside the mel where we can: real context beats padding
            start = min(max(0, keep0 - self.context), total - self.frames) if total >= self.frames else 0
            out.append((start, keep0, min(total, keep0 + core)))
        return out

    def __call__(self, mel: np.ndarray) -> np.ndarray:
        mel = np.asarray(mel, dtype=np.float32)
        if mel.ndim != 3 or mel.shape[0] != 1:
            raise RkvoiceError(Stage.TTS, "bad-shape", f"vocoder expects a mel [1, T, C], got {mel.shape}")
        total = mel.shape[1]
        if total == 0:
            return np.zeros(0, dtype=np.float32)
        fill = float(mel.min())
        pieces = []
        for start, keep0, keep1 in self.windows(total):
            win = mel[:, start : start + self.frames]
            win = np.pad(win, ((0, 0), (0, self.frames - win.shape[1]), (0, 0)), constant_values=fill)
            wave = np.asarray(self.runtime.run([np.ascontiguousarray(win)])[0], dtype=np.float32).reshape(-1)
            if wave.size != self.frames * self.hop:
                raise RkvoiceError(Stage.TTS, "bad-model", f"vocoder gave {wave.size} samples for {self.frames} frames; "
                                   f"expected {self.frames * self.hop} (hop {self.hop})")
            pieces.append(wave[(keep0 - start) * self.hop : (keep1 - start) * self.hop])
        return np.concatenate(pieces)
