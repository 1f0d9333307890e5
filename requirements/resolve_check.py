"""Check that every requirements file resolves to wheels on every interpreter the installer accepts.

    py312/bin/python requirements/resolve_check.py            # every requirements/*.txt, 3.11 and 3.12
    py312/bin/python requirements/resolve_check.py requirements/dev.txt --python 3.11

For each file and Python version, the environment markers (``; python_version < "3.12"``) are
evaluated for that version and platform here (pip evaluates them for the interpreter it runs in,
not for ``--python-version``), and the pinned lines that apply are handed to
``pip install --dry-run --ignore-installed --only-binary=:all: --python-version X``, so nothing is
installed and no source build is tried. board.txt is checked for the board (aarch64, the glibc of
Debian 13); each wheel's Requires-Python is checked against the version from pip's report. Exits 1 naming each file and Python version that does not resolve, with pip's reason.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.markers import InvalidMarker, Marker
from packaging.specifiers import SpecifierSet

HERE = Path(__file__).resolve().parent
PYTHONS = ("3.11", "3.12")
BOARD_FILES = ("board.txt",)
BOARD_GLIBC_MINOR = 41
"""The board runs Debian 13 (glibc 2.41) on aarch64: every manylinux tag up to glibc 2.41 fits."""
BOARD_PLATFORMS = tuple(f"manylinux_2_{m}_aarch64" for m in range(BOARD_GLIBC_MINOR, 16, -1)) + (
    "manylinux2014_aarch64", "linux_aarch64")
"""pip 23 does not widen one --platform to the older manylinux tags itself, so all are passed."""


def environment(python: str, machine: str) -> dict[str, str]:
    """Marker variables of CPython ``python`` on Linux/``machine``."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "platform_python_implementation": "CPython",
        "platform_machine": machine,
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
    }


def applicable_lines(path: Path, env: dict[str, str]) -> list[str]:
    """The requirement lines of ``path`` whose marker holds in ``env``, markers removed.

    ``-r other.txt`` lines are followed (relative to the file); comments and blank lines dropped."""
    out: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            out += applicable_lines(path.parent / line.split(None, 1)[1], env)
            continue
        if line.startswith("-"):
            out.append(line)
            continue
        spec, _, marker = line.partition(";")
        if marker.strip():
            try:
                if not Marker(marker.strip()).evaluate(env):
                    continue
            except InvalidMarker as exc:
                raise SystemExit(f"{path}:{number}: bad environment marker {marker.strip()!r}: {exc}") from exc
        out.append(spec.strip())
    return out


def pip_command(req_file: Path, python: str, platforms: tuple[str, ...], tmp: Path) -> list[str]:
    """pip's dry run for ``python``'s wheel tags. pip 23 checks a wheel's Requires-Python against
    the interpreter it runs in even with --python-version, so that check is switched off here and
    done on the report instead (``requires_python_errors``)."""
    cmd = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
        "--disable-pip-version-check", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", python, "--ignore-requires-python", "--target", str(tmp / "target"),
        "--report", str(tmp / "report.json"), "-r", str(req_file),
    ]
    for tag in platforms:
        cmd += ["--platform", tag]
    return cmd


def requires_python_errors(report: dict, python: str) -> list[str]:
    """Packages of a pip --report whose Requires-Python excludes ``python``."""
    version = f"{python}.0"
    out = []
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        spec = meta.get("requires_python")
        if spec and version not in SpecifierSet(spec):
            out.append(f"{meta.get('name')}=={meta.get('version')} requires Python {spec}")
    return out


def check(path: Path, python: str, timeout: float = 600.0) -> str:
    """"" when ``path`` resolves for ``python``, else pip's reason (its ERROR lines)."""
    board = path.name in BOARD_FILES
    platforms, machine = (BOARD_PLATFORMS, "aarch64") if board else ((), platform.machine())
    lines = applicable_lines(path, environment(python, machine))
    with tempfile.TemporaryDirectory(prefix="rkvoice-resolve-") as name:
        tmp = Path(name)
        filtered = tmp / path.name
        filtered.write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            proc = subprocess.run(
                pip_command(filtered, python, platforms, tmp),
                capture_output=True, text=True, timeout=timeout, check=False,
            )
        except subprocess.TimeoutExpired:
            return f"pip did not finish within {timeout:.0f} s"
        if proc.returncode != 0:
            errors = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.startswith("ERROR")]
            return "; ".join(errors) or f"pip exited with {proc.returncode}"
        report = json.loads((tmp / "report.json").read_text(encoding="utf-8"))
    return "; ".join(requires_python_errors(report, python))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="requirements files (default: requirements/*.txt)")
    ap.add_argument("--python", action="append", choices=PYTHONS, help="check only this version (repeatable)")
    args = ap.parse_args(argv)
    files = args.files or sorted(HERE.glob("*.txt"))
    failures = 0
    for path in files:
        if not path.is_file():
            print(f"FAIL {path}: no such file", file=sys.stderr)
            failures += 1
            continue
        for python in args.python or PYTHONS:
            reason = check(path, python)
            if reason:
                failures += 1
                print(f"FAIL {path} on Python {python}: {reason}", file=sys.stderr)
            else:
                print(f"ok   {path} on Python {python}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
