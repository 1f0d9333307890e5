"""``assistant.py --wyoming URI [--zeroconf]``: the profile's engines as a Wyoming server, until
Ctrl-C or SIGTERM (for Home Assistant; see the README for adding it there)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from types import FrameType

from rkvoice.config import Config

log = logging.getLogger(__name__)


def run_wyoming(uri: str, args: argparse.Namespace, cfg: Config) -> int:
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
