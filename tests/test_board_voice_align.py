"""The split Matcha's alignment in numpy equals the graph's path product (no toolkit needed)."""

from __future__ import annotations

import numpy as np
import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.npu.length_regulator import align


def graph_alignment(mu_x: np.ndarray, cum: np.ndarray, frames: int, dec_frames: int) -> np.ndarray:
    """matcha-tts's synthesise: sequence_mask(cum, T') -> path - shifted path, times the frame mask
    (t < T), then mu_y = path^T @ mu_x, in float32 like the exported graph ([1, C, T'])."""
    t = np.arange(dec_frames, dtype=np.float32)
    below = (t[None, :] < cum.reshape(-1)[:, None]).astype(np.float32)  # [N, T']
    path = below - np.concatenate([np.zeros((1, dec_frames), np.float32), below[:-1]], axis=0)
    path *= (np.arange(dec_frames) < frames).astype(np.float32)[None, :]
    return (path.T @ mu_x[0]).T[None]


@pytest.mark.parametrize("scale", [1.0, 0.8, 1.37])
def test_align_equals_the_graph_path_for_fractional_durations(scale):
    rng = np.random.default_rng(4)
    n, c = 23, 80
    mu_x = rng.standard_normal((1, n, c)).astype(np.float32)
    durations = np.ceil(np.exp(rng.normal(1.8, 0.6, n))).astype(np.float32) * np.float32(scale)
    durations[[3, 9]] = 0.0  # tokens that last no frame at all
    cum = np.cumsum(durations, dtype=np.float32)[None]
    frames = max(1, int(np.float32(durations.sum())))  # the graph's clamp_min(sum, 1).long()
    dec_frames = -(-frames // 4) * 4
    window = dec_frames + 40
    mu, mask = align(mu_x, cum, frames, window)
    ref = graph_alignment(mu_x, cum, frames, dec_frames)
    assert mu.shape == (1, c, window) and mask.shape == (1, 1, window)
    assert np.array_equal(mu[:, :, :dec_frames], ref)  # exact: a path picks one token per frame
    assert not mu[:, :, frames:].any() and mask[..., :frames].all() and not mask[..., frames:].any()


def test_align_refuses_a_window_too_small():
    with pytest.raises(RkvoiceError, match="do not fit"):
        align(np.zeros((1, 2, 4), np.float32), np.array([[3.0, 6.0]], np.float32), 6, 4)
