"""``python -m rkvoice.installer install|check --profile P``: the model half of install.sh.

``install`` attempts every model and ends with a table (model, ok / missing / corrupt / mismatch /
skipped, the fix); it exits 1 only when a required (not ``optional``) model is not usable, and
names just those. ``check`` exits 1 when a required file does not verify. Exit 2: the installer
itself could not run (bad manifest, bad option), so install.sh stops there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from rkvoice.answer.llm.absent import RECIPE
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.installer.install import format_table, install_profile, rerun_command
from rkvoice.installer.manifest import PROFILES, Manifest, load_manifest
from rkvoice.installer.rkllm import RkllmSource, parse_sha256
from rkvoice.installer.rknn import resolve_toolkit
from rkvoice.installer.verify import verify_profile

ROOT = Path(__file__).resolve().parents[2]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rkvoice.installer", description=__doc__)
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
    p.add_argument("--toolkit-version", default=None, metavar="V",
                   help="rknn-toolkit2 version for the NPU files (default: the board's librknnrt.so; "
                        "give it on a PC to build for a board with that runtime)")
    p.add_argument("--toolkit-python", default=None, metavar="PATH",
                   help="interpreter for the throw-away converter venv (default: this one)")
    p.add_argument("--rkllm", default=None, metavar="FILE_OR_URL",
                   help="board: install this converted RKLLM model (a file, or an https URL to download)")
    p.add_argument("--rkllm-sha256", default=None, metavar="HEX", help="the sha256 the --rkllm file must have")
    p.add_argument("--report", type=Path, default=None, metavar="FILE",
                   help="install: also write the table as JSON (one object per model) to FILE")
    return p


def _rkllm_source(args: argparse.Namespace) -> RkllmSource | None:
    """``--rkllm``/``--rkllm-sha256`` checked as options (exit 2 when they make no sense)."""
    if args.rkllm is None:
        if args.rkllm_sha256 is not None:
            raise RkvoiceError(Stage.MODELS, "bad-option", "--rkllm-sha256 needs --rkllm FILE_OR_HTTPS_URL")
        return None
    if args.profile != "board":
        raise RkvoiceError(Stage.MODELS, "bad-option", "--rkllm is for the board profile: ./install.sh --profile "
                           "board --rkllm FILE_OR_HTTPS_URL")
    sha = parse_sha256(args.rkllm_sha256) if args.rkllm_sha256 is not None else None
    return RkllmSource(args.rkllm, sha)


def _install(args: argparse.Namespace, manifest: Manifest, root: Path, t0: float) -> int:
    log = logging.getLogger("rkvoice.installer")
    report = install_profile(manifest, root, args.profile, only=args.only, allow_unverified=args.allow_unverified,
                             keep_downloads=args.keep_downloads, toolkit_version=args.toolkit_version,
                             toolkit_python=args.toolkit_python, rkllm=_rkllm_source(args))
    changed = report.changed
    log.info("models (%s): %s in %.1f s", args.profile,
             f"installed {', '.join(changed)}" if changed else "nothing installed", time.monotonic() - t0)
    print(format_table(report), flush=True)
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps([dataclasses.asdict(o) | {"fails": o.fails} for o in report.outcomes],
                                          ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    llm = [o for o in report.outcomes if o.model in {m.id for m in manifest.models if m.engine == "rkllm"}]
    if any(o.changed for o in llm):
        print("the RKLLM model is installed; a running service picks it up after: sudo systemctl restart rkvoice",
              file=sys.stderr)
    if any(o.status != "ok" for o in llm):
        print("no RKLLM model: the board answers with its local tools, Home Assistant and the satellite, and "
              f"says so when a question needs the language model; to add it: {RECIPE}", file=sys.stderr)
    failed = [o for o in report.outcomes if o.fails]
    if failed:
        print(f"rkvoice.installer: required model(s) not installed: {', '.join(o.model for o in failed)} "
              f"(the table above says how to fix each; then rerun {rerun_command(args.profile)})", file=sys.stderr)
        return 1
    return 0


def _check(args: argparse.Namespace, manifest: Manifest, root: Path, t0: float) -> int:
    npu = any(s.op == "rknn" for m in manifest.profile(args.profile) for s in m.steps)
    toolkit = resolve_toolkit(args.toolkit_version) if npu else None
    if toolkit is not None and toolkit.error is not None:
        print(f"rkvoice.installer check ({args.profile}): {toolkit.error.message}", file=sys.stderr)
        return 1
    checked, problems = verify_profile(manifest, root, args.profile, toolkit.version if toolkit else None)
    optional = {m.id for m in checked if m.optional}
    required = [p for p in problems if p.model not in optional]
    for p in problems:
        if p.model in optional:
            print(f"  (optional) {p}", file=sys.stderr)
    if required:
        print(f"rkvoice.installer check ({args.profile}): {len(required)} problem(s):", file=sys.stderr)
        for p in required:
            print(f"  {p}", file=sys.stderr)
        print(f"fix: run {rerun_command(args.profile)} (it re-fetches only what is missing or corrupt)",
              file=sys.stderr)
        return 1
    print(f"rkvoice.installer check ({args.profile}): {len(checked)} model(s), all required files verified "
          f"in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    root = args.root.resolve()
    t0 = time.monotonic()
    try:
        manifest = load_manifest(args.manifest or root / "models" / "manifest.yaml")
        if args.command == "install":
            return _install(args, manifest, root, t0)
        return _check(args, manifest, root, t0)
    except RkvoiceError as err:
        print(f"rkvoice.installer: {err.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rkvoice.installer: interrupted; rerun to resume (finished downloads are kept)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
