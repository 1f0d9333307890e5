"""One small interface for running a model on the NPU (RKNNLite) or the CPU (onnxruntime).

The TTS engines only see ``ModelRuntime``: ``load()``, ``run(inputs) -> outputs`` (inputs in
the model's input order), ``close()``. ``open_model`` picks the runtime from the file suffix
(``.rknn`` -> RKNNLite, ``.onnx`` -> onnxruntime). Loading failures are RkvoiceErrors that name
the file and the runtime version, so a version mismatch on the board is obvious.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from rkvoice.board.versions import librknnrt_version, package_version
from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)

CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2", "all")
_CORE_ATTRS = {"auto": "NPU_CORE_AUTO", "0": "NPU_CORE_0", "1": "NPU_CORE_1", "2": "NPU_CORE_2",
               "0_1": "NPU_CORE_0_1", "0_1_2": "NPU_CORE_0_1_2", "all": "NPU_CORE_ALL"}
_ORT_DTYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
               "tensor(float16)": np.float16, "tensor(double)": np.float64}


class ModelRuntime(Protocol):
    path: Path
    kind: str  # "onnx" or "rknn"

    def load(self) -> None: ...

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...

    @property
    def metadata(self) -> Mapping[str, str]: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def _missing(path: Path, what: str) -> RkvoiceError:
    return RkvoiceError("npu", "missing-model", f"{what} model file {path} not found; run ./install.sh "
                        "for this profile or fix the path in config.yaml")


class OnnxModel:
    """A model run by onnxruntime on the CPU, with an explicit intra-op thread count."""

    kind = "onnx"

    def __init__(self, path: Path | str, threads: int = 1, what: str = "ONNX") -> None:
        self.path = Path(path)
        self.threads = threads
        self.what = what
        self._sess: Any = None

    def load(self) -> None:
        if not self.path.is_file():
            raise _missing(self.path, self.what)
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            self._sess = ort.InferenceSession(str(self.path), sess_options=opts,
                                              providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises several types for a bad file
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RkvoiceError("npu", "load-failed",
                               f"cannot load {self.path} with onnxruntime {ort.__version__}: {first}") from exc
        log.debug("loaded %s (onnxruntime %s, %d threads)", self.path, ort.__version__, self.threads)

    def _session(self) -> Any:
        if self._sess is None:
            raise RkvoiceError("npu", "not-loaded", f"{self.path}: call load() before run()")
        return self._sess

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self._session().get_inputs()]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self._session().get_outputs()]

    def input_shapes(self) -> list[list[Any]]:
        return [list(i.shape) for i in self._session().get_inputs()]

    @property
    def metadata(self) -> Mapping[str, str]:
        return dict(self._session().get_modelmeta().custom_metadata_map)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        sess = self._session()
        specs = sess.get_inputs()
        if len(inputs) != len(specs):
            raise RkvoiceError("npu", "bad-inputs", f"{self.path} takes {len(specs)} inputs "
                               f"({', '.join(s.name for s in specs)}), got {len(inputs)}")
        feed = {}
        for spec, arr in zip(specs, inputs):
            dtype = _ORT_DTYPES.get(spec.type)
            a = np.asarray(arr)
            feed[spec.name] = a.astype(dtype, copy=False) if dtype is not None else a
        return list(sess.run(None, feed))

    def describe(self) -> str:
        import onnxruntime as ort

        return f"{self.path.name} on onnxruntime {ort.__version__} (CPU, {self.threads} threads)"

    def close(self) -> None:
        self._sess = None


def _lite_api() -> Any:
    try:
        from rknnlite.api import RKNNLite
    except ImportError as exc:
        _, rt = librknnrt_version()
        pin = f"=={rt}" if rt else " matching /usr/lib/librknnrt.so"
        raise RkvoiceError("npu", "missing-dependency",
                           f"rknn-toolkit-lite2 is not installed ({exc}); on the board run "
                           f"py312/bin/pip install rknn-toolkit-lite2{pin} (aarch64 only)") from exc
    return RKNNLite


def core_mask_value(api: Any, mask: str) -> Any:
    """Map a config core mask ("auto", "0", "1", "0_1", ...) to the RKNNLite constant."""
    key = str(mask).strip().lower()
    if key not in _CORE_ATTRS:
        raise RkvoiceError("npu", "bad-core-mask",
                           f"unknown NPU core mask {mask!r}; choose one of: {', '.join(CORE_MASKS)}")
    attr = _CORE_ATTRS[key]
    if not hasattr(api, attr):
        raise RkvoiceError("npu", "bad-core-mask",
                           f"NPU core mask {mask!r} ({attr}) is not offered by this rknn-toolkit-lite2; "
                           "RK3576 has cores 0 and 1: use auto, 0, 1 or 0_1")
    return getattr(api, attr)


class RknnModel:
    """A compiled .rknn model run by RKNNLite on the board's NPU (aarch64 only)."""

    kind = "rknn"

    def __init__(self, path: Path | str, core_mask: str = "auto", what: str = "RKNN") -> None:
        self.path = Path(path)
        self.core_mask = core_mask
        self.what = what
        self._rknn: Any = None

    def _versions(self) -> str:
        lite = package_version("rknn-toolkit-lite2") or "not installed"
        rt_path, rt = librknnrt_version()
        rt_text = f"librknnrt {rt} ({rt_path})" if rt else "librknnrt not found in /usr/lib"
        return f"rknn-toolkit-lite2 {lite}, {rt_text}"

    def load(self) -> None:
        if not self.path.is_file():
            raise _missing(self.path, self.what)
        api = _lite_api()
        mask = core_mask_value(api, self.core_mask)
        rknn = api(verbose=False)
        try:
            ret = rknn.load_rknn(str(self.path))
        except Exception as exc:
            raise RkvoiceError("npu", "load-failed",
                               f"cannot load {self.path} with {self._versions()}: {exc}") from exc
        if ret != 0:
            raise RkvoiceError("npu", "load-failed",
                               f"cannot load {self.path} (load_rknn returned {ret}) with {self._versions()}; "
                               "the file may be truncated or built for another toolkit version")
        try:
            ret = rknn.init_runtime(core_mask=mask)
        except Exception as exc:
            rknn.release()
            raise RkvoiceError("npu", "init-failed",
                               f"cannot start {self.path} on the NPU with {self._versions()}: {exc}") from exc
        if ret != 0:
            rknn.release()
            raise RkvoiceError("npu", "init-failed",
                               f"cannot start {self.path} on the NPU (init_runtime returned {ret}) with "
                               f"{self._versions()}; librknnrt, rknn-toolkit-lite2 and the toolkit that "
                               "built the file must be the same version (assistant.py --check)")
        self._rknn = rknn
        log.debug("loaded %s on NPU cores %s", self.path, self.core_mask)

    @property
    def metadata(self) -> Mapping[str, str]:
        return {}

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self._rknn is None:
            raise RkvoiceError("npu", "not-loaded", f"{self.path}: call load() before run()")
        outs = self._rknn.inference(inputs=[np.ascontiguousarray(a) for a in inputs])
        if outs is None:
            raise RkvoiceError("npu", "inference-failed",
                               f"RKNNLite inference on {self.path} returned nothing (see the RKNN log above)")
        return [np.asarray(o) for o in outs]

    def describe(self) -> str:
        return f"{self.path.name} on RKNNLite (cores {self.core_mask}; {self._versions()})"

    def close(self) -> None:
        if self._rknn is not None:
            self._rknn.release()
            self._rknn = None


def open_model(path: Path | str, *, threads: int = 1, core_mask: str = "auto",
               what: str = "model") -> ModelRuntime:
    """A runtime for ``path`` chosen by its suffix (.rknn -> RKNNLite, .onnx -> onnxruntime); not loaded."""
    p = Path(path)
    if p.suffix == ".rknn":
        return RknnModel(p, core_mask=core_mask, what=what)
    if p.suffix == ".onnx":
        return OnnxModel(p, threads=threads, what=what)
    raise RkvoiceError("npu", "bad-model-path",
                       f"{what} model {p} must end in .rknn (NPU) or .onnx (CPU)")
