"""Command line: argument parsing, logging set-up and the ``--say`` mode.

Modes are chosen by flags; other parts wire theirs in ``main`` (``--text`` speaks verbatim
until answering lands). Every RkvoiceError becomes one line on stderr and a non-zero exit;
unexpected exceptions show their traceback only with ``-v``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import DEFAULT_CONFIG, Config, load_config, parse_override
from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="assistant.py",
        description="rkvoice: an offline Chinese voice assistant.",
    )
    mode = p.add_argument_group("modes")
    mode.add_argument("--say", metavar="TEXT", help="speak TEXT verbatim")
    mode.add_argument("--text", metavar="TEXT", help="ask the assistant TEXT (local tools or the LLM) and speak the answer")
    mode.add_argument("--file", metavar="WAV",
                      help="replay a recording as if spoken into the microphone: VAD -> ASR -> answer -> speak")
    mode.add_argument("--require-wake", action="store_true",
                      help="with --file: act only on speech that starts with the wake phrase")
    mode.add_argument("--check", action="store_true",
                      help="report whether each stage of the configured pipeline can run here (exit 1 if not)")
    out = p.add_argument_group("speech output")
    out.add_argument("--tts", metavar="NAME", help="TTS engine (fastspeech2, vits, matcha, auto)")
    out.add_argument("--out", metavar="WAV", help="also write the speech to this WAV file")
    out.add_argument("--no-play", action="store_true", help="don't play: a real-time null sink stands in for the device")
    out.add_argument("--metrics", metavar="FILE", help="write the run's timeline and summary as JSON")
    out.add_argument(
        "--compare-whole",
        action="store_true",
        help="after the run, synthesise the whole text in one call (whole_text_synth_ms)",
    )
    gen = p.add_argument_group("general")
    gen.add_argument("--config", metavar="FILE", help="config file layered over the defaults (instead of /etc/rkvoice)")
    gen.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="override a config value")
    gen.add_argument("-v", "--verbose", action="store_true", help="debug logging and tracebacks")
    return p


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(levelname)s: %(message)s",
        stream=sys.stderr,
    )


def load_cli_config(args: argparse.Namespace) -> Config:
    overrides = [parse_override(item) for item in args.set]
    if args.tts:
        overrides.append({"tts": {"engine": args.tts}})
    files = None
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise RkvoiceError("config", "missing", f"config file {path} does not exist")
        files = [DEFAULT_CONFIG, path]
    return load_config(overrides, files)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        cfg = load_cli_config(args)
        if args.check:
            from rkvoice.board.check import run_check

            return run_check(cfg, sys.stdout)
        if args.file is not None:
            from rkvoice.hear.cli_file import run_file

            return run_file(args.file, args, cfg)
        if args.require_wake:
            raise RkvoiceError("input", "bad-flags", "--require-wake only applies to --file WAV")
        if args.text is not None:
            from rkvoice.answer.cli_text import run_text

            return run_text(args.text, args, cfg)
        if args.say is not None:
            return run_say(args.say, args, cfg)
        # no mode flag: the resident assistant (microphone loop; what the systemd service runs)
        from rkvoice.daemon.entry import run_from_cli

        return run_from_cli(args, lambda: load_cli_config(args))
    except RkvoiceError as err:
        log.debug("stopped by %s/%s", err.stage, err.code, exc_info=args.verbose)
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE if err.stage == "input" else EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line, the traceback only with -v
        if args.verbose:
            log.exception("unexpected error")
        print(f"error: unexpected {type(exc).__name__}: {exc} (run with -v for the traceback)", file=sys.stderr)
        return EXIT_FAILED


# -- --say ---------------------------------------------------------------------------------

def check_text(text: str, cfg: Config) -> str:
    """The speakable form of TEXT, or a clear refusal."""
    if not text.strip():
        raise RkvoiceError("input", "empty-text", "nothing to say: give --say a non-empty TEXT")
    if len(text) > cfg.tts.max_text_chars:
        raise RkvoiceError(
            "input",
            "text-too-long",
            f"TEXT has {len(text)} characters, more than tts.max_text_chars={cfg.tts.max_text_chars}; "
            "split it into several calls or raise the limit with --set tts.max_text_chars=N",
        )
    from rkvoice.text.normalize import speakable

    spoken = speakable(text)
    if not spoken.strip():
        raise RkvoiceError(
            "input", "nothing-speakable", "TEXT has nothing to pronounce (only symbols or emoji?); give words to --say"
        )
    return spoken


def check_writable(path: Path, what: str) -> None:
    """Fail before any model is loaded when an output file can't be created."""
    if path.is_dir():
        raise RkvoiceError("input", "bad-path", f"{what} {path} is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise RkvoiceError("input", "unwritable", f"cannot write {what} {path}: {parent} is not a writable folder")


@dataclass
class Output:
    """The player the speaker writes into, and the WAV recorder (if any) to commit or abort."""

    player: Any
    wav: Any = None
    wav_announce: bool = False
    parts: list[Any] = field(default_factory=list)

    def commit(self, speaker: Any) -> None:
        """Everything was spoken: join the speaker's threads, then close every output (the WAV
        file is committed)."""
        speaker.close()
        for part in self.parts:
            part.close()

    def abort(self, speaker: Any | None) -> None:
        """Something failed: stop speaking now and drop a half-written WAV file."""
        if speaker is not None:
            speaker.cancel()
            speaker.close(timeout=1.0)
        if self.wav is not None:
            self.wav.abort()

    def report(self) -> None:
        """Say where the speech was written, when it went to a WAV file."""
        if self.wav is not None:
            prefix = "no sound device: " if self.wav_announce else ""
            print(f"{prefix}wrote {self.wav.path} ({self.wav.samples / self.wav.rate:.1f} s)")


def check_outputs(args: argparse.Namespace) -> None:
    """--out and --metrics must be writable before any model loads."""
    if args.out:
        check_writable(Path(args.out), "--out")
    if args.metrics:
        check_writable(Path(args.metrics), "--metrics")


def load_voice(cfg: Config, name: str | None, text: str) -> Any:
    """The TTS engine for ``text`` (``name`` or auto), loaded."""
    from rkvoice.tts.registry import create_tts

    engine = create_tts(cfg, name or None, text)
    t0 = time.monotonic()
    engine.load()
    log.info("loaded %s in %.0f ms", getattr(engine, "name", "tts"), (time.monotonic() - t0) * 1000)
    return engine


def open_output(args: argparse.Namespace, cfg: Config, clock: Clock) -> Output:
    from rkvoice.audio.players import (
        NullPlayer,
        TeePlayer,
        WavPlayer,
        create_player,
        resolve_player_name,
    )

    wav = WavPlayer(cfg, path=args.out) if args.out else None
    announce = False
    if args.no_play:
        main_player: Any = NullPlayer(cfg, clock)
    else:
        name = resolve_player_name(cfg)
        if name == "wav":
            if wav is None:  # no sound device (or audio.player=wav): the speech goes to a file
                wav = WavPlayer(cfg)
                announce = True
            main_player = None
        else:
            main_player = create_player(name, cfg, clock)
    parts = [p for p in (main_player, wav) if p is not None]
    player = parts[0] if len(parts) == 1 else TeePlayer(*parts)
    opened: list[Any] = []
    try:
        for part in parts:
            part.open()
            opened.append(part)
    except BaseException:
        for part in opened:
            if hasattr(part, "abort"):
                part.abort()
        raise
    return Output(player, wav, announce, parts)


def run_say(text: str, args: argparse.Namespace, cfg: Config, clock: Clock | None = None) -> int:
    from rkvoice.speaker import Speaker, raise_if_failed
    from rkvoice.timeline import Timeline

    clock = clock or MonotonicClock()
    spoken = check_text(text, cfg)
    check_outputs(args)
    engine = load_voice(cfg, args.tts, text)
    output = open_output(args, cfg, clock)
    ok = False
    speaker = None
    try:
        timeline = Timeline(clock)
        speaker = Speaker(engine, output.player, cfg, clock, timeline)
        timeline.start()
        turn = speaker.speak(text)
        try:
            result = speaker.wait_done(turn)
        except KeyboardInterrupt:
            speaker.cancel()
            raise
        assert result is not None
        raise_if_failed(result)
        if args.compare_whole:
            t0 = clock.now()
            samples, rate = engine.generate(spoken, sid=cfg.tts.sid, speed=cfg.tts.speed)
            synth_ms = (clock.now() - t0) * 1000.0
            timeline.mark("whole_text_synth", synth_ms=round(synth_ms, 3), audio_s=round(len(samples) / rate, 4))
        output.commit(speaker)
        ok = True
    finally:
        if not ok:
            output.abort(speaker)
    summary = timeline.summary()
    if args.metrics:
        timeline.write(Path(args.metrics))
    log.info("summary %s", summary)
    output.report()
    return 0
