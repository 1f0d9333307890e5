"""Soak: N consecutive turns through the real daemon in one process; prints JSON.

The daemon runs exactly as under systemd (supervisor, product plan, live hear loop,
Assistant, Speaker) except for its two ends: the microphone is a feeder that "speaks"
request WAVs made by the portable FastSpeech2 voice (wake phrase + request in one breath,
then silence until the turn is over), and the player is the null sink consuming audio at
real-time pace -- or ``--pace`` times faster (stated in the JSON as ``pace``).

After ``--warmup`` turns it samples, at the end of every turn, the process's resident set
(VmRSS), native thread count and open file descriptors. Pass: no crash, every turn
answered, RSS growth after warm-up < 5 %, threads and fds flat.

    py312/bin/python bench/soak.py --turns 500 --pace 8
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import paced
from rkvoice.clock import MonotonicClock
from rkvoice.config import Config, load_config
from rkvoice.daemon.sdnotify import Notifier
from rkvoice.daemon.service import Daemon
from rkvoice.stages import Plan, StageSet, StageSpec, product_plan
from rkvoice.turn import Turn

log = logging.getLogger("soak")

# tool-routed requests (exact answers), one LLM question every --llm-every turns
# (chosen so Whisper base hears them right after the wake phrase: "内存还剩多少" came back as
# "妹存还剩多少" and "九乘以九" as "九成已九", which the tools then don't recognise)
REQUESTS = ["小智小智，现在几点了", "小智小智，二加三等于多少", "小智小智，现在是什么时间",
            "小智小智，现在几点钟"]
LLM_REQUEST = "小智小智，用一句话介绍一下月亮"
FRAME = 512
RATE = 16000


def proc_status() -> dict[str, int]:
    """VmRSS (kB), native threads and open fds of this process, from /proc."""
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    out["fds"] = len(os.listdir("/proc/self/fd"))
    return out


class ScaledClock(MonotonicClock):
    """Real time running ``pace`` times faster (pace 1 = real time)."""

    def __init__(self, pace: float) -> None:
        self.pace = pace

    def now(self) -> float:
        return time.monotonic() * self.pace

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.pace)


def synth_requests(cfg: Config, texts: list[str], out_dir: Path) -> dict[str, np.ndarray]:
    """16 kHz float32 speech for each text, by the portable FastSpeech2 voice (also saved as WAVs)."""
    import soundfile as sf

    from rkvoice.hear.sources import to_mono_16k
    from rkvoice.text.normalize import speakable
    from rkvoice.tts.registry import create_tts

    tts = create_tts(cfg, "fastspeech2")
    tts.load()
    audio = {}
    for i, text in enumerate(texts):
        samples, rate = tts.generate(speakable(text))
        sf.write(out_dir / f"request_{i}.wav", samples, rate)
        audio[text] = to_mono_16k(samples, rate, "request")
    return audio


class TurnFeeder:
    """A microphone stand-in: request i, then silence until the daemon finished turn i."""

    sample_rate = RATE

    def __init__(self, script: list[np.ndarray], turns_done: Any, clock: ScaledClock) -> None:
        self.script = script
        self.turns_done = turns_done  # () -> number of turns the daemon has finished
        self.clock = clock
        self._closed = threading.Event()
        self.fed = 0

    def _silence(self) -> Iterator[np.ndarray]:
        while True:
            yield np.zeros(FRAME, dtype=np.float32)

    def frames(self) -> Iterator[np.ndarray]:
        # a failed turn may restart the hear loop (and this generator): resume, don't replay
        yield from paced(self._unpaced(), self.clock, self.clock.now(), FRAME / RATE, self._closed)

    def _unpaced(self) -> Iterator[np.ndarray]:
        silence = self._silence()
        for i, speech in enumerate(self.script):
            if i < self.turns_done():
                continue
            padded = np.concatenate([np.zeros(RATE // 4, np.float32), speech, np.zeros(RATE, np.float32)])
            n = len(padded) // FRAME * FRAME
            self.fed = i + 1
            yield from padded[:n].reshape(-1, FRAME)
            # keep the microphone "open" (silence) until the turn is over
            for frame in silence:
                yield frame
                if self.turns_done() >= i + 1:
                    break
        yield from silence  # the mic never ends: paced() stops at close

    def close(self) -> None:
        self._closed.set()


class _NoLlm:
    """--no-llm: a request the tools can't answer fails its turn (counted) instead of loading the LLM."""

    name = "none"

    def load(self) -> None:
        pass

    def stream(self, messages: Any) -> Any:
        from rkvoice.errors import RkvoiceError, Stage

        raise RkvoiceError(Stage.LLM, "disabled", "soak --no-llm: this request needed the LLM")

    def abort(self) -> None:
        pass


class NoLlmAssistant:
    """--no-llm: the real Assistant with tools only (the LLM is not loaded)."""

    def __init__(self, cfg: Config) -> None:
        from rkvoice.answer.assistant import Assistant

        self.inner = Assistant(cfg, llm=_NoLlm())

    def load(self) -> None:
        self.inner.scheduler.start()  # the tools' reminders; no LLM to load

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def watch_turns(daemon: Daemon, done: Callable[[Turn], None], failed: Callable[[], None]) -> None:
    """``done(turn)`` after each turn the daemon reports answered, ``failed()`` after each failure it
    counts (one reported once stopping is not), each after the daemon's own report."""
    report = daemon.report

    def on_report(result: Turn | BaseException) -> None:
        stopping = daemon.stop.is_set()
        report(result)
        if isinstance(result, Turn) and result.exception is None:
            done(result)
        elif not stopping:
            failed()

    daemon.report = on_report  # type: ignore[method-assign]


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(values, q)), 1)


def resident(args: argparse.Namespace) -> int:
    """VmRSS after loading each of the daemon's engines (the portable profile's resident set)."""

    work = Path(tempfile.mkdtemp(prefix="rkvoice-rss-"))
    cfg = load_config([{"state": {"dir": str(work / "state")}, "audio": {"player": "null"}}])
    plan = product_plan(cfg)
    if args.no_llm:
        plan = Plan(stages=tuple(StageSpec(s.name, s.key, NoLlmAssistant) if s.name == "answer" else s
                                 for s in plan.stages), source=plan.source)
    steps = [{"step": "python + rkvoice imports", "rss_mb": round(proc_status()["VmRSS"] / 1024, 1)}]
    stages = StageSet(plan.stages)
    for spec in plan.stages:
        t0 = time.monotonic()
        engine = spec.build(cfg)
        engine.load()
        stages.engines[spec.name] = engine
        st = proc_status()
        steps.append({"step": f"+ {spec.name} ({type(engine).__name__})", "load_s": round(time.monotonic() - t0, 2),
                      "rss_mb": round(st["VmRSS"] / 1024, 1), "threads": st["Threads"]})
    for prev, cur in itertools.pairwise(steps):
        cur["delta_mb"] = round(cur["rss_mb"] - prev["rss_mb"], 1)
    hear = stages.engines["hear"]
    result = {
        "bench": "resident",
        "profile": cfg.models.profile,
        "engines": {"asr": type(hear.asr).__name__, "wake": type(hear.wake).__name__,
                    "tts": getattr(stages.engines["speak"].tts, "name", "?"),
                    "llm": "not loaded" if args.no_llm else cfg.llm.engine},
        "steps": steps,
        "total_rss_mb": steps[-1]["rss_mb"],
    }
    stages.close_all()
    text = json.dumps(result, ensure_ascii=False, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=30,
                    help="turns before the baseline sample (include at least one LLM turn)")
    ap.add_argument("--pace", type=float, default=1.0,
                    help="microphone feed and null player run this many times faster than real time")
    ap.add_argument("--llm-every", type=int, default=25, help="every Nth request goes to the LLM (0: never)")
    ap.add_argument("--no-llm", action="store_true", help="don't load the LLM (tools only)")
    ap.add_argument("--resident", action="store_true",
                    help="only load the engines one by one and print the resident set after each")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.no_llm:
        args.llm_every = 0

    if args.resident:
        return resident(args)
    work = Path(tempfile.mkdtemp(prefix="rkvoice-soak-"))
    cfg = load_config([{"state": {"dir": str(work / "state")},
                        "daemon": {"lock_file": str(work / "rkvoice.lock")},
                        "models": {"profile": "portable"}}], files=None)
    texts = REQUESTS + ([LLM_REQUEST] if args.llm_every else [])
    t0 = time.monotonic()
    audio = synth_requests(cfg, texts, work)
    script = []
    for i in range(args.turns):
        if args.llm_every and (i + 1) % args.llm_every == 0:
            script.append(audio[LLM_REQUEST])
        else:
            script.append(audio[REQUESTS[i % len(REQUESTS)]])

    clock = ScaledClock(args.pace)
    reports: list[Turn] = []
    samples: list[dict[str, int]] = []
    daemon_ref: list[Daemon] = []

    def turns_done() -> int:
        return daemon_ref[0].turns if daemon_ref else 0

    feeder = TurnFeeder(script, turns_done, clock)

    def player(c: Config) -> Any:
        from rkvoice.audio.sinks import NullPlayer

        opened = NullPlayer(c, clock)
        opened.open()
        return opened

    plan = product_plan(cfg, source=lambda c: feeder, player=player)
    if args.no_llm:
        plan = Plan(stages=tuple(StageSpec(s.name, s.key, NoLlmAssistant) if s.name == "answer" else s
                                 for s in plan.stages), source=plan.source)
    daemon = Daemon(cfg, plan, lambda: cfg, notifier=Notifier(socket_name=""))
    daemon_ref.append(daemon)
    lock = threading.Lock()

    names: dict[str, Any] = {}

    def on_turn(report: Turn) -> None:
        with lock:
            if not names:  # the engines are closed by the time the JSON is written
                hear, speak = daemon.stages.engines["hear"], daemon.stages.engines["speak"]
                names["hear"] = [type(getattr(hear, k)).__name__ for k in ("asr", "wake", "segmenter")]
                names["tts"] = getattr(speak.tts, "name", type(speak.tts).__name__)
            reports.append(report)
            samples.append(proc_status())
            if daemon.turns % 25 == 0:
                print(f"soak: {daemon.turns} turns, {len(reports)} answered, "
                      f"rss {samples[-1]['VmRSS'] / 1024:.0f} MB, threads {samples[-1]['Threads']}, "
                      f"fds {samples[-1]['fds']}", file=sys.stderr, flush=True)
            if daemon.turns >= args.turns:
                daemon.request_stop()

    def on_failure() -> None:
        with lock:
            samples.append(proc_status())
            if daemon.turns >= args.turns:
                daemon.request_stop()

    watch_turns(daemon, on_turn, on_failure)
    t_start = time.monotonic()
    code = daemon.run()
    wall = time.monotonic() - t_start

    base = samples[args.warmup - 1] if len(samples) >= args.warmup else (samples[0] if samples else {})
    after = samples[args.warmup:] if len(samples) > args.warmup else []
    rss = [s["VmRSS"] for s in after]
    threads = [s["Threads"] for s in after]
    fds = [s["fds"] for s in after]
    summaries = [r.timeline.summary() for r in reports]
    e2fa = [s["end_to_first_audio_ms"] for s in summaries if "end_to_first_audio_ms" in s]
    asr = [s["asr_ms"] for s in summaries if isinstance(s.get("asr_ms"), (int, float))]
    expected = {t.split("，", 1)[1] for t in texts}
    growth = (100.0 * (rss[-1] - base["VmRSS"]) / base["VmRSS"]) if rss and base else None
    routes: dict[str, int] = {}
    for r in reports:
        routes[r.route or "-"] = routes.get(r.route or "-", 0) + 1
    tts_name = names.get("tts", "?")
    hear_names = names.get("hear", [])
    heard: dict[str, int] = {}
    for r in reports:
        heard[r.text] = heard.get(r.text, 0) + 1
    result = {
        "bench": "soak",
        "turns_requested": args.turns,
        "turns_finished": daemon.turns,
        "turns_answered": len(reports),
        "turns_failed": daemon.turns - len(reports),
        "exit_code": code,
        "pace": args.pace,
        "pace_note": "microphone feed and null player run `pace` times faster than real time",
        "parts": {
            "hear": "live hear loop (rkvoice.hear.loop): " + " + ".join(hear_names),
            "answer": "Assistant: tools" + ("" if args.no_llm else f" + LLM (every {args.llm_every}th request)"),
            "speak": f"Speaker + {tts_name} TTS + null player",
        },
        "routes": routes,
        "transcripts_exact": sum(1 for r in reports if r.text.rstrip("。？?") in expected),
        "transcripts": heard,
        "warmup_turns": args.warmup,
        "rss_mb": {
            "after_warmup": round(base.get("VmRSS", 0) / 1024, 1),
            "final": round(rss[-1] / 1024, 1) if rss else None,
            "max": round(max(rss) / 1024, 1) if rss else None,
        },
        "rss_growth_pct": round(growth, 2) if growth is not None else None,
        "rss_growth_limit_pct": 5.0,
        "threads": {"after_warmup": base.get("Threads"), "min": min(threads, default=None),
                    "max": max(threads, default=None), "final": threads[-1] if threads else None},
        "fds": {"after_warmup": base.get("fds"), "min": min(fds, default=None),
                "max": max(fds, default=None), "final": fds[-1] if fds else None},
        "end_to_first_audio_ms": {"p50": pct(e2fa, 50), "p90": pct(e2fa, 90), "max": pct(e2fa, 100)},
        "asr_ms": {"p50": pct(asr, 50), "p90": pct(asr, 90)},
        "wall_s": round(wall, 1),
        "setup_s": round(t_start - t0, 1),
        "s_per_turn": round(wall / max(1, daemon.turns), 2),
    }
    # flat: the busiest moment late in the run is no busier than early on (a few short-lived
    # threads -- the wake cue, an answer stream -- may be alive when a sample is taken)
    window = max(1, len(after) // 4)

    def trend(series: list[int]) -> int | None:
        return max(series[-window:]) - max(series[:window]) if series else None

    result["threads"]["trend"] = trend(threads)
    result["fds"]["trend"] = trend(fds)
    flat = bool(threads) and trend(threads) <= 0 and bool(fds) and trend(fds) <= 0
    result["pass"] = bool(
        code == 0 and daemon.turns >= args.turns and result["turns_failed"] == 0
        and growth is not None and growth < 5.0 and flat
    )
    result["rss_series_mb"] = [round(s["VmRSS"] / 1024, 1) for s in samples[:: max(1, len(samples) // 25)]]
    text = json.dumps(result, ensure_ascii=False, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
