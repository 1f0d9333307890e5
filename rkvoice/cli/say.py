"""``assistant.py --say TEXT``: speak TEXT verbatim (optionally also into a WAV file)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from rkvoice.cli.output import check_outputs, speaking
from rkvoice.clock import MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.stages import default_voice
from rkvoice.text.normalize import speakable
from rkvoice.timeline import Ev, Timeline

log = logging.getLogger(__name__)


def check_text(text: str, cfg: Config) -> str:
    """The speakable form of TEXT, or a clear refusal."""
    if not text.strip():
        raise RkvoiceError(Stage.INPUT, "empty-text", "nothing to say: give --say a non-empty TEXT")
    if len(text) > cfg.tts.max_text_chars:
        raise RkvoiceError(Stage.INPUT, "text-too-long", f"TEXT has {len(text)} characters, more than tts.max_text_chars="
                           f"{cfg.tts.max_text_chars}; split it into several calls or raise the limit with "
                           "--set tts.max_text_chars=N")
    spoken = speakable(text)
    if not spoken.strip():
        raise RkvoiceError(
            Stage.INPUT, "nothing-speakable", "TEXT has nothing to pronounce (only symbols or emoji?); give words to --say"
        )
    return spoken


def run_say(text: str, args: argparse.Namespace, cfg: Config) -> int:
    clock = MonotonicClock()
    spoken = check_text(text, cfg)
    check_outputs(args)
    timeline = Timeline(clock)
    with speaking(args, cfg, clock, lambda c: default_voice(c, args.tts, text)) as (speak, output):
        speaker = speak.speaker
        assert speaker is not None and speak.tts is not None
        timeline.start()
        turn = speaker.speak(text, timeline)
        try:
            speaker.wait(turn)
        except KeyboardInterrupt:
            turn.cancel("interrupted")
            raise
        turn.raise_if_failed()
        if args.compare_whole:
            t0 = clock.now()
            samples, rate = speak.tts.generate(spoken, sid=cfg.tts.sid, speed=cfg.tts.speed)
            synth_ms = (clock.now() - t0) * 1000.0
            timeline.mark(Ev.WHOLE_TEXT_SYNTH, synth_ms=round(synth_ms, 3), audio_s=round(len(samples) / rate, 4))
    if args.metrics:
        timeline.write(Path(args.metrics))
    log.info("summary %s", timeline.summary())
    output.report()
    return 0
