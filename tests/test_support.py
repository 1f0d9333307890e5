"""tests/support, what the benches and the tests share: its figures are what the benches' JSON reports, so
they are checked here against what they claim to measure (no models: scripted audio, a fake voice)."""

from __future__ import annotations

import argparse
import io
import json
import mmap
import os
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeVoice

from rkvoice.config import load_config
from rkvoice.errors import RkvoiceError
from tests.support import (
    FRAME,
    LOAD_KEY,
    FakeClock,
    ScaledClock,
    bench_run,
    footprint,
    median,
    percentile,
    spread,
)
from tests.support.daemon import TurnFeeder
from tests.support.proc import TOUCHED_MB, touch_fresh_memory
from tests.support.sink import sink_speaker, speak_through


def test_percentile_interpolates_between_ranks_and_refuses_nonsense() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5 and median(values) == 2.5
    assert percentile(values, 90) == 3.7 and percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile([1.0, 2.0], 50, ndigits=None) == 1.5 and percentile([1 / 3], 50, ndigits=3) == 0.333
    assert percentile([], 50) is None and spread([]) == {"p50": None, "p90": None, "max": None}
    assert spread(range(11)) == {"p50": 5.0, "p90": 9.0, "max": 10.0}
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile(values, 190)
    with pytest.raises(ValueError, match="NaN"):
        percentile([1.0, float("nan")], 50)


ROOT = Path(__file__).resolve().parent.parent


def test_footprint_counts_this_process_s_threads_fds_and_memory(tmp_path: Path) -> None:
    py_before, before = threading.active_count(), footprint()
    release = threading.Event()
    worker = threading.Thread(target=release.wait, daemon=True)
    worker.start()
    with open(tmp_path / "x", "w", encoding="utf-8"), touch_fresh_memory() as block:
        during, py_during = footprint(), threading.active_count()
        assert block[-mmap.PAGESIZE] == 1
    release.set()
    worker.join()
    # threads left running by earlier tests may end meanwhile: they leave both counts alike
    assert during.threads - before.threads == py_during - py_before >= 1 and during.fds == before.fds + 1
    assert during.rss_kb - before.rss_kb > 48 * 1024, (before, during)
    assert before.rss_mb == round(before.rss_kb / 1024, 1)


def test_footprint_sees_touched_memory_when_the_allocator_kept_freed_memory() -> None:
    """The state the suite leaves behind, made on purpose: glibc told to keep freed memory (no
    trimming, no mmap for big blocks) and 128 MB freed before the reading. The measurement above
    still sees its 64 MB (a numpy array there saw 0 kB)."""
    code = ("import numpy as np; from tests.support import footprint; from tests.support.proc import touch_fresh_memory;"
            "junk = np.ones(128 * 2**20 // 8); del junk; b = footprint(); m = touch_fresh_memory();"
            "print((footprint().rss_kb - b.rss_kb) // 1024)")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**32),
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= TOUCHED_MB * 3 // 4, out.stdout


def test_run_prints_and_writes_the_same_json_with_the_machine(tmp_path: Path) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1)
    args, run = bench_run("demo", ap, ["--rounds", "2", "--out", str(tmp_path / "r.json")])
    assert args.rounds == 2 and args.out == tmp_path / "r.json" and not args.verbose and run.bench == "demo"
    out = io.StringIO()
    with redirect_stdout(out):
        text = run.emit({"p50_ms": np.float64(12.5), "n": np.int64(3), "where": tmp_path}, args.out)
    doc = json.loads(out.getvalue())
    assert doc == json.loads((tmp_path / "r.json").read_text(encoding="utf-8")) == json.loads(text)
    assert doc["bench"] == "demo" and doc["p50_ms"] == 12.5 and doc["n"] == 3 and doc["where"] == str(tmp_path)
    machine = doc["machine"]
    assert machine["cpus"] >= 1 and machine[LOAD_KEY] >= 0 and machine[f"{LOAD_KEY}_end"] >= 0
    assert machine["date"].endswith("+00:00")
    with pytest.raises(TypeError, match="set is not JSON serialisable"):
        run.emit({"bad": {1}})


def test_scaled_clock_runs_faster_than_real_time() -> None:
    clock = ScaledClock(20.0)
    t0, c0 = time.monotonic(), clock.now()
    clock.sleep(1.0)
    real, scaled = time.monotonic() - t0, clock.now() - c0
    assert scaled >= 1.0 and real < 0.5
    t0 = time.monotonic()
    assert clock.wait(threading.Event(), 1.0) is False and time.monotonic() - t0 < 0.5
    with pytest.raises(ValueError, match="pace"):
        ScaledClock(0)


def test_turn_feeder_holds_the_next_request_until_the_turn_is_over() -> None:
    script = [np.full(FRAME * 2, 0.5, np.float32), np.full(FRAME * 2, -0.5, np.float32)]
    done = [0]
    feeder = TurnFeeder(script, lambda: done[0], FakeClock())
    frames = feeder.frames()
    seen = np.concatenate([next(frames) for _ in range(200)])  # request 0, then silence: turn 0 goes on
    assert feeder.fed == 1 and int((seen == 0.5).sum()) == FRAME * 2 and not (seen == -0.5).any()
    done[0] = 1
    rest = np.concatenate([next(frames) for _ in range(100)])
    assert feeder.fed == 2 and int((rest == -0.5).sum()) == FRAME * 2 and not (rest == 0.5).any()
    feeder.close()
    assert list(frames) == []


def test_a_speaker_on_a_sink_speaks_at_synthesis_speed_and_names_a_failure() -> None:
    cfg = load_config([{"audio": {"player": "null"}}])
    voice = FakeVoice(clock=FakeClock(), char_s=0.2)  # 20 characters: 4 s of audio, no real-time pacing
    t0 = time.monotonic()
    with sink_speaker(voice, cfg) as speaker:
        summary = speak_through(speaker, "今天天气很好，我们一起出去走走吧。").summary()
        with pytest.raises(RkvoiceError, match="BOOM"):
            speak_through(speaker, "这一句会失败 BOOM。", timeout=10)
    assert time.monotonic() - t0 < 3.0 and summary["first_audio_ms"] is not None
    assert voice.said and summary["chunks"] >= 1


def test_a_paced_sink_plays_out_in_the_clock_s_time_a_draining_one_does_not() -> None:
    cfg = load_config([{"audio": {"player": "null"}}])
    text = "今天天气很好，我们一起出去走走吧。"  # 15 characters of 0.2 s: about 3 s of audio
    took = {}
    for drain in (True, False):
        clock = ScaledClock(20.0)  # 3 s of audio play in 0.15 s
        with sink_speaker(FakeVoice(clock=clock, char_s=0.2), cfg, clock, drain=drain) as speaker:
            t0 = clock.now()
            speak_through(speaker, text, timeout=60)
            took[drain] = clock.now() - t0
    assert took[False] > 2.5 > 1.0 > took[True], took
