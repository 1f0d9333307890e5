"""``assistant.py --file WAV [--require-wake]``: replay a recording as if spoken into the microphone.

VAD -> (wake) -> ASR -> answer (tools or LLM) -> speak, with the same HearSession and TurnLoop as
the live loop. Prints what was heard and the answer; ``--metrics`` writes the first turn's
timeline with ``transcript`` and ``end_to_first_audio_ms`` in its summary.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.timeline import write_json_atomic

log = logging.getLogger(__name__)


def load_hearing(cfg: Config, require_wake: bool) -> tuple[Any, Any, Any]:
    """ASR, wake engine and VAD segmenter, loaded (the wake engine also serves --require-wake)."""
    from rkvoice.hear.asr import create_asr
    from rkvoice.hear.vad import Segmenter
    from rkvoice.hear.wake import create_wake

    t0 = time.monotonic()
    asr = create_asr(cfg)
    asr.load()
    wake = create_wake(cfg, asr)
    wake.load()
    segmenter = Segmenter(cfg)
    segmenter.load()
    log.info("hearing loaded (%s, wake %s) in %.1f s", asr.name, type(wake).__name__, time.monotonic() - t0)
    return asr, wake, segmenter


def run_file(path: str, args: argparse.Namespace, cfg: Config, clock: Clock | None = None) -> int:
    from rkvoice.answer.assistant import Assistant
    from rkvoice.answer.cli_text import answer_summary, answering
    from rkvoice.cli import check_outputs, load_voice, open_output
    from rkvoice.hear.cue import AckCue
    from rkvoice.hear.loop import TurnLoop, hear_summary, player_cue
    from rkvoice.hear.session import HearSession
    from rkvoice.hear.sources import WavFileSource

    clock = clock or MonotonicClock()
    require_wake = bool(getattr(args, "require_wake", False))
    source = WavFileSource(path)  # a bad file fails here, before any model loads
    check_outputs(args)

    asr, wake, segmenter = load_hearing(cfg, require_wake)
    engine = load_voice(cfg, args.tts, "你好")
    cue = AckCue(cfg)
    cue.load()
    assistant = Assistant(cfg, clock)
    output = open_output(args, cfg, clock)
    with answering(assistant, engine, output, cfg, clock) as answerer:
        session = HearSession(cfg, asr, wake, segmenter)
        loop = TurnLoop(session, answerer, cue=cue.samples, cue_out=player_cue(output.player), clock=clock)
        turns = loop.run_file(source, require_wake=require_wake)

    turn_summaries = []
    for turn in turns:
        events = turn.timeline.events
        route = next((e.get("route", "") for e in events if e["name"] == "route"), "")
        turn_summaries.append({**answer_summary(turn.timeline, turn.answer, route), **hear_summary(events)})
    if require_wake:
        print(f"wake: {'yes' if loop.wakes else 'no'}")
    if not turns:
        print("heard: (no request)")
    for turn, summary in zip(turns, turn_summaries):
        print(f"heard: {turn.transcript}")
        print(f"answer: {turn.answer or '(none)'}")
        if "end_to_first_audio_ms" in summary:
            log.info("end_to_first_audio_ms %.0f", summary["end_to_first_audio_ms"])
    if args.metrics:
        first = turns[0] if turns else None
        data = {
            "events": first.timeline.events if first else [],
            "summary": turn_summaries[0] if first else {"transcript": "", "woke": bool(loop.wakes)},
            "turns": turn_summaries,
            "wakes": [{"text": w.hit.text, "audio_s": round(w.hit.at_s, 3)} for w in loop.wakes],
        }
        write_json_atomic(Path(args.metrics), data)
    output.report()
    for turn in turns:
        errors = turn.timeline.find("error")
        if errors:
            raise RkvoiceError("speak", "turn-failed", f"the answer to {turn.transcript!r} failed: {errors[0]['message']}")
    return 0
