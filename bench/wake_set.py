"""Builds the wake test set (tests/support/wake_set.py: "小智小智" alone and things that must not wake, by
the portable voice) into its cache folder ahead of a bench or test run.

    py312/bin/python -m bench.wake_set [--out .cache/wake_set] [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from tests.support.wake_set import build, default_dir, spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="cache folder (default .cache/wake_set)")
    ap.add_argument("--quick", action="store_true", help="the small representative subset")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    clips = spec(args.quick)
    pairs = build(args.out or default_dir(args.quick), clips)
    print(json.dumps({"clips": len(pairs), "positives": sum(c.wake for c in clips),
                      "negatives": sum(not c.wake for c in clips), "dir": str(pairs[0][1].parent)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
