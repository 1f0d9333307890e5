"""The one-shot modes of ``assistant.py`` (``rkvoice.cli.entry.MODES``), each into this run's output
(rkvoice.cli.output):

- ``--say TEXT``: speak TEXT verbatim (optionally also into a WAV file);
- ``--text "…"``: ask the assistant (tools or LLM) and speak the answer;
- ``--file WAV [--require-wake]``: replay a recording as if spoken into the microphone, with the
  live loop's HearSession and TurnLoop. Prints what was heard and the answer; ``--metrics``
  writes the first turn's timeline and every turn's summary.
"""

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
from rkvoice.hear.sources import AudioSource, WavFileSource, read_wav
from rkvoice.stages import Hear, assistant, default_voice
from rkvoice.text.normalize import speakable
from rkvoice.timeline import Ev, Timeline, write_json_atomic
from rkvoice.turn import Turn
from rkvoice.turn_loop import TurnLoop, player_cue

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
