"""``assistant.py --text "…"``: ask the assistant (tools or LLM) and speak the answer."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.respond import Answerer
from rkvoice.cli.output import check_outputs, load_voice, open_output, speaking
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.timeline import Timeline
from rkvoice.turn import Turn

log = logging.getLogger(__name__)


def run_text(text: str, args: argparse.Namespace, cfg: Config, clock: Clock | None = None) -> int:
    clock = clock or MonotonicClock()
    if not text.strip():
        raise RkvoiceError(Stage.INPUT, "empty-text", "nothing to ask: give --text a non-empty question")
    check_outputs(args)
    assistant = Assistant(cfg, clock)
    try:
        engine = load_voice(cfg, args.tts, "你好")
        output = open_output(args, cfg, clock)
        turn = Turn(Timeline(clock), text=text)
        with speaking(engine, output, cfg, clock) as speaker:
            turn.timeline.start()
            try:
                turn.finish(Answerer(assistant, speaker, cfg).respond(turn))
            except KeyboardInterrupt:
                turn.cancel("interrupted")
                raise
    finally:
        assistant.close()
    if args.metrics:
        turn.timeline.write(Path(args.metrics))
    print(turn.result or "(stopped)")
    log.info("summary %s", turn.summary())
    output.report()
    return 0
