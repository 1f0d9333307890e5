"""bench.soak's record of each request and footprint sample, and the figures and verdict made from it
(goals: every request answered, RSS growth after the warm-up < 5 %, threads and fds flat, p90 latency
of the last 50 requests at most 1.10 x the first 50)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.support import Footprint, percentile, spread

KINDS = ("tool", "llm", "transcribe", "synthesize", "handle")
WINDOW = 50
"""Requests in the first and the last window compared for drift."""
GOALS = {"rss_growth_pct_below": 5.0, "p90_ratio_at_most": 1.10}


@dataclass
class Step:
    """One request's record."""

    index: int
    kind: str
    latency_ms: float | None = None
    cpu_ms: float = 0.0
    wall_ms: float = 0.0
    ok: bool = False
    detail: str = ""
    route: str = ""


@dataclass
class Sample:
    step: int
    fp: Footprint
    load: float


@dataclass
class Record:
    steps: list[Step] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


def summarise(record: Record, kinds: list[str], warmup: int) -> dict[str, Any]:
    """The figures and the verdict (see the module docstring)."""
    steps = record.steps
    failed = [s for s in steps if not s.ok]
    by_kind = {k: [s for s in steps if s.kind == k] for k in KINDS}
    after = [s for s in record.samples if s.step >= warmup] or record.samples[-1:]
    base, last = after[0], after[-1]
    growth = 100.0 * (last.fp.rss_kb - base.fp.rss_kb) / base.fp.rss_kb
    quarter = max(1, len(after) // 4)

    def trend(values: list[int]) -> int:
        """The busiest sample of the last quarter minus the busiest of the first (short-lived threads
        such as the wake cue's may be alive at one sample)."""
        return max(values[-quarter:]) - max(values[:quarter])

    threads = [s.fp.threads for s in after]
    fds = [s.fp.fds for s in after]
    first = [s.latency_ms for s in steps[:WINDOW] if s.latency_ms is not None]
    lastw = [s.latency_ms for s in steps[-WINDOW:] if s.latency_ms is not None]
    p90_first, p90_last = percentile(first, 90), percentile(lastw, 90)
    ratio = round(p90_last / p90_first, 3) if p90_first and p90_last else None
    cpu_first = percentile([s.cpu_ms for s in steps[:WINDOW]], 50)
    cpu_last = percentile([s.cpu_ms for s in steps[-WINDOW:]], 50)
    checks = {
        "all_answered": len(steps) == len(kinds) and not failed,
        "rss_growth": growth < GOALS["rss_growth_pct_below"],
        "threads_flat": trend(threads) <= 0,
        "fds_flat": trend(fds) <= 0,
        "p90_drift": ratio is not None and ratio <= GOALS["p90_ratio_at_most"],
    }
    return {
        "requests": {"asked": len(kinds), "done": len(steps), "failed": len(failed),
                     "by_kind": {k: len(v) for k, v in by_kind.items()},
                     "failures": [{"index": s.index, "kind": s.kind, "detail": s.detail} for s in failed[:20]]},
        "latency_ms": {k: spread(s.latency_ms for s in v if s.latency_ms is not None)
                       for k, v in by_kind.items() if v},
        "latency_note": "local turns: end of speech -> first audio; transcribe: audio-stop -> transcript; "
                        "synthesize: request -> first audio chunk; handle: request -> handled",
        "drift": {"window": WINDOW, "p90_first_ms": p90_first, "p90_last_ms": p90_last, "p90_ratio": ratio,
                  "cpu_ms_p50_first": cpu_first, "cpu_ms_p50_last": cpu_last,
                  "cpu_ratio": round(cpu_last / cpu_first, 3) if cpu_first and cpu_last else None},
        "rss_mb": {"after_warmup": base.fp.rss_mb, "last": last.fp.rss_mb,
                   "max": max(s.fp.rss_mb for s in after), "warmup_requests": warmup},
        "rss_growth_pct": round(growth, 2),
        "threads": {"after_warmup": base.fp.threads, "last": last.fp.threads, "min": min(threads),
                    "max": max(threads), "trend": trend(threads)},
        "fds": {"after_warmup": base.fp.fds, "last": last.fp.fds, "min": min(fds), "max": max(fds),
                "trend": trend(fds)},
        "series": [{"request": s.step, "rss_mb": s.fp.rss_mb, "threads": s.fp.threads, "fds": s.fp.fds,
                    "load": s.load} for s in record.samples],
        "goals": GOALS,
        "checks": checks,
        "pass": all(checks.values()),
    }
