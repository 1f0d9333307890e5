"""How much echo a canceller removed: the measure the echo bench reports and the echo tests assert on."""

from __future__ import annotations

import numpy as np


def erle_db(echo: np.ndarray, residual: np.ndarray) -> float:
    """Echo return loss enhancement: the echo's power over what is left of it after cancelling, in dB
    (both silent: 0 dB)."""
    e = float(np.mean(np.square(echo, dtype=np.float64)))
    r = float(np.mean(np.square(residual, dtype=np.float64)))
    return float(10.0 * np.log10((e + 1e-12) / (r + 1e-12)))
