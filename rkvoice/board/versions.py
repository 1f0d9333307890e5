"""Version probes for the board's native pieces, read from the files' bytes (loading a mismatched .so
can crash the process): Rockchip builds embed ``<name> version: X.Y.Z (hash@date)``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)

_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/lib/aarch64-linux-gnu")
LIBRKNNRT_PATHS = tuple(Path(d, "librknnrt.so") for d in _LIB_DIRS)
LIBRKLLMRT_PATHS = tuple(Path(d, "librkllmrt.so") for d in _LIB_DIRS)


def npu_driver_paths(proc: Path = Path("/proc"), sys: Path = Path("/sys")) -> tuple[Path, ...]:
    """Where kernels expose the RKNPU driver's version (``RKNPU driver: v0.9.8``): debugfs (readable by root
    only), the procfs debug node of older vendor kernels, the module's own version."""
    return sys / "kernel/debug/rknpu/version", proc / "debug/rknpu/version", sys / "module/rknpu/version"


NPU_DRIVER_PATHS = npu_driver_paths()

_VERSION = rb"(\d+\.\d+\.\d+(?:[a-z]+\d*)?)"
_STAMPED = re.compile(_VERSION + rb" \([0-9a-f]{6,16}@\d{4}-\d\d-\d\dT[\d:]+\)")


def so_version(path: Path, name: str) -> str | None:
    """Version string embedded in a Rockchip .so: ``<name> version: X`` or the first ``X (hash@date)``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        log.debug("cannot read %s: %s", path, exc)
        return None
    named = re.search(re.escape(name.encode()) + rb"[ _-]?version[:=]? *v?" + _VERSION, data, re.IGNORECASE)
    if named:
        return named.group(1).decode()
    stamped = _STAMPED.search(data)
    return stamped.group(1).decode() if stamped else None


def first_existing(paths: tuple[Path, ...]) -> Path | None:
    return next((p for p in paths if p.exists()), None)


def librknnrt_version(paths: tuple[Path, ...] | None = None) -> tuple[Path | None, str | None]:
    path = first_existing(LIBRKNNRT_PATHS if paths is None else paths)
    return path, (so_version(path, "librknnrt") if path else None)


def package_version(dist: str) -> str | None:
    """Installed version of a Python distribution (e.g. ``rknn-toolkit-lite2``), or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def npu_driver_version(paths: tuple[Path, ...] | None = None) -> tuple[Path | None, str | None]:
    """RKNPU kernel driver version (``RKNPU driver: v0.9.8``) from the first readable of ``paths`` (default
    ``NPU_DRIVER_PATHS``); debugfs may need root to read."""
    for p in NPU_DRIVER_PATHS if paths is None else paths:
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        m = re.search(r"v?(\d+\.\d+\.\d+)", text)
        if m:
            return p, m.group(1)
    return None, None


RKLLM_RUNTIMES = "1.2.1-1.2.3 (llm.rkllm_abi 1.2) or 1.3.x (llm.rkllm_abi 1.3)"
"""librkllmrt releases a layout of the binding (rkvoice.answer.llm.rkllm_abi) matches (docs/rkllm-abi.md);
not 1.2.0 (another RKLLMInput and callback: see ``rkllm_runtime_problem``)."""
LIBRKLLMRT_FIX = ("copy rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so of an airockchip/rknn-llm release "
                  f"({RKLLM_RUNTIMES}) to /usr/lib (only the LLM needs it)")
"""Where librkllmrt.so comes from when the board image lacks it."""


def rkllm_runtime_abi(version: str) -> str | None:
    """The binding ABI for a librkllmrt release ("1.2" / "1.3"), None when none here fits it."""
    m = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", version)
    release = tuple(int(g) for g in m.groups()) if m else ()
    if (1, 2, 1) <= release <= (1, 2, 3):
        return "1.2"
    return "1.3" if release[:2] == (1, 3) else None


def rkllm_runtime_problem(version: str, abi: str) -> str | None:
    """Why librkllmrt ``version`` must not be driven through binding ``abi``; None when it may."""
    want = rkllm_runtime_abi(version)
    if want is None:
        why = (" (1.2.0 has another RKLLMInput, without role and enable_thinking, and a void callback: "
               "a call through these bindings would crash)" if version.startswith("1.2.0") else "")
        return (f"librkllmrt {version} is not supported{why}; supported: {RKLLM_RUNTIMES}: install "
                "librkllmrt.so 1.2.1-1.2.3 or 1.3.x from airockchip/rknn-llm and convert the model with the same "
                "rkllm-toolkit version")
    if want != abi:
        return f"librkllmrt {version} needs llm.rkllm_abi \"{want}\" but it is {abi!r}; set llm.rkllm_abi: \"{want}\""
    return None
