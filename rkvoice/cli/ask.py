"""``assistant.py --text "…"``: ask the assistant (tools or LLM) and speak the answer."""

from __future__ import annotations

import argparse
import logging
from contextlib import closing
from pathlib import Path

from rkvoice.answer.respond import Answerer
from rkvoice.cli.output import check_outputs, speaking
from rkvoice.clock import MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.stages import assistant, default_voice
from rkvoice.timeline import Timeline
from rkvoice.turn import Turn

log = logging.getLogger(__name__)


def run_text(text: str, args: argparse.Namespace, cfg: Config) -> int:
    if not text.strip():
        raise RkvoiceError(Stage.INPUT, "empty-text", "nothing to ask: give --text a non-empty question")
    check_outputs(args)
    clock = MonotonicClock()
    turn = Turn(Timeline(clock), text=text)
    with (closing(assistant(cfg, clock)) as answer,
          speaking(args, cfg, clock, lambda c: default_voice(c, args.tts)) as (speak, output)):
        assert speak.speaker is not None
        turn.timeline.start()
        try:
            turn.finish(Answerer(answer, speak.speaker, cfg).respond(turn))
        except KeyboardInterrupt:
            turn.cancel("interrupted")
            raise
    if args.metrics:
        turn.timeline.write(Path(args.metrics))
    print(turn.result or "(stopped)")
    log.info("summary %s", turn.timeline.summary())
    output.report()
    return 0
