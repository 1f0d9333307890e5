"""What tests and benches share and the product does not use: controlled clocks, microphone stand-ins,
the character error rate, percentiles, this process's footprint, a bench's JSON with the machine it ran
on. Two heavier parts are imported from their modules: ``tests.support.sink`` (a Speaker on a draining
sink) and ``tests.support.daemon`` (the real daemon on a scripted microphone).

Run benches from the repository root (``py312/bin/python -m bench.<name>``) and tests with
``py312/bin/python -m pytest``: both import this as ``tests.support``."""

from tests.support.cer import cer, normalise
from tests.support.clock import FakeClock, ManualClock, ScaledClock, SleepingClock, SleepyClock
from tests.support.feed import FRAME, RATE, RealtimeSource, SteppedSource, paced
from tests.support.proc import LOAD_KEY, Footprint, footprint, load_avg_1m, mem_available_mb, rss_mb
from tests.support.report import Run, bench_run, machine
from tests.support.stats import median, percentile, spread

__all__ = [
    "FRAME", "LOAD_KEY", "RATE", "bench_run", "FakeClock", "Footprint", "ManualClock", "RealtimeSource", "Run", "ScaledClock",
    "SleepingClock", "SleepyClock", "SteppedSource", "cer", "footprint", "load_avg_1m", "machine", "median",
    "mem_available_mb", "normalise", "paced", "percentile", "rss_mb", "spread",
]
