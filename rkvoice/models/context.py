"""What a model's steps share: the rknn-toolkit2 version for NPU files and where one install reads and writes."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from rkvoice.errors import RkvoiceError
from rkvoice.models.manifest import Model


@dataclass(frozen=True)
class Toolkit:
    """The rknn-toolkit2 version NPU files must be built with, and where it came from."""

    version: str | None
    origin: str = ""  # "librknnrt /usr/lib/librknnrt.so" or "--toolkit-version"
    error: RkvoiceError | None = None  # set when the version is contradictory or unreadable

    def describe(self) -> str:
        return f"{self.version} ({self.origin})" if self.version else "unknown (no librknnrt.so here)"


class Context:
    """Where one model's install reads and writes."""

    def __init__(self, root: Path, model: Model, fetched: dict[str, Path], python: str = sys.executable,
                 toolkit: Toolkit | None = None, toolkit_python: str | None = None) -> None:
        self.root = root
        self.toolkit = toolkit if toolkit is not None else Toolkit(None)
        self.toolkit_python = toolkit_python
        self.model = model
        self.fetched = fetched
        self.python = python
        self.dest = root / model.dir
        self.work = root / ".cache" / "models" / "work" / model.id
        self.pip_cache = root / ".cache" / "pip"

    def path(self, rel: str) -> Path:
        if rel.startswith("{work}/"):
            return self.work / rel[len("{work}/"):]
        return self.dest / rel

    def fmt(self, arg: str) -> str:
        """Fill {work} {dest} {root} {python} {toolkit_version} and {src:NAME} (the fetched file of NAME)."""
        arg = re.sub(r"\{src:([^}]*)\}", lambda m: str(self.fetched[m.group(1)]), arg)
        return arg.format(work=self.work, dest=self.dest, root=self.root, python=self.python,
                          toolkit_version=self.toolkit.version or "")
