"""A bench's JSON: its own figures plus the machine they were measured on (cpus, architecture, the
1-minute load average at start and end, the UTC date), printed on stdout and optionally written to a file."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.proc import LOAD_KEY, load_avg_1m


def machine() -> dict[str, Any]:
    """Where and when: cpu count, architecture, Python, the load average now, the UTC date."""
    return {"cpus": os.cpu_count(), "arch": platform.machine(), "python": platform.python_version(),
            LOAD_KEY: load_avg_1m(), "date": datetime.now(UTC).isoformat(timespec="seconds")}


class Run:
    """Started when a bench starts (records the machine then); ``emit`` prints the result with both
    readings, so a figure measured on a loaded machine says so."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self.start = machine()

    def emit(self, result: dict[str, Any], out: str | Path | None = None, indent: int | None = 1) -> str:
        """Print ``{"bench": ..., **result, "machine": {...start, load at end}}`` as JSON on stdout (and
        to ``out``); returns the text."""
        end = load_avg_1m()
        doc = {"bench": self.bench, **result,
               "machine": {**self.start, f"{LOAD_KEY}_end": end}}
        text = json.dumps(doc, ensure_ascii=False, indent=indent, default=_plain)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        if out is not None:
            Path(out).write_text(text + "\n", encoding="utf-8")
        return text


def _plain(value: Any) -> Any:
    """numpy scalars and paths in a result become JSON numbers and strings."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def bench_run(bench: str, ap: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, Run]:
    """Parse a bench's command line with the two options every bench has (``--out FILE``: also write the
    JSON there; ``-v``: progress logged at INFO), send logging to stderr (stdout carries the JSON alone),
    and start its Run."""
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress on stderr")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return args, Run(bench)
