"""What an engine needs on this machine, and which of it is missing here, with the fix.

Every registry entry (TTS, ASR, wake, LLM engines and players) declares its needs next to its
factory (``NeedsFn``). ``missing(needs, probe)`` answers without importing a runtime or loading a
model, so both the "auto" choices (is this engine installed?) and ``--check`` read the same
declarations. Runtime versions (librknnrt, librkllmrt) are judged from the libraries' bytes in
``rkvoice.board.runtimes``, not here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rkvoice.board.devices import has_input_device, has_npu, has_sound_device
from rkvoice.board.runtimes import RuntimeNeed, display_path

Device = Literal["sound-output", "microphone", "npu"]


@dataclass(frozen=True)
class FileNeed:
    role: str
    """What the file is to the engine ("acoustic model", "tokens")."""
    paths: tuple[Path, ...]
    """Any one of them will do; the first is named when none is there."""


@dataclass(frozen=True)
class PackageNeed:
    module: str
    """Import name (sherpa_onnx)."""
    dist: str
    """Distribution to install (sherpa-onnx)."""


@dataclass(frozen=True)
class ProgramNeed:
    program: str
    fix: str


@dataclass(frozen=True)
class Needs:
    files: tuple[FileNeed, ...] = ()
    packages: tuple[PackageNeed, ...] = ()
    programs: tuple[ProgramNeed, ...] = ()
    devices: tuple[Device, ...] = ()
    runtimes: tuple[RuntimeNeed, ...] = ()
    profile: str = ""
    """The install profile (portable, board) whose ./install.sh provides the files and packages."""

    @property
    def install(self) -> str:
        """The command that installs what is missing."""
        return f"./install.sh --profile {self.profile}" if self.profile else "./install.sh"

    def __add__(self, other: Needs) -> Needs:
        return Needs(self.files + other.files, self.packages + other.packages, self.programs + other.programs,
                     self.devices + other.devices, self.runtimes + other.runtimes, self.profile or other.profile)


NeedsFn = Callable[..., Needs]
"""``fn(cfg, **kwargs) -> Needs``; ``kwargs`` are the constructor arguments the registry's choice
passes (e.g. a vits voice)."""


def module_found(name: str) -> bool:
    """True when ``name`` can be imported (found on the path; nothing is imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass
class Probe:
    """How this machine is asked; tests replace the device probes."""

    sound_output: Callable[[], str | None] = has_sound_device
    """Name of a usable output backend ("aplay", "sounddevice") or None."""
    microphone: Callable[[], bool] = has_input_device
    npu: Callable[[], bool] = has_npu
    module: Callable[[str], bool] = module_found
    program: Callable[[str], bool] = lambda name: shutil.which(name) is not None

    def device(self, device: Device) -> bool:
        return bool({"sound-output": self.sound_output, "microphone": self.microphone, "npu": self.npu}[device]())


@dataclass(frozen=True)
class Lack:
    kind: Literal["file", "package", "program", "device"]
    name: str
    """The path, import name, program or device lacking."""
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what} ({self.fix})"


DEVICE_FIX = {
    "sound-output": "connect a sound card or set audio.player to wav or null",
    "microphone": "connect a microphone (--text and --file work without one)",
    "npu": "this engine runs on the RK3576 NPU: use the board image, or choose a CPU engine",
}


def present_file(need: FileNeed) -> Path | None:
    """The first of the paths that is a non-empty regular file (an empty model file is as good as none)."""
    for path in need.paths:
        with contextlib.suppress(OSError):
            if path.is_file() and path.stat().st_size > 0:
                return path
    return None


def missing(needs: Needs, probe: Probe | None = None, relative_to: Path | None = None,
            *, devices: bool = True) -> list[Lack]:
    """What of ``needs`` this machine lacks (files, packages, programs, devices), each with its fix."""
    probe = probe or Probe()
    out: list[Lack] = []
    for f in needs.files:
        if present_file(f) is None:
            names = " or ".join(display_path(p, relative_to) for p in f.paths)
            out.append(Lack("file", str(f.paths[0]), f"missing {names}", f"run {needs.install}"))
    for pkg in needs.packages:
        if not probe.module(pkg.module):
            out.append(Lack("package", pkg.module, f"python package {pkg.module} is not installed",
                            _package_fix(pkg, needs.profile)))
    for prog in needs.programs:
        if not probe.program(prog.program):
            out.append(Lack("program", prog.program, f"{prog.program} not found", prog.fix))
    if devices:
        for dev in needs.devices:
            if not probe.device(dev):
                out.append(Lack("device", dev, f"no {dev.replace('-', ' ')} device", DEVICE_FIX[dev]))
    return out


def installed(needs: Needs, probe: Probe | None = None) -> bool:
    """Files present and packages importable (devices and runtime versions aside)."""
    return not missing(needs, probe, devices=False)


def _package_fix(pkg: PackageNeed, profile: str) -> str:
    if pkg.dist == "rknn-toolkit-lite2":
        return "py312/bin/pip install rknn-toolkit-lite2==<the librknnrt version>; aarch64 wheels only"
    return (f"py312/bin/pip install -r requirements/{profile or 'portable'}.txt, which pins {pkg.dist}; "
            "./install.sh does it")
