"""Home commands through Home Assistant: what the home route costs, against the real HA (tests/ha_home.py).

    py312/bin/python -m bench.home_latency [--runs 10] [--out home_latency.json]

HA 2026.2.3 runs on loopback with the test home (a light, a thermostat). Every figure is over ``--runs``
turns (at least 10), each a turn of the product (``Assistant`` + ``Answerer`` + the portable voice on a
draining player, the portable LLM for the LLM questions):

- ``home_text_p50_ms``: the question handed to the assistant -> the first audio of HA's spoken answer
  (打开/关掉 the light in turn), with the route's kept-alive HTTP connection; beside it the naive
  client, a new connection per question (``home_text_new_connection_p50_ms``), and HA's round trip in each.
- ``home_miss_extra_ms``: what HA's ``no_intent_match`` adds to an LLM turn: the time until the route is
  known with the home route on, minus the same with it off (everything after is the same LLM turn;
  the first text's time on and off is given beside it). Goal <= 100 ms.
- ``ha_down_extra_ms``: the same with HA stopped, after the first question (the breaker is open);
  ``ha_down_first_ms`` is that first question. Beside it a wedged HA (accepts, never answers): with the
  breaker (``wedged_breaker_ms``: the first question waits ``timeout_s``, the next ones nothing) and
  without it (``wedged_no_breaker_ms``: retry_s 0, every question waits). Goal <= 50 ms.
- ``satellite_p50_ms``: end of speech -> first reply audio on the board through HA's pipeline: the
  satellite's part (rkvoice/satellite), filled in by its own measurement (``satellite_p50_ms`` below).
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.llm.base import LlmEngine
from rkvoice.answer.llm.registry import create_llm
from rkvoice.answer.respond import Answerer
from rkvoice.clock import MonotonicClock
from rkvoice.config import Config, load_config
from rkvoice.home.client import HaClient
from rkvoice.home.route import HomeRoute
from rkvoice.speaker import Speaker
from rkvoice.state import StateStore
from rkvoice.timeline import Ev, Timeline
from rkvoice.tts.registry import create_tts
from rkvoice.turn import Turn
from tests.ha_home import HOME, HomeHa, home_ha
from tests.support import Run, median
from tests.support.sink import sink_speaker

QUESTION = "用一句话介绍一下月亮"
"""No local tool and no HA sentence answers it: HA says no_intent_match, the LLM answers."""
NAIVE_WEDGED_RUNS = 3
"""Questions to a wedged HA without the breaker: each waits the whole timeout_s."""


class NewConnectionClient(HaClient):
    """The naive client: a new TCP connection for every question."""

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        self.close()
        return super().request(method, path, body)


def home_turn(answerer: Answerer, text: str) -> tuple[float, float]:
    """One spoken home turn: (ms from the question to the first audio, HA's round trip ms)."""
    turn = Turn(Timeline(MonotonicClock()), text=text)
    turn.timeline.mark(Ev.SPEECH_END)  # --text: the question is complete when it is handed over
    answerer.respond(turn)
    assert turn.route == "home", f"{text!r} went to {turn.route}"
    first, route = turn.timeline.find(Ev.AUDIO_FIRST), turn.timeline.find(Ev.ROUTE)
    assert first and route, turn.timeline.events
    return first[0].t_ms, float(route[0].get("home_ms"))


def llm_turn(assistant: Assistant) -> tuple[float, float, str]:
    """One LLM question: (ms until the route was known, ms until the first text, HA's outcome)."""
    turn = Turn(Timeline(MonotonicClock()), text=QUESTION)
    t0 = time.perf_counter()
    reply = assistant.reply(QUESTION, turn)
    routed = (time.perf_counter() - t0) * 1000
    first = None
    for delta in reply.deltas:
        if delta and first is None:
            first = (time.perf_counter() - t0) * 1000
    assert reply.route == "llm" and first is not None, reply.route
    event = turn.timeline.find(Ev.ROUTE)
    return routed, first, str(event[0].get("home", "off")) if event else "?"


def wedged_url() -> tuple[socket.socket, str]:
    """A server that accepts connections and never answers (a hung HA)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def config(ha: HomeHa, state: Path, **home: Any) -> Config:
    cfg = load_config([{"home_assistant": {"url": ha.base, "token_file": str(ha.token_file), **home},
                        "state": {"dir": str(state)}}])
    return replace(cfg, llm=replace(cfg.llm, max_tokens=24, seed=1, temperature=0.0, history_turns=0))


def assistant_for(cfg: Config, llm: LlmEngine, client: Callable[[Config], HaClient] | None = None) -> Assistant:
    ha = cfg.home_assistant
    home = None
    if ha.url and client is not None:
        home = HomeRoute(ha, ha.token_path(cfg.state.path), client=client(cfg))
    return Assistant(cfg, llm=llm, store=StateStore(cfg.state.path), home=home)


def measure_home(cfg: Config, speaker: Speaker, llm: LlmEngine, runs: int) -> dict[str, Any]:
    texts = [f"打开{HOME.light}", f"把{HOME.light}关掉"]
    answerers = {}
    for key, make in (("", HaClient), ("_new_connection", NewConnectionClient)):
        def client(c: Config, make: type[HaClient] = make) -> HaClient:
            h = c.home_assistant
            return make(h.url, h.token_path(c.state.path), h.timeout_s, h.language)

        answerers[key] = Answerer(assistant_for(cfg, llm, client), speaker, cfg)
        home_turn(answerers[key], texts[1])  # warm: the connection, HA's sentence cache
    got: dict[str, list[tuple[float, float]]] = {key: [] for key in answerers}
    for i in range(runs):  # interleaved: the same machine load for both clients
        for key, answerer in answerers.items():
            got[key].append(home_turn(answerer, texts[i % 2]))
    out: dict[str, Any] = {}
    for key, turns in got.items():
        out[f"home_text{key}_p50_ms"] = median(g[0] for g in turns)
        out[f"home_round_trip{key}_p50_ms"] = median(g[1] for g in turns)
    return out


def measure_llm(cfg: Config, ha: HomeHa, llm: LlmEngine, runs: int) -> dict[str, Any]:
    on = assistant_for(cfg, llm, lambda c: HaClient(c.home_assistant.url, c.home_assistant.token_path(c.state.path),
                                                    c.home_assistant.timeout_s))
    off = assistant_for(replace(cfg, home_assistant=replace(cfg.home_assistant, url="")), llm)
    llm_turn(on)
    llm_turn(off)
    got_on, got_off = [], []
    for _ in range(runs):  # interleaved: the same machine load for both
        got_on.append(llm_turn(on))
        got_off.append(llm_turn(off))
    assert {g[2] for g in got_on} == {"no_intent_match"}, got_on
    route_off = median(g[0] for g in got_off) or 0.0
    out: dict[str, Any] = {
        "route_off_p50_ms": route_off,
        "route_miss_p50_ms": median(g[0] for g in got_on),
        "home_miss_extra_ms": round((median(g[0] for g in got_on) or 0.0) - route_off, 1),
        "llm_first_text_off_p50_ms": median(g[1] for g in got_off),
        "llm_first_text_miss_p50_ms": median(g[1] for g in got_on),
    }
    ha.stop()
    first = llm_turn(on)
    down = [llm_turn(on) for _ in range(runs)]
    # skipped while the breaker is open; a run lasting past retry_s probes (refused at once) and is counted too
    assert first[2] == "unreachable" and {g[2] for g in down} <= {"skipped", "unreachable"}, (first, down)
    out.update(ha_down_first_ms=round(first[0], 1), route_down_p50_ms=median(g[0] for g in down),
               ha_down_extra_ms=round((median(g[0] for g in down) or 0.0) - route_off, 1),
               llm_first_text_down_p50_ms=median(g[1] for g in down),
               ha_down_probes=sum(g[2] == "unreachable" for g in down))
    return out


def measure_wedged(cfg: Config, llm: LlmEngine, runs: int) -> dict[str, Any]:
    sock, url = wedged_url()
    try:
        out: dict[str, Any] = {"timeout_s": cfg.home_assistant.timeout_s}
        for key, retry_s, n in (("wedged_breaker_ms", 30.0, runs + 1), ("wedged_no_breaker_ms", 0.0, NAIVE_WEDGED_RUNS)):
            wedged = replace(cfg, home_assistant=replace(cfg.home_assistant, url=url, retry_s=retry_s))
            a = assistant_for(wedged, llm, lambda c: HaClient(c.home_assistant.url,
                                                              c.home_assistant.token_path(c.state.path),
                                                              c.home_assistant.timeout_s))
            routed = []
            for _ in range(n):
                turn = Turn(text=QUESTION)
                t0 = time.perf_counter()
                a.reply(QUESTION, turn)  # the route only: the LLM turn after it is the same
                routed.append(round((time.perf_counter() - t0) * 1000, 1))
            out[key] = {"first": routed[0], "next_p50": median(routed[1:]), "runs": len(routed)}
        return out
    finally:
        sock.close()


def satellite_p50_ms(ha: HomeHa, runs: int) -> float | None:
    """End of speech -> first reply audio on the board through HA's pipeline, on this HA: spoken requests
    into the satellite (bench/satellite_latency.py, which also gives the figure's parts)."""
    from bench.satellite_latency import satellite_p50

    return satellite_p50(ha, runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10, help="turns per figure (at least 10)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.runs < 10:
        parser.error(f"--runs {args.runs}: every figure needs at least 10 runs")
    run = Run("home_latency")
    with tempfile.TemporaryDirectory(prefix="home-latency-") as tmp, home_ha(Path(tmp) / "ha") as ha:
        cfg = config(ha, Path(tmp) / "state")
        voice = create_tts(cfg, None, text="中文")
        voice.load()
        llm = create_llm(cfg)
        llm.load()
        result: dict[str, Any] = {"runs": args.runs, "ha_version": ha.rest("GET", "/api/config")["version"]}
        with sink_speaker(voice, cfg) as speaker:
            result.update(measure_home(cfg, speaker, llm, args.runs))
        result["satellite_p50_ms"] = satellite_p50_ms(ha, args.runs)
        result.update(measure_wedged(cfg, llm, args.runs))
        result.update(measure_llm(cfg, ha, llm, args.runs))  # stops HA half-way
        getattr(llm, "close", lambda: None)()
    run.emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
