"""Daemon entry point (``assistant.py`` without a mode flag, or ``python -m rkvoice.daemon``): logging
for journald, config, plan. ``--stages MODULE:FUNC`` (a ``FUNC(cfg) -> Plan``) runs the real daemon
process on other stages, as the tests do."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rkvoice.config import DEFAULT_CONFIG, Config, load_config, parse_override
from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.stages import Plan, product_plan

from .service import EXIT_FATAL, Daemon

log = logging.getLogger(__name__)


def setup_logging(verbose: bool = False) -> None:
    """INFO (one line per turn) or DEBUG (per chunk) to stderr; under systemd (JOURNAL_STREAM
    set) journald adds the time itself. Replaces whatever the CLI configured."""
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not os.environ.get("JOURNAL_STREAM"):
        fmt = "%(asctime)s " + fmt
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=fmt, stream=sys.stderr,
                        force=True)


def resolve_plan(spec: str | None) -> Callable[[Config], Plan]:
    if not spec:
        return product_plan
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise RkvoiceError(Stage.DAEMON, "bad-stages", f"--stages expects MODULE:FUNC, got {spec!r}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RkvoiceError(Stage.DAEMON, "bad-stages", f"cannot load --stages {spec!r}: {exc}") from exc


def serve(load: Callable[[], Config], stages: str | None = None) -> int:
    """Load the config and run the daemon until it is told to stop (SIGTERM); returns the exit status."""
    try:
        cfg = load()
        plan = resolve_plan(stages)(cfg)
    except RkvoiceError as exc:
        log.error("%s", exc)
        return 2
    try:
        return Daemon(cfg, plan, load).run()
    except RkvoiceError as exc:
        log.error("%s", exc)
        return 1 if exc.code == Code.ALREADY_RUNNING else EXIT_FATAL


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rkvoice.daemon", description="the resident rkvoice daemon")
    ap.add_argument("--config", help="extra config file (default: /etc/rkvoice/config.yaml or $RKVOICE_CONFIG)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    ap.add_argument("--stages", help=argparse.SUPPRESS)
    ap.add_argument("-v", "--verbose", action="store_true", help="DEBUG logs (per-chunk detail)")
    args = ap.parse_args(argv)
    setup_logging(args.verbose)
    overrides = [parse_override(item) for item in args.set]
    files = [DEFAULT_CONFIG, Path(args.config)] if args.config else None
    return serve(lambda: load_config(overrides, files), args.stages)  # called again on SIGHUP
