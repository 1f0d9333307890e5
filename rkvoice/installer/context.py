"""What a model's steps share: the rknn-toolkit2 version for NPU files, where one install reads and
writes, atomic writes, and the throw-away venv that converters run in."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.installer.manifest import Model

log = logging.getLogger(__name__)

DOWNLOADS = ".cache/models/downloads"


def run_tail(cmd: Sequence[str], keep: int = 3, cwd: Path | None = None) -> tuple[int, str]:
    """Run ``cmd`` with its output captured: (exit code, its last ``keep`` lines joined by ' | ')."""
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    return proc.returncode, " | ".join(line.strip() for line in proc.stdout.strip().splitlines()[-keep:])


@contextlib.contextmanager
def atomic(target: Path) -> Iterator[IO[bytes]]:
    """Write ``target`` under a temporary name, renamed into place only when the block ends without error."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(tmp, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class Toolkit:
    """The rknn-toolkit2 version NPU files must be built with, and where it came from."""

    version: str | None
    origin: str = ""  # "librknnrt /usr/lib/librknnrt.so" or "--toolkit-version"
    error: RkvoiceError | None = None  # set when the version is contradictory or unreadable


class Context:
    """Where one model's install reads and writes."""

    def __init__(self, root: Path, model: Model, fetched: dict[str, Path], toolkit: Toolkit | None = None,
                 toolkit_python: str | None = None) -> None:
        self.root = root
        self.toolkit = toolkit if toolkit is not None else Toolkit(None)
        self.toolkit_python = toolkit_python
        self.model = model
        self.fetched = fetched
        self.python = sys.executable
        self.dest = root / model.dir
        self.work = root / ".cache" / "models" / "work" / model.id

    def path(self, rel: str) -> Path:
        return self.work / rel.removeprefix("{work}/") if rel.startswith("{work}/") else self.dest / rel

    def fmt(self, arg: str) -> str:
        """Fill {work} {dest} {root} {python} {toolkit_version} and {src:NAME} (the fetched file of NAME)."""
        arg = re.sub(r"\{src:([^}]*)\}", lambda m: str(self.fetched[m.group(1)]), arg)
        return arg.format(work=self.work, dest=self.dest, root=self.root, python=self.python,
                          toolkit_version=self.toolkit.version or "")

    @contextlib.contextmanager
    def venv(self, base: str, code: str) -> Iterator[str]:
        """A throw-away venv of ``base`` without pip of its own (``pip_install`` fills it), deleted on leaving;
        yields its python. ``code`` is the error code when it cannot be made."""
        venv = self.root / ".cache" / "models" / f"venv-{self.model.id}"
        shutil.rmtree(venv, ignore_errors=True)
        try:
            rc, out = run_tail([base, "-m", "venv", "--without-pip", str(venv)])
            if rc:
                raise RkvoiceError(Stage.MODELS, code, f"{self.model.id}: {base} -m venv failed: {out}")
            yield str(venv / "bin" / "python")
        finally:
            shutil.rmtree(venv, ignore_errors=True)
            log.info("  throw-away venv deleted")

    def pip_install(self, vpy: str, args: Sequence[str], what: str, code: str) -> None:
        """Install into the venv of ``vpy`` with the installer's own pip (``--python``): no pip bootstrap there."""
        log.info("  pip install %s", " ".join(args))
        rc, tail = run_tail([self.python, "-m", "pip", "--python", vpy, "install", "--disable-pip-version-check",
                             "-q", "--cache-dir", str(self.root / ".cache" / "pip"), *args])
        if rc:
            raise RkvoiceError(Stage.MODELS, code, f"{self.model.id}: pip install {what} failed: {tail}")
