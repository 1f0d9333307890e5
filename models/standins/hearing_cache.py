#!/usr/bin/env python3
"""The board-hearing stand-ins, built once per builder into ``.cache/standins/hearing-<key>/``.

``models/standins/make_hearing.py`` makes them (~40 s) in its own Python 3.11 venv
(``$RKVOICE_STANDINS_VENV``, default ``/tmp/rkvoice-standins-venv``; ``.ci/run`` creates it). The key
hashes the script and the venv's requirements, so a changed builder builds anew and an unchanged
one never twice. ``.cache/standins/hearing`` links to the current build: the folder that
``tests/fixtures/board-hearing.yaml`` names. The models are built, never committed.

    py312/bin/python models/standins/hearing_cache.py   # build them (or find them built); prints the folder

Run by py312 (no torch here): the tests' ``hearing_standins`` fixture, ``.ci/run`` and
``bench/wake_latency.py`` call :func:`ensure`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "models" / "standins"
MAKE = HERE / "make_hearing.py"
REQUIREMENTS = (HERE / "requirements.txt", HERE / "requirements-nodeps.txt")
CACHE = ROOT / ".cache" / "standins"
CURRENT = CACHE / "hearing"


class Unavailable(Exception):
    """The stand-ins are not built and cannot be built here (no venv): the message says how."""


def venv() -> Path:
    return Path(os.environ.get("RKVOICE_STANDINS_VENV", "/tmp/rkvoice-standins-venv"))


def key() -> str:
    h = hashlib.sha256()
    for path in (MAKE, *REQUIREMENTS):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def built_dir() -> Path:
    return CACHE / f"hearing-{key()}"


def build_command() -> str:
    v = venv()
    return (f"python3.11 -m venv {v} && {v}/bin/pip install -r models/standins/requirements.txt && "
            f"{v}/bin/pip install --no-deps -r models/standins/requirements-nodeps.txt && "
            "py312/bin/python models/standins/hearing_cache.py (.ci/run does this)")


def ensure() -> Path:
    """The built folder (kws/, kws-wake/, paraformer/, paraformer-rigged/, standins.json), built
    first if absent; ``.cache/standins/hearing`` then links to it. Raises :class:`Unavailable` when
    it is absent and the venv is too, RuntimeError when the build fails."""
    out = built_dir()
    if not (out / "standins.json").is_file():
        py = venv() / "bin" / "python"
        if not py.is_file():
            raise Unavailable(f"the board-hearing stand-ins are not built ({out}) and their build venv {venv()} "
                              f"is absent: {build_command()}")
        tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        run = subprocess.run([str(py), str(MAKE), "--out", str(tmp)], check=False, capture_output=True, text=True,
                             timeout=900, cwd=ROOT)
        if run.returncode:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"{MAKE.name} failed ({run.returncode}): {run.stderr[-2000:]}")
        try:
            tmp.rename(out)
        except OSError:  # another process finished the same build first
            if not (out / "standins.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    if not CURRENT.is_symlink() or os.readlink(CURRENT) != out.name:
        link = CURRENT.with_name(f"{CURRENT.name}.link{os.getpid()}")
        link.unlink(missing_ok=True)
        link.symlink_to(out.name)
        link.replace(CURRENT)
    return out


def main() -> int:
    try:
        print(ensure())
    except (Unavailable, RuntimeError) as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
