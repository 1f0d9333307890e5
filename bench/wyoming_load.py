"""Wyoming load: N concurrent clients x M mixed requests against a real in-process server; prints JSON.

Each request is its own connection (as Home Assistant makes them), cycling through transcribe (a
Chinese request WAV made by the portable voice, sent as 16-bit 16 kHz), synthesize, streamed
synthesis, detect (the wake phrase), handle (a question a local tool answers) and describe. After
a warm-up round (every client through every kind once) the resident set (VmRSS) is read, the load runs, and it is read
again. Time to first audio is shown beside the time to the last audio of the same answers: a
server that synthesised the whole text first would send its first chunk only at the latter. The
same requests from one client alone are shown beside the loaded figures (the engines' own speed;
under load the one ASR engine serves every transcribe and detect in turn).

    py312/bin/python -m bench.wyoming_load --clients 8 --requests 20

Pass: every request answered, no errors, RSS growth < 5 %.

``--storm`` runs the probes of a client trying to lock Home Assistant out instead, against a server
with the default limits (``wyoming`` section; ``--idle-s`` overrides idle_timeout_s):

- ``max_clients`` connections held open (idle, or after ``synthesize-start`` and nothing more): the
  time a fresh ``describe`` takes (Home Assistant gives it 1 s), and when and how the held ones are
  closed (``idle``; ``evicted`` for an idle one that made way for the describe);
- a transcription whose client left at once after ``audio-stop``, and two more queued behind a
  running one that left: the next client's transcript time beside the same request alone;
- malformed events (fields of the wrong JSON type, ``"voice": "abc"``, deeply nested JSON, a bad
  audio format): the error code each gets, whether a transcript came, whether the connection goes
  on (not after malformed JSON, which ends it) and whether the server still answers ``describe``.

    py312/bin/python -m bench.wyoming_load --storm

Pass: describe under 1 s in both holds, every held connection closed by the idle limit, the next
transcript within 1.5x of alone, every probe answered with its error and no transcript.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from wyoming.asr import Transcribe, Transcript
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.handle import Handled
from wyoming.info import Describe
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop
from wyoming.wake import Detect

from rkvoice.config import load_config
from rkvoice.stages import wake_factory
from rkvoice.wyoming.engines import Engines
from rkvoice.wyoming.server import serve_wyoming
from tests.support import bench_run, footprint, percentile
from tests.support.net import RATE, pcm16, send_pcm

KINDS = ("transcribe", "synthesize", "stream", "detect", "handle", "describe")
SAY = "今天天气不错，我们一起去公园散步吧。"
END = {"transcribe": "transcript", "synthesize": "audio-stop", "stream": "synthesize-stopped",
       "detect": "detection", "handle": "handled", "describe": "info"}


def speech(voice: Any, text: str) -> bytes:
    import soxr

    audio, rate = voice.generate(text)
    return pcm16(soxr.resample(np.asarray(audio, np.float32), rate, RATE), pad_s=0.5, tail_s=1.0)


async def one(port: int, kind: str, audio: dict[str, bytes]) -> dict[str, Any]:
    t0 = time.monotonic()
    first_audio = last_audio = None
    async with AsyncTcpClient("127.0.0.1", port) as c:
        if kind == "transcribe":
            await c.write_event(Transcribe(language="zh").event())
            await send_pcm(c, audio["request"])
        elif kind == "synthesize":
            await c.write_event(Synthesize(text=SAY).event())
        elif kind == "stream":
            await c.write_event(SynthesizeStart().event())
            for part in ("今天天气不错，", "我们一起去", "公园散步吧。"):
                await c.write_event(SynthesizeChunk(text=part).event())
            await c.write_event(SynthesizeStop().event())
        elif kind == "detect":
            await c.write_event(Detect().event())
            await send_pcm(c, audio["wake"])
        elif kind == "handle":
            await c.write_event(Transcript(text="现在几点").event())
        else:
            await c.write_event(Describe().event())
        sent = time.monotonic()
        while True:
            event: Event | None = await c.read_event()
            if event is None:
                return {"kind": kind, "error": "closed"}
            if event.type == "error":
                return {"kind": kind, "error": event.data.get("text", "")}
            if event.type == "audio-chunk":
                last_audio = time.monotonic()
                first_audio = first_audio or last_audio
            if event.type == END[kind] or (kind == "detect" and event.type == "not-detected"):
                break
    out: dict[str, Any] = {"kind": kind, "total_ms": (time.monotonic() - t0) * 1000}
    if event.type == "not-detected":
        out["error"] = "wake phrase not detected"
    if kind == "transcribe":
        out["to_transcript_ms"] = (time.monotonic() - sent) * 1000
        out["text"] = Transcript.from_event(event).text
    if kind == "handle" and "点" not in (Handled.from_event(event).text or ""):
        out["error"] = f"unexpected answer {event.data}"
    if first_audio is not None and last_audio is not None:
        out["first_audio_ms"] = (first_audio - t0) * 1000
        out["last_audio_ms"] = (last_audio - t0) * 1000
    return out


async def client(port: int, index: int, requests: int, audio: dict[str, bytes]) -> list[dict[str, Any]]:
    results = []
    for i in range(requests):
        kind = KINDS[(index + i) % len(KINDS)]
        try:
            results.append(await asyncio.wait_for(one(port, kind, audio), 300))
        except Exception as exc:  # counted as an error in the report
            results.append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"})
    return results


# -- storm: one client trying to lock the others out ---------------------------------------------


async def _held(port: int, streaming: bool) -> AsyncTcpClient:
    """A connection the server has counted (a ping answered), idle or inside a streamed synthesis."""
    c = AsyncTcpClient("127.0.0.1", port)
    await c.connect()
    if streaming:
        await c.write_event(SynthesizeStart().event())
    await c.write_event(Ping().event())
    while (event := await c.read_event()) is not None and event.type != "pong":
        pass
    return c


async def _closed_after(c: AsyncTcpClient, t0: float) -> tuple[float, str]:
    last = ""
    while (event := await c.read_event()) is not None:
        last = event.data.get("code", event.type) if event.type == "error" else event.type
    await c.disconnect()
    return time.monotonic() - t0, last


async def _describe_ms(port: int) -> tuple[float, str]:
    t0 = time.monotonic()
    async with AsyncTcpClient("127.0.0.1", port) as c:
        await c.write_event(Describe().event())
        event = await c.read_event()
    return (time.monotonic() - t0) * 1000, event.type if event is not None else "closed"


async def _transcribe_ms(port: int, pcm: bytes) -> float:
    t0 = time.monotonic()
    async with AsyncTcpClient("127.0.0.1", port) as c:
        await c.write_event(Transcribe(language="zh").event())
        await send_pcm(c, pcm)
        while (event := await c.read_event()) is not None and event.type != "transcript":
            pass
    return (time.monotonic() - t0) * 1000


async def _leave_after(port: int, pcm: bytes) -> None:
    async with AsyncTcpClient("127.0.0.1", port) as c:
        await c.write_event(Transcribe(language="zh").event())
        await send_pcm(c, pcm)


PROBES: dict[str, bytes] = {
    "voice as a string": b'{"type": "synthesize", "data": {"text": "hi", "voice": "abc"}}\n',
    "data as a list": b'{"type": "transcribe", "data": [1, 2]}\n',
    "text as a number": b'{"type": "transcript", "data": {"text": 5}}\n',
    "rate as a string": b'{"type": "audio-start", "data": {"rate": "16000", "width": 2, "channels": 1}}\n',
    "deeply nested json": b'{"type": "transcript", "data": {"text": ' + b"[" * 20000 + b"]" * 20000 + b"}}\n",
    "bad audio format": (b'{"type": "transcribe"}\n{"type": "audio-start", "data": {"rate": 3, "width": 7, '
                         b'"channels": 1}}\n{"type": "audio-stop"}\n'),
}


async def _probe(port: int, payload: bytes) -> dict[str, Any]:
    from wyoming.event import async_read_event

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload + b'{"type": "ping"}\n')
    await writer.drain()
    types: list[str] = []
    codes: list[str] = []
    while (event := await asyncio.wait_for(async_read_event(reader), 60)) is not None:
        types.append(event.type)
        if event.type == "error":
            codes.append(str(event.data.get("code")))
        if event.type == "pong":
            break
    writer.close()
    return {"errors": codes, "transcript": "transcript" in types, "went_on": "pong" in types}


async def storm(port: int, audio: dict[str, bytes], max_clients: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, streaming in (("idle", False), ("synthesize_start", True)):
        held = [await _held(port, streaming) for _ in range(max_clients)]
        ms, answer = await _describe_ms(port)
        t0 = time.monotonic()
        closed = await asyncio.gather(*(_closed_after(c, t0) for c in held))
        out[f"held_{name}"] = {
            "connections": max_clients, "describe_ms": round(ms, 1), "describe_answer": answer,
            "closed_after_s_max": round(max(s for s, _ in closed), 1),
            "closed_by": sorted({code for _, code in closed}),
        }
    alone = await _transcribe_ms(port, audio["request"])
    await _leave_after(port, audio["long"])
    after_one = await _transcribe_ms(port, audio["request"])
    await asyncio.gather(_leave_after(port, audio["long"]), _leave_after(port, audio["long"]),
                         _leave_after(port, audio["long"]))
    after_three = await _transcribe_ms(port, audio["request"])
    out["left_transcriptions"] = {
        "long_audio_s": round(len(audio["long"]) / 2 / RATE, 1), "next_alone_ms": round(alone, 1),
        "next_after_one_left_ms": round(after_one, 1), "next_after_three_left_ms": round(after_three, 1),
    }
    out["probes"] = {name: await _probe(port, payload) for name, payload in PROBES.items()}
    ms, answer = await _describe_ms(port)
    out["describe_after_ms"], out["describe_after"] = round(ms, 1), answer
    holds = [out["held_idle"], out["held_synthesize_start"]]
    left = out["left_transcriptions"]
    out["pass"] = (
        all(h["describe_answer"] == "info" and h["describe_ms"] < 1000 and set(h["closed_by"]) <= {"idle", "evicted"}
            for h in holds)  # the describe may have closed the oldest idle one to be served
        and max(left["next_after_one_left_ms"], left["next_after_three_left_ms"]) <= 1.5 * left["next_alone_ms"]
        and all(p["errors"] and not p["transcript"] and (p["went_on"] or p["errors"] == ["malformed"])
                for p in out["probes"].values())  # a malformed stream cannot go on: that connection closes
        and answer == "info"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=20, help="requests per client")
    ap.add_argument("--storm", action="store_true", help="run the lock-out probes instead of the load")
    ap.add_argument("--idle-s", type=float, default=None, help="wyoming.idle_timeout_s for --storm")
    args, run_info = bench_run("wyoming_load", ap)

    from rkvoice.answer.assistant import Assistant
    from rkvoice.hear.asr import create_asr
    from rkvoice.state import StateStore
    from rkvoice.tts.registry import create_tts

    cfg = load_config()
    asr = create_asr(cfg)
    asr.load()
    tts = create_tts(cfg, "fastspeech2")
    tts.load()
    state = tempfile.TemporaryDirectory(prefix="wyoming-bench-")
    engines = Engines(asr=asr, tts=tts, assistant=Assistant(cfg, store=StateStore(Path(state.name))),
                      wake_factory=wake_factory(cfg))
    audio = {"request": speech(tts, "今天天气怎么样"), "wake": speech(tts, "小智小智")}
    audio["long"] = (audio["request"] * 8)[: RATE * 2 * 20]  # about 20 s of speech
    if args.idle_s is not None:
        cfg = replace(cfg, wyoming=replace(cfg.wyoming, idle_timeout_s=args.idle_s))

    stop = threading.Event()
    ready = threading.Event()
    servers: list[Any] = []

    def on_ready(server: Any) -> None:
        servers.append(server)
        ready.set()

    thread = threading.Thread(target=serve_wyoming, args=(cfg, "tcp://127.0.0.1:0"),
                              kwargs={"engines": engines, "stop": stop, "ready": on_ready},
                              daemon=True)
    thread.start()
    if not ready.wait(60):
        raise SystemExit("the server did not start")
    port = servers[0].port
    if args.storm:
        report = asyncio.run(storm(port, audio, cfg.wyoming.max_clients))
        report["idle_timeout_s"] = cfg.wyoming.idle_timeout_s
        report["mode"] = "storm"
        stop.set()
        thread.join(30)
        run_info.emit(report, args.out)
        state.cleanup()
        return

    async def run(clients: int, requests: int) -> list[dict[str, Any]]:
        batches = await asyncio.gather(*(client(port, i, requests, audio) for i in range(clients)))
        return [r for batch in batches for r in batch]

    # warm-up: one round at the load's own concurrency, every client through every kind, so pools that
    # grow with concurrency (the ASR/TTS workers' caches, the wake engines of concurrent detect streams,
    # at most wyoming.max_wake_streams) reach their size before the resident set is read
    warm = asyncio.run(run(args.clients, len(KINDS)))
    solo = asyncio.run(run(1, len(KINDS)))  # one client alone: the engines' own speed, no queueing
    rss_before = footprint().rss_kb
    t0 = time.monotonic()
    results = asyncio.run(run(args.clients, args.requests))
    wall = time.monotonic() - t0
    rss_after = footprint().rss_kb
    stop.set()
    thread.join(30)

    errors = [r for r in results if "error" in r]
    first = [r["first_audio_ms"] for r in results if "first_audio_ms" in r]
    last = [r["last_audio_ms"] for r in results if "last_audio_ms" in r]
    to_text = [r["to_transcript_ms"] for r in results if "to_transcript_ms" in r]
    def solo_ms(key: str) -> float | None:
        return next((round(r[key], 1) for r in solo if key in r), None)

    report = {
        "clients": args.clients, "requests_per_client": args.requests,
        "requested": args.clients * args.requests, "done": len(results) - len(errors), "errors": len(errors),
        "error_samples": errors[:5], "warmup_requests": len(warm), "warmup_errors": sum("error" in r for r in warm),
        "by_kind": {k: sum(r["kind"] == k for r in results) for k in KINDS},
        "wall_s": round(wall, 1),
        "first_audio_ms": {"p50": percentile(first, 50), "p90": percentile(first, 90)},
        "last_audio_ms_whole_text_first_chunk_would_be": {"p50": percentile(last, 50), "p90": percentile(last, 90)},
        "to_transcript_ms": {"p50": percentile(to_text, 50), "p90": percentile(to_text, 90)},
        "one_client_alone_ms": {"first_audio": solo_ms("first_audio_ms"), "last_audio": solo_ms("last_audio_ms"),
                                "to_transcript": solo_ms("to_transcript_ms"),
                                "errors": sum("error" in r for r in solo)},
        "transcripts_seen": sorted({r["text"] for r in results if "text" in r}),
        "rss_kb_before": rss_before, "rss_kb_after": rss_after,
        "rss_growth_pct": round((rss_after - rss_before) / rss_before * 100, 2),
    }
    run_info.emit(report, args.out)
    state.cleanup()


if __name__ == "__main__":
    main()
