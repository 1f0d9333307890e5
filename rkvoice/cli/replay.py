"""``assistant.py --file WAV [--require-wake]``: replay a recording as if spoken into the microphone,
with the live loop's HearSession and TurnLoop. Prints what was heard and the answer; ``--metrics``
writes the first turn's timeline and every turn's summary."""

from __future__ import annotations

import argparse
import logging
import time
from contextlib import closing
from pathlib import Path

from rkvoice.answer.respond import Answerer
from rkvoice.cli.output import check_outputs, speaking
from rkvoice.clock import MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.echo import EchoCancelledSource, PlayedAudio, echo_filter
from rkvoice.hear.loop import TurnLoop, player_cue
from rkvoice.hear.sources import AudioSource, WavFileSource, read_wav
from rkvoice.stages import Hear, assistant, default_voice
from rkvoice.timeline import Ev, write_json_atomic

log = logging.getLogger(__name__)


def reference_source(source: WavFileSource, args: argparse.Namespace, cfg: Config) -> AudioSource:
    """With ``--reference WAV`` (what the speaker played during the recording, starting with it):
    the recording with that echo cancelled (``hear.aec``), as the daemon hears its microphone."""
    if not getattr(args, "reference", None):
        return source
    reference = read_wav(args.reference)
    played = PlayedAudio(keep_s=len(reference) / 16000 + 1.0)  # all of it: the recording is read at once
    played.push(0, reference)
    echo = echo_filter(cfg, played)
    if echo is None:
        log.warning("hear.aec is external: --reference %s is not used", args.reference)
        return source
    return EchoCancelledSource(source, echo, live=False)


def run_file(path: str, args: argparse.Namespace, cfg: Config) -> int:
    clock = MonotonicClock()
    source = reference_source(WavFileSource(path), args, cfg)  # a bad file fails here, before any model loads
    check_outputs(args)

    t0 = time.monotonic()
    hear = Hear(cfg)  # the daemon's: ASR, wake engine (it also serves --require-wake), VAD segmenter
    hear.load()
    log.info("hearing loaded (%s, wake %s) in %.1f s", getattr(hear.asr, "name", "asr"), type(hear.wake).__name__,
             time.monotonic() - t0)
    with (closing(assistant(cfg, clock)) as answer,
          speaking(args, cfg, clock, lambda c: default_voice(c, args.tts), cue=True) as (speak, output)):
        assert speak.speaker is not None
        loop = TurnLoop(hear.session(), Answerer(answer, speak.speaker, cfg), cue=speak.cue,
                        cue_out=player_cue(output.player), clock=clock)
        turns = loop.run_file(source, require_wake=args.require_wake)

    summaries = [turn.timeline.summary() for turn in turns]
    if args.require_wake:
        print(f"wake: {'yes' if loop.wakes else 'no'}")
    if not turns:
        print("heard: (no request)")
    for turn, summary in zip(turns, summaries):
        print(f"heard: {turn.text}")
        print(f"answer: {turn.result or '(none)'}")
        if "end_to_first_audio_ms" in summary:
            log.info("end_to_first_audio_ms %.0f", summary["end_to_first_audio_ms"])
    if args.metrics:
        heard_nothing = {"events": [], "summary": {"transcript": "", "woke": bool(loop.wakes)}}
        first = turns[0].timeline.to_dict() if turns else heard_nothing
        wakes = [{"text": w.hit.text, "audio_s": round(w.hit.at_s, 3)} for w in loop.wakes]
        write_json_atomic(Path(args.metrics), {**first, "turns": summaries, "wakes": wakes})
    output.report()
    for turn in turns:
        if errors := turn.timeline.find(Ev.ERROR):
            raise RkvoiceError(Stage.SPEAK, "turn-failed", f"the answer to {turn.text!r} failed: {errors[0].get('message')}")
    return 0
