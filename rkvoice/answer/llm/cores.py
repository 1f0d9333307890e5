"""How many llama.cpp threads an answer gets: decided from the cores free now, not a minute ago.

llama.cpp's threads wait for each other after every layer, so one thread on a core another process
holds stalls them all (2 cores at load 4-7: 2 prompt threads took 2.4x as long as 1,
bench/llm_threads.py): auto counts stay on the free cores. The load average lags a minute, so the
larger of two readings of now counts: other processes' runnable threads (``busy_elsewhere``) and the
cores they used over the last second (``CpuWindow``: bursty work a snapshot misses).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rkvoice.config import LlmConfig


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. under taskset or a cgroup)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _own_running(task_dir: Path) -> int:
    """This process's threads in state R (running or waiting for a core)."""
    n = 0
    for task in task_dir.iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        if stat[stat.rindex(")") + 2:].startswith("R"):
            n += 1
    return n


def busy_elsewhere(proc: Path = Path("/proc"), samples: int = 5, gap_s: float = 0.004,
                   sleep: Callable[[float], None] = time.sleep) -> float:
    """Threads of other processes runnable now: the median over ``samples`` readings ``gap_s`` apart;
    0.0 without /proc (every core free)."""
    counts: list[int] = []
    tasks = proc / "self" / "task"
    try:
        for i in range(samples):
            if i:
                sleep(gap_s)
            before = _own_running(tasks)
            lines = (proc / "stat").read_text().splitlines()
            total = next(int(line.split()[1]) for line in lines if line.startswith("procs_running "))
            # one of ours running at the kernel's count may sleep before its state is read (llama's
            # threads between two barriers): read before and after, and count it if either saw it.
            # Read after only, 29 % of readings beside a 2-thread decode saw a process that was not there.
            counts.append(max(0, total - max(before, _own_running(tasks))))
    except (OSError, ValueError, StopIteration):  # StopIteration: no procs_running line
        return 0.0
    return float(statistics.median(counts))


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CpuWindow:
    """Cores other processes kept busy over about the last ``keep`` x ``period_s`` seconds."""

    def __init__(self, proc: Path = Path("/proc"), period_s: float = 0.25, keep: int = 4,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.proc = proc
        self.period_s = period_s
        self._clock = clock
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=keep + 1)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Record (time, machine's busy CPU seconds, this process's CPU seconds)."""
        reading = self._read()
        if reading is not None:
            with self._lock:
                self._samples.append(reading)

    def _read(self) -> tuple[float, float, float] | None:
        try:
            cpu = (self.proc / "stat").read_text().split("\n", 1)[0].split()
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in cpu[1:9])
            own = (self.proc / "self" / "stat").read_text()
            utime, stime = (int(x) for x in own[own.rindex(")") + 2:].split()[11:13])
        except (OSError, ValueError, IndexError):
            return None
        busy = (user + nice + system + irq + softirq + steal) / _TICK
        return self._clock(), busy, (utime + stime) / _TICK

    def others(self) -> float | None:
        """Cores other processes used from the oldest kept sample to now (a fresh reading, kept only
        ``period_s`` after the last: read before every token, it would push out the older ones); None
        before there are two samples at least ``period_s`` apart."""
        now = self._read()
        if now is None:
            return None
        with self._lock:
            if not self._samples or now[0] - self._samples[-1][0] >= self.period_s:
                self._samples.append(now)
            if now[0] - self._samples[0][0] < self.period_s:
                return None
            t0, busy0, own0 = self._samples[0]
        t1, busy1, own1 = now
        return max(0.0, (busy1 - busy0 - (own1 - own0)) / (t1 - t0))

    def watch(self) -> None:
        """Keep sampling every ``period_s`` on a daemon thread (idempotent; ~0.1 ms a sample)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="rkvoice-cpu-window", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.sample()
            time.sleep(self.period_s)


WINDOW = CpuWindow()


def busy_now(samples: int = 5) -> float:
    """Other processes' load now: the larger of the runnable snapshot and the last second's CPU use."""
    return max(busy_elsewhere(samples=samples), WINDOW.others() or 0.0)


class Threads(NamedTuple):
    """llama.cpp thread counts for one answer."""

    quiet: int
    """Generating while nothing is spoken yet (until the first piece goes to the voice)."""
    speaking: int
    """Generating while the answer is spoken (the TTS thread needs a core)."""
    prompt: int
    follow: bool = False
    """``quiet`` is auto: re-decided before every token (``FreeCores``)."""


def thread_counts(llm: LlmConfig, cores: int | None = None, busy: float | None = None) -> Threads:
    """Counts for ``llm.threads`` / ``llm.threads_batch`` with ``busy`` threads of other processes
    (measured when None and a count is auto). auto: the free cores (at least 1) for the prompt and
    until the first piece is spoken, then one core less than usable (no more than free) for the TTS."""
    cores = usable_cores() if cores is None else cores
    auto = llm.threads == "auto" or llm.threads_batch == "auto"
    if busy is None:
        busy = busy_now() if auto else 0.0
    free = max(1, cores - round(busy))
    if llm.threads == "auto":
        quiet, speaking = free, max(1, min(free, cores - 1))
    else:
        quiet = speaking = llm.threads
    prompt = free if llm.threads_batch == "auto" else llm.threads_batch
    return Threads(quiet, speaking, prompt, follow=llm.threads == "auto")


CONFIRM_CORES = 0.1
"""Other processes' CPU over the window (cores) that confirms the snapshots: a process runnable at
three snapshots in a row has used ~0.1 core of the last second after ~0.1 s; the window's own
error is a few hundredths (ticks of 1/100 s on two counters)."""


class FreeCores:
    """Generating threads before speech, re-decided before every token (~1 ms a reading): the usable
    cores less the larger of (a) other processes' runnable threads seen in each of the last three
    snapshots, when the window confirms that other processes did use CPU lately
    (``CONFIRM_CORES``; before the window has two samples, the snapshots alone), and (b) the cores they used over the last second (``WINDOW``), so work
    starting mid-answer takes a thread away within a few tokens instead of stalling the barriers.

    Why not the snapshots alone: in the daemon, between two tokens, a snapshot counted a runnable
    thread that was not another process's in 30-55 % of readings, in runs of up to four (bench/
    turn_latency, 2 cores, idle; none of this process's threads was in state R before or after the
    kernel's count, no other process's a few ms later) while the window read 0.00; the median of
    three took the second thread away in 13 of 18 answers, the minimum of three in 4 of 18. A busy
    process is runnable at every snapshot and shows in the window's CPU time, which a phantom does not."""

    def __init__(self, cores: int | None = None, start: int | None = None,
                 snapshot: Callable[[], float] | None = None,
                 window: Callable[[], float | None] | None = None) -> None:
        self.cores = usable_cores() if cores is None else cores
        self._start = self.cores if start is None else start  # the answer's decision before the prompt
        self._snapshot = snapshot or (lambda: busy_elsewhere(samples=1))
        self._window = window or WINDOW.others
        self._recent: list[float] = []

    def threads(self) -> int:
        self._recent = [*self._recent[-2:], self._snapshot()]  # the last three snapshots
        window = self._window()  # None: no window yet (its first period), the snapshots decide alone
        if len(self._recent) < 3:
            seen = float(self.cores - self._start)
        else:
            seen = min(self._recent) if window is None or window >= CONFIRM_CORES else 0.0
        return max(1, self.cores - round(max(seen, window or 0.0)))
