"""Command line entry: argument parsing, logging set-up, and the choice of mode (``MODES``, ``--check``,
or none: the resident assistant). Every RkvoiceError becomes one line on stderr and a non-zero exit;
unexpected exceptions show their traceback only with ``-v``."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from rkvoice.config import DEFAULT_CONFIG, Config, load_config, parse_override
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
MODES = {"wyoming": "rkvoice.cli.entry:run_wyoming", "satellite": "rkvoice.cli.satellite:run_satellite",
         "file": "rkvoice.cli.modes:run_file",
         "text": "rkvoice.cli.modes:run_text", "say": "rkvoice.cli.modes:run_say"}
"""Mode flag -> the function (``module:name``, imported when chosen) given its value; the first flag set wins."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="assistant.py", description="rkvoice: an offline Chinese voice assistant.")
    mode = p.add_argument_group("modes")
    mode.add_argument("--say", metavar="TEXT", help="speak TEXT verbatim")
    mode.add_argument("--text", metavar="TEXT", help="ask the assistant TEXT (local tools, Home Assistant or the LLM) and speak the answer")
    mode.add_argument("--file", metavar="WAV",
                      help="replay a recording as if spoken into the microphone: VAD -> ASR -> answer -> speak")
    mode.add_argument("--require-wake", action="store_true",
                      help="with --file: act only on speech that starts with the wake phrase")
    mode.add_argument("--reference", metavar="WAV",
                      help="with --file: what the speaker played during the recording (from its start); "
                           "its echo is cancelled before hearing (hear.aec)")
    mode.add_argument("--check", action="store_true",
                      help="report whether each stage of the configured pipeline can run here (exit 1 if not)")
    mode.add_argument("--wyoming", metavar="URI",
                      help="serve wake, ASR, TTS and answers over the Wyoming protocol at URI "
                           "(tcp://0.0.0.0:10300 or unix:///path); no authentication: anyone who reaches the "
                           "port can use it")
    mode.add_argument("--satellite", metavar="URI",
                      help="be a Home Assistant Assist satellite listening on URI (tcp://0.0.0.0:10700, not the services' port): wake here, "
                           "HA's pipeline answers; with --file WAV [--out WAV]: one request from a recording")
    mode.add_argument("--zeroconf", action="store_true",
                      help="with --wyoming: announce the server as _wyoming._tcp on the local network")
    out = p.add_argument_group("speech output")
    out.add_argument("--tts", metavar="NAME", help="TTS engine (fastspeech2, vits, matcha, auto)")
    out.add_argument("--out", metavar="WAV", help="also write the speech to this WAV file")
    out.add_argument("--no-play", action="store_true", help="don't play: a real-time null sink stands in for the device")
    out.add_argument("--metrics", metavar="FILE", help="write the run's timeline and summary as JSON")
    out.add_argument("--compare-whole", action="store_true",
                     help="after the run, synthesise the whole text in one call (whole_text_synth_ms)")
    gen = p.add_argument_group("general")
    gen.add_argument("--config", metavar="FILE", help="config file layered over the defaults (instead of /etc/rkvoice/config.yaml)")
    gen.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="override a config value")
    gen.add_argument("-v", "--verbose", action="store_true", help="debug logging and tracebacks")
    return p


def setup_logging(verbose: bool) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(levelname)s: %(message)s"
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format=fmt, stream=sys.stderr)


def load_cli_config(args: argparse.Namespace, daemon: bool = False) -> Config:
    overrides = [parse_override(item) for item in args.set]
    if args.tts:
        overrides.append({"tts": {"engine": args.tts}})
    if daemon and args.no_play:  # the daemon makes its player from the config: the null sink
        overrides.append({"audio": {"player": "null"}})
    files = None
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise RkvoiceError(Stage.CONFIG, "missing", f"config file {path} does not exist")
        files = [DEFAULT_CONFIG, path]
    return load_config(overrides, files)


def run_wyoming(uri: str, args: argparse.Namespace, cfg: Config) -> int:
    """``assistant.py --wyoming URI [--zeroconf]``: the profile's engines as a Wyoming server, until
    Ctrl-C or SIGTERM (for Home Assistant; docs/home-assistant.md says how to add it there)."""
    from rkvoice.wyoming.server import serve_wyoming

    if not getattr(args, "verbose", False):
        logging.getLogger("rkvoice").setLevel(logging.INFO)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping the Wyoming server", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        serve_wyoming(cfg, uri, zeroconf=True if args.zeroconf else None, stop=stop,
                      ready=lambda server: print(f"serving Wyoming on {uri} (Ctrl-C stops)", flush=True))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        cfg = load_cli_config(args)
        if args.check:
            from rkvoice.cli.check import run_check

            return run_check(cfg, sys.stdout)
        if args.zeroconf and not args.wyoming:
            raise RkvoiceError(Stage.INPUT, "bad-flags", "--zeroconf only applies to --wyoming URI")
        if (args.require_wake or args.reference) and args.wyoming is None and args.file is None:
            flag = "--require-wake" if args.require_wake else "--reference"
            raise RkvoiceError(Stage.INPUT, "bad-flags", f"{flag} only applies to --file WAV")
        for flag, run in MODES.items():
            if (value := getattr(args, flag)) is not None:
                module, _, name = run.partition(":")
                return int(getattr(importlib.import_module(module), name)(value, args, cfg))
        # no mode flag: the resident assistant (microphone loop; what the systemd service runs)
        from rkvoice.daemon.service import serve, setup_logging as daemon_logging

        daemon_logging(args.verbose)
        return serve(lambda: load_cli_config(args, daemon=True))
    except RkvoiceError as err:
        log.debug("stopped by %s/%s", err.stage, err.code, exc_info=args.verbose)
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE if err.stage == Stage.INPUT else EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line, the traceback only with -v
        if args.verbose:
            log.exception("unexpected error")
        print(f"error: unexpected {type(exc).__name__}: {exc} (run with -v for the traceback)", file=sys.stderr)
        return EXIT_FAILED
