"""Percentiles for bench figures: one rule (linear between the two nearest ranks, numpy's default) and one
rounding, so a p50 in one bench's JSON means what it means in another's."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def percentile(values: Iterable[float], q: float, ndigits: int | None = 1) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, rounded to ``ndigits`` (None: not rounded); None
    for no values. NaN values are a caller's bug: ValueError."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, got {q}")
    data = np.asarray(list(values), dtype=np.float64)
    if data.size == 0:
        return None
    if np.isnan(data).any():
        raise ValueError("percentile of values containing NaN")
    out = float(np.percentile(data, q))
    return out if ndigits is None else round(out, ndigits)


def median(values: Iterable[float], ndigits: int | None = 1) -> float | None:
    """``percentile(values, 50)``."""
    return percentile(values, 50, ndigits)


def spread(values: Iterable[float], ndigits: int | None = 1) -> dict[str, float | None]:
    """p50, p90 and max of ``values`` (the figures every latency table shows)."""
    data = list(values)
    return {"p50": percentile(data, 50, ndigits), "p90": percentile(data, 90, ndigits),
            "max": percentile(data, 100, ndigits)}
