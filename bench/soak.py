"""Soak: N mixed requests through the real daemon in one process (local tool questions, local LLM
questions, Wyoming transcribe / synthesize / handle); prints JSON.

The daemon runs as under systemd (supervisor, product plan, live turn loop, Assistant, Speaker, and
the Wyoming server it starts for ``wyoming.uri`` on a free loopback port) except for its two ends:
the microphone is a scripted feeder (tests.support.daemon) that "speaks" request WAVs made by the
portable FastSpeech2 voice (wake phrase + request in one breath), ``--pace`` times faster than real
time, and the player is a null sink that takes the audio at once. The requests run one after
another in a fixed cycle of 25 (so the first 50 and the last 50 hold the same mix): after a local
turn, the Wyoming requests that follow it in the cycle are made by a client on their own
connections (as Home Assistant makes them) while the microphone stays silent.

Every ``--sample-every`` requests it reads the process's resident set (VmRSS), native threads and
open fds. Per request: the latency (local turn: end of speech -> first audio; transcribe: audio-stop
-> transcript; synthesize: request -> first audio chunk; handle: request -> handled) and the process
CPU time it cost. Goals: every request answered, RSS growth from the end of the warm-up to the last
sample < 5 %, threads and fds flat, p90 latency of the last 50 requests within 10 % of the first 50.

    py312/bin/python -m bench.soak --turns 500 --pace 8 --set llm.max_tokens=24

``--resident`` only loads the daemon's stages one by one and prints the resident set after each.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.handle import Handled
from wyoming.tts import Synthesize

from bench.soak_report import WINDOW, Record, Sample, Step, summarise
from rkvoice.answer.llm.registry import engine_name
from rkvoice.config import Config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.stages import StageSet, product_plan
from rkvoice.turn import Turn
from tests.support import Run, ScaledClock, bench_run, footprint, load_avg_1m
from tests.support.daemon import isolated_config, isolated_workdir, scripted_daemon, synth_requests
from tests.support.net import free_port, pcm16, read_until, send_pcm

log = logging.getLogger("soak")

WAKE = "小智小智，"
# Local tool questions Whisper base hears right after the wake phrase in the portable voice ("二加三等于多少"
# came back as "二家分等于多少", "今天几号" as "今天几后", "一百除以四" as "100厨以四": no tool recognises those).
TOOL_REQUESTS = ("现在几点了", "今天是星期几", "现在是什么时间", "现在几点钟")
LLM_REQUESTS = ("用一句话介绍一下月亮", "用一句话说说春天")
TRANSCRIBE = "现在几点了"
"""What the Wyoming client sends as speech (the portable voice's, no wake phrase)."""
SYNTHESIZE = "今天天气不错，我们一起去公园散步吧。"
HANDLE = ("二加三等于多少", "现在几点")
HANDLED = {"二加三等于多少": "五", "现在几点": "点"}
"""A word the handled answer must contain."""

WYOMING = ("transcribe", "synthesize", "handle")
CYCLE_LEN = 25


def cycle() -> list[str]:
    """25 requests: the local ones at even positions (one of them the LLM), Wyoming ones between them."""
    out: list[str] = []
    wy = 0
    for i in range(CYCLE_LEN):
        if i % 2 == 0:
            out.append("llm" if i == 12 else "tool")
        else:
            out.append(WYOMING[wy % len(WYOMING)])
            wy += 1
    return out


def schedule(n: int) -> list[str]:
    """The kinds of the ``n`` requests, in order (starts with a local turn)."""
    one = cycle()
    return [one[i % CYCLE_LEN] for i in range(n)]


async def wyoming_request(port: int, kind: str, n: int, speech: bytes) -> tuple[float, str]:
    """One request on its own connection; (latency ms, what came back). Raises on a wrong answer."""
    async with AsyncTcpClient("127.0.0.1", port) as c:
        if kind == "transcribe":
            await c.write_event(Transcribe(language="zh").event())
            await send_pcm(c, speech, stop=False)
            sent = time.monotonic()
            await c.write_event(AudioStop().event())
            event = await read_until(c, "transcript")
            text = Transcript.from_event(event).text
            if "几点" not in text:
                raise RuntimeError(f"transcript {text!r}")
            return (time.monotonic() - sent) * 1000, text
        if kind == "synthesize":
            sent = time.monotonic()
            await c.write_event(Synthesize(text=SYNTHESIZE).event())
            await read_until(c, "audio-chunk")
            first = (time.monotonic() - sent) * 1000
            await read_until(c, "audio-stop")
            return first, "audio"
        question = HANDLE[n % len(HANDLE)]
        sent = time.monotonic()
        await c.write_event(Transcript(text=question).event())
        answer = Handled.from_event(await read_until(c, "handled")).text or ""
        if HANDLED[question] not in answer:
            raise RuntimeError(f"{question!r} handled as {answer!r}")
        return (time.monotonic() - sent) * 1000, answer


class Driver:
    """Walks the schedule: after local turn m it makes the Wyoming requests that follow it, then lets
    the microphone go on (``released``). Samples the footprint every ``every`` requests."""

    def __init__(self, kinds: list[str], port: int, speech: bytes, every: int, timeout_s: float) -> None:
        self.kinds = kinds
        self.port = port
        self.speech = speech
        self.every = every
        self.timeout_s = timeout_s
        self.record = Record()
        self.released = 0
        """Local turns after which the following Wyoming requests are done (the feeder's turns_done)."""
        self.error = ""
        self.missed = 0
        """Local requests that brought no turn."""
        self._turns: list[Turn | None] = []  # each local turn's report (None: failed)
        self._cond = threading.Condition()
        self._cpu = time.process_time()
        self._wall = time.monotonic()

    def on_done(self, turn: Turn) -> None:
        with self._cond:
            self._turns.append(turn)
            self._cond.notify_all()

    def on_failed(self) -> None:
        with self._cond:
            self._turns.append(None)
            self._cond.notify_all()

    def _local(self, index: int, kind: str, m: int, stop: threading.Event) -> Step:
        """Local request ``m``'s turn: the daemon's next report. A request that brings no turn within the
        timeout (not heard: a missed wake phrase) is a failed step, and the microphone goes on."""
        t = m - self.missed  # reports come in request order, without the unheard ones
        deadline = time.monotonic() + self.timeout_s
        step = Step(index, kind)
        with self._cond:
            while len(self._turns) <= t:
                if stop.is_set():
                    raise RuntimeError(f"the daemon stopped before local request {m + 1}")
                if time.monotonic() > deadline:
                    self.missed += 1
                    if self.missed_in_a_row() >= 3:
                        raise TimeoutError(f"3 local requests in a row brought no turn ({self.timeout_s:.0f} s each)")
                    step.detail = f"no turn within {self.timeout_s:.0f} s (not heard)"
                    return step
                self._cond.wait(1.0)
            turn = self._turns[t]
        if turn is None:
            step.detail = "turn failed"
            return step
        summary = turn.timeline.summary()
        e2fa = summary.get("end_to_first_audio_ms")
        step.latency_ms = float(e2fa) if isinstance(e2fa, (int, float)) else None
        step.route, step.detail = turn.route or "-", turn.text
        step.ok = step.latency_ms is not None and (turn.route == "llm") == (kind == "llm")
        return step

    def missed_in_a_row(self) -> int:
        n = 0
        for step in reversed(self.record.steps):
            if step.kind in WYOMING:
                continue
            if not step.detail.startswith("no turn"):
                break
            n += 1
        return n + 1  # the one being decided

    def run(self, stop: threading.Event, request_stop: Any) -> None:
        loop = asyncio.new_event_loop()
        m = 0
        try:
            for index, kind in enumerate(self.kinds):
                if stop.is_set():
                    break
                if kind in WYOMING:
                    step = Step(index, kind)
                    try:
                        step.latency_ms, step.detail = loop.run_until_complete(asyncio.wait_for(
                            self._connect_and(kind, index), self.timeout_s))
                        step.ok = True
                    except Exception as exc:  # counted as a failed request
                        step.detail = f"{type(exc).__name__}: {exc}"
                else:
                    if m > 0:
                        self.released = m  # the microphone may say the next request now
                    step = self._local(index, kind, m, stop)
                    m += 1
                self._account(step)
            self.released = m
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("soak driver: %s", self.error)
        finally:
            loop.close()
            request_stop()

    async def _connect_and(self, kind: str, index: int) -> tuple[float, str]:
        for attempt in range(60):  # the server starts beside the turn loop; give it time on the first request
            try:
                return await wyoming_request(self.port, kind, index, self.speech)
            except ConnectionRefusedError:
                if attempt == 59:
                    raise
                await asyncio.sleep(0.5)
        raise AssertionError("unreachable")

    def _account(self, step: Step) -> None:
        cpu, wall = time.process_time(), time.monotonic()
        step.cpu_ms, step.wall_ms = (cpu - self._cpu) * 1000, (wall - self._wall) * 1000
        self._cpu, self._wall = cpu, wall
        self.record.steps.append(step)
        n = len(self.record.steps)
        if not step.ok:
            log.warning("request %d (%s) failed: %s", n, step.kind, step.detail)
        if n % self.every == 0 or n == len(self.kinds):
            sample = Sample(n, footprint(), load_avg_1m())
            self.record.samples.append(sample)
            print(f"soak: {n}/{len(self.kinds)} requests, {sum(not s.ok for s in self.record.steps)} failed, "
                  f"rss {sample.fp.rss_mb:.0f} MB, threads {sample.fp.threads}, fds {sample.fp.fds}, "
                  f"load {sample.load}", file=sys.stderr, flush=True)


def overrides(args: argparse.Namespace, work: Path, port: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"wyoming": {"uri": f"tcp://127.0.0.1:{port}"}}]
    try:
        out += [parse_override(item) for item in args.set]
    except RkvoiceError as exc:
        raise SystemExit(f"soak: {exc}") from exc
    return out


def resident(cfg: Config, bench: Run, out: Path | None) -> int:
    """VmRSS after loading each of the daemon's stages (the profile's resident set)."""
    steps: list[dict[str, Any]] = [{"step": "python + rkvoice imports", "rss_mb": footprint().rss_mb}]
    marks: list[tuple[str, float]] = []

    def progress(msg: str) -> None:
        if marks:
            close_step(marks[-1])
        marks.append((msg.removeprefix("loading "), time.monotonic()))

    def close_step(mark: tuple[str, float]) -> None:
        fp = footprint()
        steps.append({"step": f"+ {mark[0]}", "load_s": round(time.monotonic() - mark[1], 2), "rss_mb": fp.rss_mb,
                      "threads": fp.threads, "delta_mb": round(fp.rss_mb - steps[-1]["rss_mb"], 1)})

    plan = product_plan(cfg, player=lambda c: _null_player(c))
    stages = StageSet(plan.stages, on_progress=progress)
    stages.load_all(cfg)
    close_step(marks[-1])
    loaded = stages.stages
    engines = {"asr": type(loaded.hear.asr).__name__, "wake": type(loaded.hear.wake).__name__,
               "tts": getattr(loaded.speak.tts, "name", "?"), "llm": engine_name(cfg)}
    stages.close_all()
    bench.emit({"mode": "resident", "profile": cfg.models.profile, "engines": engines, "steps": steps,
                "total_rss_mb": steps[-1]["rss_mb"]}, out)
    return 0


def _null_player(cfg: Config) -> Any:
    from tests.support.sink import draining_player

    return draining_player(cfg)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--turns", type=int, default=500, help="requests in all (local and Wyoming)")
    ap.add_argument("--warmup", type=int, default=50, help="requests before the RSS baseline sample")
    ap.add_argument("--pace", type=float, default=8.0, help="the microphone feeds this many times real time")
    ap.add_argument("--sample-every", type=int, default=10, help="read RSS/threads/fds every N requests")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds one request may take (a local one without a turn by then was not heard)")
    ap.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="override a config value")
    ap.add_argument("--resident", action="store_true", help="only load the stages, printing the RSS after each")
    args, bench = bench_run("soak", ap)
    if args.turns < 2 * WINDOW and not args.resident:
        print(f"soak: --turns {args.turns} is too few to compare the first {WINDOW} with the last {WINDOW}; "
              f"give at least {2 * WINDOW}", file=sys.stderr)
        return 2
    work = isolated_workdir("soak")
    port = free_port()
    try:
        cfg = isolated_config(work, *overrides(args, work, port))
    except RkvoiceError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    if args.resident:
        return resident(replace(cfg, wyoming=replace(cfg.wyoming, uri="")), bench, args.out)

    kinds = schedule(args.turns)
    local_kinds = [k for k in kinds if k in ("tool", "llm")]
    texts = [WAKE + t for t in TOOL_REQUESTS + LLM_REQUESTS] + [TRANSCRIBE]
    t0 = time.monotonic()
    audio = synth_requests(cfg, texts, work)
    script, n_tool, n_llm = [], 0, 0
    for kind in local_kinds:
        if kind == "llm":
            script.append(audio[WAKE + LLM_REQUESTS[n_llm % len(LLM_REQUESTS)]])
            n_llm += 1
        else:
            script.append(audio[WAKE + TOOL_REQUESTS[n_tool % len(TOOL_REQUESTS)]])
            n_tool += 1
    driver = Driver(kinds, port, pcm16(audio[TRANSCRIBE]), args.sample_every, args.timeout)
    run = scripted_daemon(cfg, script, ScaledClock(args.pace))
    daemon = run.daemon
    run.feeder.turns_done = lambda: driver.released  # silent while the Wyoming requests after a turn run
    run.on_turns(driver.on_done, driver.on_failed)
    thread = threading.Thread(target=driver.run, args=(daemon.stop, daemon.request_stop), name="soak-driver",
                              daemon=True)
    thread.start()
    t_start = time.monotonic()
    code = daemon.run()
    wall = time.monotonic() - t_start
    thread.join(5.0)
    run.feeder.close()
    if not driver.record.samples:
        print(f"soak: no request finished (exit {code}; {driver.error or 'see the log above'})", file=sys.stderr)
        return 1
    result = {
        "turns": args.turns, "pace": args.pace,
        "set": args.set,
        "mix": {"cycle": cycle(), "note": "the first and the last 50 requests hold the same mix"},
        "parts": {"local": "daemon: live turn loop on a scripted microphone, Assistant (tools + LLM), Speaker on "
                           "a null sink", "wyoming": "the daemon's own Wyoming server, one connection a request"},
        **summarise(driver.record, kinds, args.warmup),
        "not_heard": driver.missed, "exit_code": code, "driver_error": driver.error or None,
        "wall_s": round(wall, 1), "setup_s": round(t_start - t0, 1),
        "s_per_request": round(wall / max(1, len(driver.record.steps)), 2),
    }
    result["pass"] = bool(result["pass"] and code == 0 and not driver.error)
    bench.emit(result, args.out)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
