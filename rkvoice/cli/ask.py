"""``assistant.py --text "…"``: ask the assistant (tools or LLM) and speak the answer."""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.text.normalize import speakable
from rkvoice.timeline import Timeline, write_json_atomic

log = logging.getLogger(__name__)


def _letters(text: str) -> str:
    return re.sub(r"[\W_]+", "", text)


def answer_summary(timeline: Timeline, answer: str, route: str) -> dict[str, Any]:
    """The speaker's summary plus the answer's own figures (ms on the timeline's scale)."""
    events = timeline.events
    summary = timeline.summary()
    summary["answer"] = answer
    summary["route"] = route

    def first(name: str) -> float | None:
        return next((e["t_ms"] for e in events if e["name"] == name), None)

    for name in ("llm_start", "llm_first_token", "llm_done", "text_ready", "audio_first", "play_end"):
        t = first(name)
        if t is not None:
            summary[f"{name}_ms"] = t
    spoken = "".join(e.get("text", "") for e in events if e["name"] == "chunk")
    summary["spoken_chars"] = len(_letters(spoken))
    summary["answer_chars"] = len(_letters(speakable(answer))) if answer else 0
    start, done, audio = first("llm_start"), first("llm_done"), first("audio_first")
    if start is not None and audio is not None:
        summary["first_audio_from_llm_start_ms"] = round(audio - start, 3)
    if done is not None and audio is not None:
        summary["audio_first_before_llm_done"] = audio < done
    return summary


@contextmanager
def answering(
    assistant: Any, engine: Any, output: Any, cfg: Config, clock: Clock, timeline: Timeline | None = None
) -> Iterator[Any]:
    """An Answerer speaking into ``output`` for one CLI run.

    On success the output is committed (the WAV renamed into place); on any error or Ctrl-C
    the answer is cancelled and the output aborted, so no half-written WAV is left. The
    assistant is closed either way.
    """
    from rkvoice.answer.turn import Answerer
    from rkvoice.speaker import Speaker

    speaker = None
    ok = False
    try:
        speaker = Speaker(engine, output.player, cfg, clock, timeline)
        answerer = Answerer(assistant, speaker, cfg, clock)
        try:
            yield answerer
        except KeyboardInterrupt:
            answerer.cancel()
            raise
        output.commit(speaker)
        ok = True
    finally:
        if not ok:
            output.abort(speaker)
        assistant.close()


def run_text(text: str, args: argparse.Namespace, cfg: Config, clock: Clock | None = None) -> int:
    from rkvoice.answer.assistant import Assistant
    from rkvoice.cli import check_outputs, load_voice, open_output
    from rkvoice.speaker import raise_if_failed

    clock = clock or MonotonicClock()
    if not text.strip():
        raise RkvoiceError("input", "empty-text", "nothing to ask: give --text a non-empty question")
    check_outputs(args)
    assistant = Assistant(cfg, clock)
    engine = load_voice(cfg, args.tts, "你好")
    output = open_output(args, cfg, clock)
    timeline = Timeline(clock)
    with answering(assistant, engine, output, cfg, clock, timeline) as answerer:
        timeline.start()
        answered = answerer.ask(text, timeline)
        raise_if_failed(answered.result)
    summary = answer_summary(timeline, answered.text, answered.route)
    if args.metrics:
        write_json_atomic(Path(args.metrics), {"events": timeline.events, "summary": summary})
    print(answered.text or "(stopped)")
    log.info("summary %s", summary)
    output.report()
    return 0
