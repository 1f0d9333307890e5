"""This process's footprint and the machine's load, from /proc and os: the one reader of each for every
bench (resident set, native threads, open file descriptors, available memory, 1-minute load average)."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

LOAD_KEY = "load_avg_1m"
"""The one JSON key a bench records the 1-minute load average under."""


@dataclass(frozen=True)
class Footprint:
    """One reading of this process: resident set (kB), native threads, open file descriptors."""

    rss_kb: int
    threads: int
    fds: int

    @property
    def rss_mb(self) -> float:
        return round(self.rss_kb / 1024.0, 1)


def _status_fields(path: Path, *names: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        if key in names:
            out[key] = int(value.split()[0])
    missing = [n for n in names if n not in out]
    if missing:
        raise RuntimeError(f"{path} has no {', '.join(missing)} (not Linux /proc?)")
    return out


def footprint() -> Footprint:
    """VmRSS, Threads and the open fds of this process, now."""
    st = _status_fields(Path("/proc/self/status"), "VmRSS", "Threads")
    return Footprint(rss_kb=st["VmRSS"], threads=st["Threads"], fds=len(os.listdir("/proc/self/fd")))


TOUCHED_MB = 64


def touch_fresh_memory(mb: int = TOUCHED_MB) -> mmap.mmap:
    """``mb`` MB of new anonymous pages, each written once: resident now, whatever the allocator
    holds. (A numpy array of the same size may be carved out of memory earlier code freed and the
    allocator kept resident: RSS then does not move; seen after the whole suite, 4 kB for 64 MB.)"""
    block = mmap.mmap(-1, mb * 1024 * 1024)
    for i in range(0, len(block), mmap.PAGESIZE):
        block[i] = 1
    return block


def rss_mb() -> float:
    """This process's resident set (VmRSS), MB, one decimal."""
    return footprint().rss_mb


def mem_available_mb() -> float:
    """The machine's MemAvailable, MB, one decimal (on the board the NPU's DMA buffers show here, not in
    VmRSS)."""
    return round(_status_fields(Path("/proc/meminfo"), "MemAvailable")["MemAvailable"] / 1024.0, 1)


def load_avg_1m() -> float:
    """The 1-minute load average, two decimals."""
    return round(os.getloadavg()[0], 2)
