"""Check installed model files against the manifest (presence, size, sha256) without changing anything.

Files whose bytes are not reproducible carry ``sha256: null`` and a check: ``onnx`` (the tflite -> ONNX
conversion: onnxruntime must load the graph) or ``rknn`` (NPU files: the sidecar must name the
runtime's toolkit version, when one is known).
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass
from pathlib import Path

from pooch import file_hash

from rkvoice.errors import RkvoiceError
from rkvoice.installer.manifest import FileSpec, Manifest, Model
from rkvoice.installer.rknn import rknn_problem
from rkvoice.npu.runtime import OnnxModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Problem:
    model: str
    path: str
    kind: str  # missing | size | sha256 | unloadable | corrupt | mismatch
    detail: str

    def __str__(self) -> str:
        return f"{self.model}: {self.path}: {self.kind}: {self.detail}"


def applies_here(model: Model) -> bool:
    """Board-only entries marked with a platform (e.g. aarch64) are skipped elsewhere."""
    return not model.platform or platform.machine() == model.platform


def _onnx_loads(path: Path) -> str:
    try:
        OnnxModel(path).load()
    except ImportError:
        return "onnxruntime is not installed, cannot check the graph (pip install -r requirements/portable.txt)"
    except RkvoiceError as err:
        return err.message[:300]
    return ""


def verify_file(model: Model, root: Path, spec: FileSpec, toolkit_version: str | None = None) -> Problem | None:
    """The first problem of one file, or None; ``toolkit_version`` is what ``check: rknn`` files must name."""
    path = root / model.dir / spec.path
    rel = f"{model.dir}/{spec.path}"
    if not path.is_file():
        return Problem(model.id, rel, "missing", "file not found")
    size = path.stat().st_size
    if spec.size is not None and size != spec.size:
        return Problem(model.id, rel, "size", f"expected {spec.size} bytes, found {size} (truncated or replaced)")
    if spec.sha256 is not None and (actual := file_hash(path)) != spec.sha256:
        return Problem(model.id, rel, "sha256", f"expected {spec.sha256}, found {actual}")
    if spec.check == "onnx" and (why := _onnx_loads(path)):
        return Problem(model.id, rel, "unloadable", why)
    if spec.check == "rknn" and (found := rknn_problem(path, toolkit_version)):
        return Problem(model.id, rel, *found)
    return None


def verify_model(model: Model, root: Path, toolkit_version: str | None = None) -> list[Problem]:
    return [p for spec in model.files if (p := verify_file(model, root, spec, toolkit_version)) is not None]


def verify_profile(manifest: Manifest, root: Path, profile: str,
                   toolkit_version: str | None = None) -> tuple[list[Model], list[Problem]]:
    """Verify every file of ``profile`` that applies to this machine; returns (checked, problems)."""
    checked: list[Model] = []
    problems: list[Problem] = []
    for model in manifest.profile(profile):
        if not applies_here(model):
            log.info("%s: skipped (only on %s)", model.id, model.platform)
            continue
        checked.append(model)
        found = verify_model(model, root, toolkit_version)
        problems.extend(found)
        log.info("%s: %s", model.id, "ok" if not found else f"{len(found)} problem(s)")
    return checked, problems

