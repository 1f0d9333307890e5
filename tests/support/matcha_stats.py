"""Calls and time per Matcha/Vocos bucket and per CPU stage of a loaded Matcha voice, for
bench.board_report and the board-voice tests (the engine keeps no timings of its own).

    with MatchaStats(tts) as stats:     # wraps the voice's models and stages until the block ends
        tts.generate(text)
    stats.report()   # {"matcha": {"t32": {...}}, "vocos": {...}, "overflows": {"count"}, "stages": {...}}

``stages`` are the split voice's CPU work: ``encoder_cpu``, ``align`` and ``istft``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rkvoice.tts import matcha_engine
from rkvoice.tts.matcha_engine import MatchaTts


class MatchaStats:
    def __init__(self, tts: MatchaTts) -> None:
        self.tts = tts
        tts.overflows = 0
        self.times: dict[str, list[float]] = {}
        """Key -> [calls, total seconds, longest call]."""
        self._undo: list[tuple[Any, str, Callable[..., Any] | None]] = []
        for b in tts.acoustic + tts.vocoders:
            self._wrap(b.model, "run", f"{b.kind} {b.label}")
        if tts.encoder is not None:
            self._wrap(tts.encoder, "run", "encoder_cpu")
        self._wrap(matcha_engine, "align", "align")
        self._wrap(matcha_engine, "istft_mag_xy", "istft")

    def _wrap(self, owner: Any, attr: str, key: str) -> None:
        fn = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                calls, total, longest = self.times.get(key, (0, 0.0, 0.0))
                self.times[key] = [calls + 1, total + dt, max(longest, dt)]

        self._undo.append((owner, attr, fn if attr in vars(owner) else None))
        setattr(owner, attr, timed)

    def close(self) -> None:
        """Unwrap (the counts stay)."""
        for owner, attr, fn in reversed(self._undo):
            if fn is None:
                delattr(owner, attr)  # the class's method shows again
            else:
                setattr(owner, attr, fn)
        self._undo = []

    def __enter__(self) -> MatchaStats:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _figures(self, key: str) -> dict[str, Any]:
        calls, total, longest = self.times.get(key, (0, 0.0, 0.0))
        return {"calls": int(calls), "mean_ms": round(1000 * total / calls, 2) if calls else 0.0,
                "max_ms": round(1000 * longest, 2), "total_ms": round(1000 * total, 1)}

    def report(self) -> dict[str, dict[str, Any]]:
        buckets = {kind: {b.label: {**self._figures(f"{kind} {b.label}"), "size": b.size, "window": b.window,
                                    "file": b.path.name} for b in group}
                   for kind, group in (("matcha", self.tts.acoustic), ("vocos", self.tts.vocoders))}
        stages: dict[str, Any] = {k: self._figures(k) for k in ("encoder_cpu", "align", "istft") if k in self.times}
        return {**buckets, "overflows": {"count": self.tts.overflows}, "stages": stages}
