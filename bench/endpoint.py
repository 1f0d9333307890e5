"""Last word -> first sound with the end-of-turn decision (``hear.endpoint.mode: smart``) against a
fixed silence (``mode: silence``), in one run on the same recordings.

    py312/bin/python -m bench.endpoint [--rounds 2] [--speeds 1.0] [--out FILE]

The recordings are the whole tool and home requests of the Chinese turn-end set
(tests/support/turn_set.py) said by the portable voice, each with 0.5 s of silence before and 3 s
after. Each is replayed at real-time pace through the product's hearing (Whisper base transcribing
ahead, the request segmenter of the mode) and turn loop (``TurnLoop.run_file``), answered by the real
Assistant (tools; home commands through a stand-in Home Assistant on loopback that answers at once)
and spoken by the real Speaker into a draining null player. Last word: when the clip's last loud
20 ms was fed; first sound: when the turn's first PCM reached the player. The two modes alternate
clip by clip, so both see the same machine load. A turn heard as another route than its request's
is left out and listed. Also the model's ms per judgement (one thread) and how smart turns ended.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.respond import Answerer
from rkvoice.clock import MonotonicClock
from rkvoice.config import Config, load_config
from rkvoice.hear.ahead import TranscribeAhead
from rkvoice.hear.asr import create_asr
from rkvoice.hear.session import HearSession, Mode
from rkvoice.hear.turn_end import request_end
from rkvoice.hear.vad import Segment, Segmenter
from rkvoice.hear.wake import PHRASE_SILENCE_S, WakeHit
from rkvoice.stages import installed_voice
from rkvoice.timeline import Ev
from rkvoice.tts.registry import installed_voices
from rkvoice.turn_loop import TurnLoop
from tests.fakes import ScriptedLlm
from tests.support import SleepingClock, bench_run, percentile
from tests.support.feed import FRAME, RATE, paced
from tests.support.sink import sink_speaker
from tests.support.turn_set import Clip, Voice, clips_for, requests

LEAD_S, TAIL_S = 0.5, 3.0
DITHER = 1e-4
"""Noise added to each replay (-80 dB): no two turns hand the ASR the same samples, as no two takes of a
microphone do. Without it the second mode's replay of a clip found the first one's encoder output kept
(rkvoice.hear.whisper_asr keeps the last one for the wake's second look) and decoded in ~350 ms instead
of ~1.3 s, and the mode that went second won."""
MODES = ("smart", "silence")


class StandInHa(ThreadingHTTPServer):
    """Home Assistant's conversation agent on loopback: every command done at once."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: object) -> None:
        pass

    def _send(self, body: Any) -> None:
        raw = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._send([])

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        speech = {"plain": {"speech": "好的，已经办好了。", "extra_data": None}}
        self._send({"response": {"speech": speech, "card": {}, "language": "zh-CN", "response_type": "action_done",
                                 "data": {"targets": [], "success": [], "failed": []}},
                    "conversation_id": "bench", "continue_conversation": False})


class NoWake:
    """The replay listens without a wake phrase (as ``--file`` does)."""

    def load(self) -> None:
        pass

    def restart(self, at_sample: int) -> None:
        pass

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        return None

    def flush(self) -> WakeHit | None:
        return None


class Paced:
    """A clip at real-time pace (``start``: when its first sample was due)."""

    def __init__(self, audio: np.ndarray) -> None:
        self.audio = audio
        self.start = 0.0
        self.clock = SleepingClock()
        self._closed = threading.Event()

    def frames(self) -> Iterator[np.ndarray]:
        self.start = self.clock.now()
        n = len(self.audio) // FRAME
        yield from paced((self.audio[i * FRAME: (i + 1) * FRAME] for i in range(n)), self.clock, self.start,
                         FRAME / RATE, self._closed)

    def close(self) -> None:
        self._closed.set()


def with_mode(cfg: Config, mode: str) -> Config:
    ep = dataclasses.replace(cfg.hear.endpoint, mode=mode)
    return dataclasses.replace(cfg, hear=dataclasses.replace(cfg.hear, endpoint=ep))


def one_turn(cfg: Config, asr: TranscribeAhead, segmenter: Segmenter, answerer: Answerer, clip: Clip,
             rng: np.random.Generator) -> dict[str, Any]:
    """Replay ``clip`` (with fresh ``DITHER``): its turn's last word -> first sound and how its end was decided."""
    session = HearSession(cfg, asr, NoWake(), segmenter)
    loop = TurnLoop(session, answerer, clock=MonotonicClock())
    ended: list[float] = []
    mark = session.on_speech_end

    def speech_end(seg: Segment, mode: Mode) -> None:
        ended.append(time.monotonic())  # the turn's timeline starts here
        assert mark is not None
        mark(seg, mode)

    session.on_speech_end = speech_end
    audio = np.concatenate([np.zeros(int(LEAD_S * RATE), np.float32), clip.audio,
                            np.zeros(int(TAIL_S * RATE), np.float32)])
    audio = (audio + DITHER * rng.standard_normal(len(audio))).astype(np.float32)
    source = Paced(audio)
    turns = loop.run_file(source)  # type: ignore[arg-type]
    if not turns:
        return {"clip": clip.name, "heard": None}
    turn = turns[0]
    first = turn.timeline.find(Ev.AUDIO_FIRST)
    route = next((str(e.get("route")) for e in turn.timeline.find(Ev.ROUTE)), "")
    end = turn.timeline.find(Ev.SPEECH_END)[0]
    last_word = source.start + LEAD_S + clip.speech_s
    return {"clip": clip.name, "kind": clip.kind, "heard": turn.text, "route": route,
            "ms": round((ended[0] + first[0].t_ms / 1000.0 - last_word) * 1000.0, 1) if first else None,
            "decided_ms": round((ended[0] - last_word) * 1000.0, 1),
            "ended_by": end.get("ended_by", "silence"), "judged": end.get("judged") or []}


def right_route(row: dict[str, Any]) -> bool:
    return row["route"].startswith("tool") if row["kind"] == "tool" else row["route"] == "home"


def stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ms = [r["ms"] for r in rows]
    return {"n": len(ms), "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90),
            "decided_p50_ms": percentile([r["decided_ms"] for r in rows], 50)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="replays of each recording per mode")
    ap.add_argument("--speeds", default="1.0", help="speaking rates of the voice")
    args, report = bench_run("endpoint", ap, argv)
    ha = StandInHa()
    threading.Thread(target=ha.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="rkvoice-endpoint-") as tmp:
        token = Path(tmp) / "ha_token"
        token.write_text("bench-token\n")
        token.chmod(0o600)
        base = load_config([{"state": {"dir": str(Path(tmp) / "state")}},
                            {"home_assistant": {"url": ha.url, "token_file": str(token)}}])
        voice = Voice("fastspeech2", installed_voice(base, installed_voices(base)["fastspeech2"]))
        clips = [c for speed in (float(s) for s in args.speeds.split(","))
                 for kind, text in requests(kinds=("tool", "home"))
                 for c in clips_for(voice, text, kind, speed, pauses=()) if c.shape == "whole"]
        raw = create_asr(base)
        raw.load()
        asr = TranscribeAhead(raw)
        segmenters = {}
        for mode in MODES:
            seg = request_end(with_mode(base, mode), early_silence_s=PHRASE_SILENCE_S)
            seg.load()
            segmenters[mode] = seg
        assistant = Assistant(base, MonotonicClock(), llm=ScriptedLlm(["我来回答。"]))
        rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        rng = np.random.default_rng(0)
        with sink_speaker(voice.engine, base) as speaker:
            answerer = Answerer(assistant, speaker, base)
            for r in range(args.rounds):
                for i, clip in enumerate(clips):
                    for mode in (MODES if (i + r) % 2 == 0 else MODES[::-1]):
                        rows[mode].append(one_turn(with_mode(base, mode), asr, segmenters[mode], answerer, clip, rng))
        asr.close()
        assistant.close()
    ha.shutdown()
    good = {m: [r for r in rows[m] if r.get("ms") is not None and right_route(r)] for m in MODES}
    judged = [j["ms"] for r in good["smart"] for j in r["judged"] if j["p"] is not None]
    out: dict[str, Any] = {f"{m}_{k}": v for m in MODES for k, v in stats(good[m]).items()}
    if out["smart_p50_ms"] is not None and out["silence_p50_ms"] is not None:
        out["saved_p50_ms"] = round(out["silence_p50_ms"] - out["smart_p50_ms"], 1)
    out.update({
        "routes": {m: {kind: stats([r for r in good[m] if r["kind"] == kind]) for kind in ("tool", "home")} for m in MODES},
        "judge_p50_ms": percentile(judged, 50), "judge_p90_ms": percentile(judged, 90), "judgements": len(judged),
        "smart_ended_by": {v: sum(r["ended_by"] == v for r in good["smart"]) for v in {r["ended_by"] for r in good["smart"]}},
        "left_out": [{k: r.get(k) for k in ("clip", "heard", "route")} for m in MODES for r in rows[m]
                     if r not in good[m]],
        "rounds": args.rounds, "recordings": len(clips),
        "endpoint": dataclasses.asdict(base.hear.endpoint), "trailing_silence_ms": base.hear.trailing_silence_ms,
    })
    report.emit(out, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
