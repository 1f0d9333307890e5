"""Post-processing of synthesised pieces: trims, resampling, seam fades, fixed-size blocks.

Pure functions on float32 mono arrays, and ``StreamPost``: the same for a piece that arrives in
parts (its only state is the piece so far). Nothing here reads a clock.
"""

from __future__ import annotations

import numpy as np
import soxr


def trim_lead(x: np.ndarray, rate: int, threshold: float = 0.01, keep_ms: float = 40.0) -> np.ndarray:
    """Drop leading near-silence, keeping ``keep_ms`` before the first sample above ``threshold``
    (1 % of full scale). All-quiet input gives an empty array (there is nothing to hear)."""
    x = np.asarray(x, dtype=np.float32)
    above = np.flatnonzero(np.abs(x) > threshold)
    if above.size == 0:
        return x[:0]
    start = max(0, int(above[0]) - round(keep_ms * rate / 1000.0))
    return x[start:]


def window_rms(x: np.ndarray, n: int) -> np.ndarray:
    """RMS of consecutive ``n``-sample windows (the last, partial window zero-padded)."""
    padded = np.pad(np.asarray(x, dtype=np.float64), (0, -len(x) % n))
    return np.sqrt((padded.reshape(-1, n) ** 2).mean(axis=1))


def trim_tail(x: np.ndarray, rate: int, threshold: float | None = None) -> np.ndarray:
    """Cut trailing silence and isolated artefacts after the speech.

    The clip is cut into 100 ms windows; loud windows (above ``threshold``, by default 10 % of the
    loud end of the clip, its 90th percentile, never below 0.005) form runs (pauses of up to
    100 ms, one window, inside speech don't break a run). The audio is kept up to the end of the
    last run lasting at least 400 ms (4 windows), plus 150 ms. A short noise burst after
    silence is dropped however loud it is, because it is too short to be a run of speech;
    speech at the end of the clip is kept because it belongs to the last long run. A clip
    with no long run (a very short word) is returned unchanged.
    """
    x = np.asarray(x, dtype=np.float32)
    n = max(1, round(100.0 * rate / 1000.0))
    if len(x) < 2 * n:
        return x
    rms = window_rms(x, n)
    loud = rms > (max(0.005, 0.1 * float(np.percentile(rms, 90))) if threshold is None else threshold)
    loud[1:-1] |= loud[:-2] & loud[2:]  # a quiet window between loud ones joins their runs
    edges = np.flatnonzero(np.diff(np.concatenate([[0], loud.astype(np.int8), [0]])))
    long_runs = [end for start, end in zip(edges[::2].tolist(), edges[1::2].tolist()) if end - start >= 4]
    if not long_runs:
        return x
    end = long_runs[-1] * n + round(150.0 * rate / 1000.0)
    return x[: min(len(x), end)]


def resample(x: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    """Resample once, with soxr (high quality)."""
    x = np.asarray(x, dtype=np.float32)
    if src_rate == dst_rate or len(x) == 0:
        return x
    return np.asarray(soxr.resample(x, src_rate, dst_rate, quality="HQ"), dtype=np.float32)


def ramp(n: int) -> np.ndarray:
    """A raised-cosine fade-in of ``n`` samples (never exactly 0 or 1)."""
    return (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, endpoint=False) + np.pi / n)).astype(np.float32)


def fade_edges(x: np.ndarray, rate: int, ms: float = 10.0) -> np.ndarray:
    """Raised-cosine fade-in and fade-out of ``ms`` each, so seams between pieces don't click."""
    x = np.array(x, dtype=np.float32, copy=True)
    n = min(round(ms * rate / 1000.0), len(x) // 2)
    if n <= 0:
        return x
    x[:n] *= ramp(n)
    x[-n:] *= ramp(n)[::-1]
    return x


def to_blocks(x: np.ndarray, block: int) -> np.ndarray:
    """Cut into rows of ``block`` samples (> 0), zero-padding the last one. Shape (n_blocks, block)."""
    return np.pad(np.asarray(x, dtype=np.float32), (0, -len(x) % block)).reshape(-1, block)


def to_pcm16(x: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] -> int16 (clipped)."""
    return (np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0) * 32767.0).round().astype(np.int16)


def prepare_piece(samples: np.ndarray, rate: int, out_rate: int, block: int, fade_ms: float = 10.0) -> np.ndarray:
    """Engine output -> fixed-size int16 blocks at the output rate (trims, resample, fades)."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    x = trim_tail(trim_lead(x, rate), rate)
    x = resample(x, rate, out_rate)
    x = fade_edges(x, out_rate, fade_ms)
    return to_pcm16(to_blocks(x, block))


class StreamPost:
    """``prepare_piece`` for one piece whose samples arrive in parts: ``push(part)`` returns the int16
    blocks ready so far, ``push(part, last=True)`` the rest. The lead trim waits for the first sound;
    the resampler is soxr's stream (its output equals the one-shot call's); the fade-in is applied as
    the start goes out, the fade-out (held back: ``fade_ms``) and the tail trim at the end, where the
    whole piece is known; blocks carry their remainder to the next part, zero-padding only the last.
    Joined, the blocks equal ``prepare_piece`` of the whole piece (the tail trim cannot take back
    what already went out; the engine makes its last part long enough to hold the tail)."""

    def __init__(self, rate: int, out_rate: int, block: int, fade_ms: float = 10.0) -> None:
        self.rate, self.block = rate, block
        self._raw: list[np.ndarray] = []
        self._start: int | None = None  # where the lead trim cut (None: no sound yet)
        self._fed = 0  # raw samples from _start on handed to the resampler
        self._sox = soxr.ResampleStream(rate, out_rate, 1, dtype="float32", quality="HQ") if rate != out_rate else None
        self._fade = round(fade_ms * out_rate / 1000.0)
        self._out = 0  # output samples made so far (where the fade-in stands)
        self._held = np.zeros(0, dtype=np.float32)

    def push(self, part: np.ndarray, last: bool = False) -> np.ndarray:
        x = np.concatenate([*self._raw, np.asarray(part, dtype=np.float32).reshape(-1)])
        self._raw = [x]
        if self._start is None and np.abs(x).max(initial=0.0) > 0.01:
            self._start = len(x) - len(trim_lead(x, self.rate))
        if self._start is None:
            return to_blocks(np.zeros(0, dtype=np.float32), self.block)
        end = max(self._fed, len(trim_tail(x[self._start:], self.rate))) if last else len(x) - self._start
        new = x[self._start + self._fed:self._start + end]
        self._fed = end
        y = new if self._sox is None else np.asarray(self._sox.resample_chunk(new, last=last), dtype=np.float32)
        if self._out < self._fade and len(y):
            n = min(len(y), self._fade - self._out)
            y = y.copy()
            y[:n] *= ramp(self._fade)[self._out:self._out + n]
        self._out += len(y)
        y = np.concatenate([self._held, y])
        if last:
            n = min(self._fade, len(y))
            if n:
                y[len(y) - n:] *= ramp(self._fade)[::-1][self._fade - n:]
            self._held = y[:0]
            return to_pcm16(to_blocks(y, self.block))
        ready = max(0, len(y) - self._fade) // self.block * self.block
        self._held = y[ready:]
        return to_pcm16(to_blocks(y[:ready], self.block))
