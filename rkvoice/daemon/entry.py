"""Daemon entry point (``assistant.py`` without a mode flag): logging for journald, config, plan.
``serve(load, plan)`` runs the real daemon on other stages, as the tests' daemon process does
(tests/daemon_process.py)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from rkvoice.config import Config
from rkvoice.errors import Code, RkvoiceError
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


def serve(load: Callable[[], Config], plan: Callable[[Config], Plan] = product_plan) -> int:
    """Load the config and run the daemon on ``plan``'s stages until it is told to stop (SIGTERM);
    returns the exit status. ``load`` is called again on SIGHUP."""
    try:
        cfg = load()
        stages = plan(cfg)
    except RkvoiceError as exc:
        log.error("%s", exc)
        return 2
    try:
        return Daemon(cfg, stages, load).run()
    except RkvoiceError as exc:
        log.error("%s", exc)
        return 1 if exc.code == Code.ALREADY_RUNNING else EXIT_FATAL

