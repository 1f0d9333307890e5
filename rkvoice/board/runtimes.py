"""The NPU runtimes' versions, judged from the files' bytes (a possibly mismatched library is
never loaded): librknnrt against rknn-toolkit-lite2 and the toolkit that built each .rknn model
(stamped in the model or written in its sidecar), librkllmrt against ``llm.rkllm_abi``, and the
RKNPU driver version as a fact."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rkvoice.board import versions
from rkvoice.errors import Code, RkvoiceError, Stage


@dataclass(frozen=True)
class RuntimeNeed:
    library: Literal["librknnrt", "librkllmrt"]
    built_for: tuple[Path, ...] = ()
    """librknnrt: .rknn models and sidecars whose toolkit version must equal the library's."""
    abi: str = ""
    """librkllmrt: the binding ABI (llm.rkllm_abi) the library's version must fit."""
    library_path: str = ""
    """librkllmrt: llm.rkllm_lib when it names an absolute path."""


@dataclass(kw_only=True)
class Findings:
    problems: list[str] = field(default_factory=list)
    """Reasons the engine cannot run (each fails the check)."""
    notes: list[str] = field(default_factory=list)
    """Facts and warnings that do not stop it."""


def display_path(path: Path, root: Path | None) -> str:
    """``path`` relative to ``root`` when it lies under it."""
    return str(path.relative_to(root) if root is not None and path.is_relative_to(root) else path)


def rknn_build_version(path: Path) -> str | None:
    """The rknn-toolkit2 version stamped into a .rknn file (first 4 MB), if found."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4 << 20)
    except OSError:
        return None
    m = re.search(rb"toolkit[_ ]?version\"?[:=] *\"?v?(\d+\.\d+\.\d+(?:[a-z]+\d*)?)", head, re.IGNORECASE)
    return m.group(1).decode() if m else None


def check_librknnrt(built_for: tuple[Path, ...], root: Path | None, out: Findings) -> None:
    """librknnrt present and readable, equal to rknn-toolkit-lite2 and to the toolkit that built
    each present .rknn model in ``built_for`` (models and sidecars), named relative to ``root``."""
    lite = versions.package_version("rknn-toolkit-lite2")
    rt_path, rt = versions.librknnrt_version()
    if lite is None:
        out.problems.append("rknn-toolkit-lite2 is not installed (py312/bin/pip install "
                            f"rknn-toolkit-lite2=={rt or '<librknnrt version>'}; aarch64 wheels only)")
    if rt_path is None:
        out.problems.append("librknnrt.so not found in /usr/lib (it comes with the board image / rknpu2)")
    elif rt is None:
        out.problems.append(f"cannot read the librknnrt version from {rt_path}")
    if lite and rt and lite != rt:
        out.problems.append(f"version mismatch: librknnrt {rt} ({rt_path}) but rknn-toolkit-lite2 {lite}; "
                            f"install rknn-toolkit-lite2=={rt}")
    for f in built_for:
        if not f.is_file():
            continue  # reported missing with the files
        if f.suffix == ".json":
            try:
                said = sidecar_version(f)
            except RkvoiceError as err:
                out.problems.append(f"{display_path(f, root)} is not a readable sidecar ({err.message}); rebuild it "
                                    "with models/convert_rknn.py (./install.sh --profile board)")
                continue
            if rt and said != rt:
                out.problems.append(f"version mismatch: {f.name} says its model was built by rknn-toolkit2 {said} but "
                                    f"librknnrt is {rt}; rebuild it (./install.sh --profile board converts with {rt})")
        elif (built := rknn_build_version(f)) and rt and built != rt:
            out.problems.append(f"version mismatch: {f.name} was built by rknn-toolkit2 {built} but librknnrt is "
                                f"{rt}; rebuild it with models/convert_rknn.py under toolkit {rt}")
    if rt and lite == rt:
        out.notes.append(f"librknnrt {rt} = rknn-toolkit-lite2 {lite}")


def sidecar_version(side: Path) -> str:
    """The rknn-toolkit2 version the JSON sidecar of a .rknn names (models/convert_rknn.py writes it);
    an RkvoiceError names the file and what is wrong with it."""
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RkvoiceError(Stage.MODELS, Code.NO_SIDECAR, f"{side} not found (every .rknn comes with its .json)") from None
    except (OSError, ValueError) as exc:
        raise RkvoiceError(Stage.MODELS, "bad-sidecar", f"{side} is not readable JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("toolkit_version"), str):
        raise RkvoiceError(Stage.MODELS, "bad-sidecar", f"{side} has no toolkit_version")
    return data["toolkit_version"]


def check_librkllmrt(need: RuntimeNeed, out: Findings) -> None:
    """librkllmrt present (``need.library_path`` when absolute, else the board's paths), its
    version readable and fitting the binding ABI ``need.abi``."""
    named = Path(need.library_path or "librkllmrt.so")
    lib = named if named.is_absolute() and named.exists() else versions.first_existing(versions.LIBRKLLMRT_PATHS)
    if lib is None:
        out.problems.append(f"{need.library_path or 'librkllmrt.so'} not found ({versions.LIBRKLLMRT_FIX})")
        return
    ver = versions.so_version(lib, "rkllm")
    if ver is None:
        out.notes.append(f"cannot read the librkllmrt version from {lib}")
        return
    problem = versions.rkllm_runtime_problem(ver, need.abi)
    if problem is None:
        out.notes.append(f"librkllmrt {ver}")
    elif versions.rkllm_runtime_abi(ver) is None:
        out.problems.append(f"{lib}: {problem}")
    else:
        out.problems.append(f"version mismatch: {lib}: {problem}")


def check_runtimes(needs: tuple[RuntimeNeed, ...], root: Path | None, out: Findings) -> None:
    """Every runtime declared, each library once (models to match merged), then the RKNPU driver's
    version as a note; files named relative to ``root``."""
    if any(n.library == "librknnrt" for n in needs):
        check_librknnrt(tuple(dict.fromkeys(p for n in needs for p in n.built_for)), root, out)
    for need in needs:
        if need.library == "librkllmrt":
            check_librkllmrt(need, out)
    drv_path, drv = versions.npu_driver_version()
    out.notes.append(f"RKNPU driver {drv} ({drv_path})" if drv else "RKNPU driver version unreadable ("
                     + ", ".join(str(p) for p in versions.NPU_DRIVER_PATHS) + "; debugfs needs root)")
