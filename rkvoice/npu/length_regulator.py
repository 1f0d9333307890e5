"""Matcha's length regulator (alignment) in numpy, between the CPU encoder and the NPU decoder.

Its output length depends on the data, which a fixed-shape NPU graph cannot express.
"""

from __future__ import annotations

import numpy as np

from rkvoice.errors import RkvoiceError, Stage


def align(mu_x: np.ndarray, cum_durations: np.ndarray, frames: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """mu_x [1, N, C], cum_durations [1, N] (the graph's CumSum), T = ``frames`` -> (mu [1, C, window],
    mask [1, 1, window]): the original graph's ``mu_y`` and ``y_mask`` zero-padded. Frame t takes
    token j with cum[j-1] <= t < cum[j] (compared in float32 like the graph); frames from T masked."""
    mu = np.asarray(mu_x, np.float32)
    cum = np.asarray(cum_durations, np.float32).reshape(-1)
    if mu.ndim != 3 or mu.shape[0] != 1 or mu.shape[1] != cum.size:
        raise RkvoiceError(Stage.TTS, "bad-shape", f"Matcha alignment needs mu_x [1, N, C] and cum_durations [1, N]; "
                           f"got {mu.shape} and {np.shape(cum_durations)}")
    if not 0 <= frames <= window:
        raise RkvoiceError(Stage.TTS, "too-long", f"{frames} frames do not fit the decoder's window of {window}; "
                           "run the piece in a larger bucket or split it")
    t = np.arange(frames, dtype=np.float32)
    token = np.searchsorted(cum, t, side="right")  # first j with t < cum[j]
    inside = token < cum.size
    out = np.zeros((1, mu.shape[2], window), np.float32)
    out[0, :, :frames][:, inside] = mu[0, token[inside]].T
    mask = np.zeros((1, 1, window), np.float32)
    mask[..., :frames] = 1.0
    return out, mask
