"""Backend registries: name -> lazily imported factory and what it needs, with clear errors."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkvoice.board.runtimes import Findings
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.needs import Needs, NeedsFn

CheckFn = Callable[[Any, list[Path], Findings], None]


def guarded(note: Callable[[Any], str]) -> CheckFn:
    """A ``check`` for a model that may end the process (sherpa-onnx exits on bad metadata or tokens):
    with the files in place, ``note(cfg)`` reads them; its line is a note, its RkvoiceError a problem."""
    def check(cfg: Any, _found: list[Path], out: Findings) -> None:
        if not out.problems:
            try:
                out.notes.append(note(cfg))
            except RkvoiceError as err:
                out.problems.append(err.message)

    return check


@dataclass(frozen=True)
class Backend:
    target: str  # "package.module:ClassName", imported only when used
    summary: str
    install_hint: str = ""
    needs: NeedsFn | None = None
    """``needs(cfg, **kwargs) -> Needs``: files, packages, devices, runtimes (rkvoice.needs)."""
    check: CheckFn | None = None
    """``check(cfg, found, out)``: what ``--check`` verifies beyond the needs, without loading the
    engine (``found``: its files present), into ``out``."""


class Registry:
    """Maps backend names to factories for one stage kind (tts, asr, wake, llm, player)."""

    def __init__(self, stage: Stage, auto: tuple[str, str] | None = None) -> None:
        self.stage = stage
        self.auto = auto
        """The backends ``auto`` stands for: (on the board profile, elsewhere)."""
        self._backends: dict[str, Backend] = {}

    def register(self, name: str, target: str, summary: str, install_hint: str = "",
                 needs: NeedsFn | None = None, check: CheckFn | None = None) -> None:
        self._backends[name] = Backend(target, summary, install_hint, needs, check)

    def names(self) -> list[str]:
        return sorted(self._backends)

    def backend(self, name: str) -> Backend:
        try:
            return self._backends[name]
        except KeyError:
            raise RkvoiceError(self.stage, "unknown-backend", f"unknown {self.stage} backend {name!r}; "
                               f"choose one of: {', '.join(self.names())}") from None

    def resolve(self, name: str, profile: str) -> str:
        """``name`` with ``auto`` resolved for the install ``profile``; unknown names fail, naming the choices."""
        if name == "auto" and self.auto is not None:
            return self.auto[0] if profile == "board" else self.auto[1]
        self.backend(name)
        return name

    def needs(self, name: str, cfg: Any, **kwargs: Any) -> Needs:
        """What backend ``name`` needs under ``cfg`` (nothing declared: no needs)."""
        backend = self.backend(name)
        return backend.needs(cfg, **kwargs) if backend.needs is not None else Needs()

    def target(self, name: str) -> Any:
        """Backend ``name``'s factory (its engine class, which declares its ``languages``), imported now."""
        backend = self.backend(name)
        module_name, _, attr = backend.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            hint = backend.install_hint or "run ./install.sh for this profile"
            raise RkvoiceError(self.stage, "missing-dependency",
                               f"{self.stage} backend {name!r} needs {exc.name or exc}: {hint}") from exc
        return getattr(module, attr)

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Import backend ``name``'s module (only now) and call its factory."""
        return self.target(name)(*args, **kwargs)
