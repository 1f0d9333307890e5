"""One small interface for running a model on the NPU (RKNNLite) or the CPU (onnxruntime).

``open_model`` picks ``ModelRuntime`` by the file suffix (``.rknn`` -> RKNNLite, ``.onnx`` ->
onnxruntime); ``run`` takes inputs in the model's order. Load failures name the file and the
runtime versions, so a version mismatch on the board is obvious.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rkvoice.board.versions import librknnrt_version, package_version
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2", "all")  # RKNNLite constant: NPU_CORE_<MASK>
_DTYPE_NAMES = {"float": "float32", "float32": "float32", "fp32": "float32", "float16": "float16",
                "fp16": "float16", "half": "float16", "double": "float64", "float64": "float64",
                "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "int16": "int16",
                "int8": "int8", "uint8": "uint8", "bool": "bool"}


def dtype_name(raw: Any) -> str:
    """One spelling for an element type: ``tensor(int64)``, ``INT64``, ``np.int64``, ``int64`` -> ``int64``."""
    text = str(getattr(raw, "__name__", raw)).strip().lower()
    for prefix in ("tensor(", "tensorproto.", "numpy.", "np.", "rknn_tensor_"):
        text = text.removeprefix(prefix)
    text = text.rstrip(")").strip("<>'\" ").replace("class ", "")
    return _DTYPE_NAMES.get(text, text)


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output as the model declares it."""

    name: str
    shape: tuple[int | str, ...]
    """Sizes; a symbolic (dynamic) dimension is a string."""
    dtype: str
    """numpy spelling: int64, float32, ..."""

    @property
    def fixed(self) -> bool:
        return all(isinstance(d, int) and d > 0 for d in self.shape)

    @property
    def size(self) -> int | None:
        return math.prod(int(d) for d in self.shape) if self.fixed else None

    def describe(self) -> str:
        return f"{self.name} {self.dtype} [{', '.join(str(d) for d in self.shape)}]"

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> TensorSpec:
        shape = tuple(d if isinstance(d, int) else str(d) for d in item.get("shape") or ())
        return cls(str(item["name"]), shape, dtype_name(item.get("dtype", "")))


class ModelRuntime(Protocol):
    path: Path

    def load(self) -> None: ...

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def ort_session(path: Path, threads: int, spinning: bool = True, optimize: bool = True) -> Any:
    """An onnxruntime CPU session with ``threads`` intra-op threads (``spinning=False``: idle ones do
    not busy-wait; ``optimize=False``: no graph optimisations, a session only read); raises what
    onnxruntime raises."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if not spinning:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def first_line(exc: BaseException) -> str:
    """An exception's first message line (onnxruntime's run to many lines), else its type's name."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def tts_session(path: Path, threads: int, what: str, fix: str, spinning: bool = True) -> Any:
    """``ort_session`` for a TTS engine's model file, or an RkvoiceError naming the missing or
    corrupt file and ``fix``."""
    if not path.is_file():
        raise RkvoiceError(Stage.TTS, "missing-model", f"{what} {path} is missing: {fix}")
    try:
        return ort_session(path, threads, spinning)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types for a bad file
        raise RkvoiceError(Stage.TTS, "corrupt-model", f"{what} {path} is truncated or corrupt "
                           f"({first_line(exc)[:200]}): {fix}") from exc


def _missing(path: Path, what: str) -> RkvoiceError:
    return RkvoiceError(Stage.NPU, "missing-model", f"{what} model file {path} not found; run ./install.sh "
                        "for this profile or fix the path in config.yaml")


class OnnxModel:
    """A model run by onnxruntime on the CPU, with an explicit intra-op thread count."""

    def __init__(self, path: Path | str, threads: int = 1, what: str = "ONNX") -> None:
        self.path = Path(path)
        self.threads = threads
        self.what = what
        self._sess: Any = None

    def load(self) -> None:
        if not self.path.is_file():
            raise _missing(self.path, self.what)
        import onnxruntime as ort

        try:
            self._sess = ort_session(self.path, self.threads)
        except Exception as exc:  # onnxruntime raises several types for a bad file
            raise RkvoiceError(Stage.NPU, "load-failed", f"cannot load {self.path} with onnxruntime "
                               f"{ort.__version__}: {first_line(exc)}") from exc
        log.debug("loaded %s (onnxruntime %s, %d threads)", self.path, ort.__version__, self.threads)

    def _session(self) -> Any:
        if self._sess is None:
            raise RkvoiceError(Stage.NPU, "not-loaded", f"{self.path}: call load() before run()")
        return self._sess

    def input_specs(self) -> list[TensorSpec]:
        """The inputs the graph declares, in feed order (symbolic dimensions as strings)."""
        return [_ort_spec(i) for i in self._session().get_inputs()]

    def output_specs(self) -> list[TensorSpec]:
        return [_ort_spec(o) for o in self._session().get_outputs()]

    @property
    def metadata(self) -> Mapping[str, str]:
        return dict(self._session().get_modelmeta().custom_metadata_map)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        sess = self._session()
        specs = sess.get_inputs()
        if len(inputs) != len(specs):
            raise RkvoiceError(Stage.NPU, "bad-inputs", f"{self.path} takes {len(specs)} inputs "
                               f"({', '.join(s.name for s in specs)}), got {len(inputs)}")
        feed = {}
        for spec, arr in zip(specs, inputs):  # cast to the declared type: onnxruntime refuses any other
            dtype, a = dtype_name(spec.type), np.asarray(arr)
            feed[spec.name] = a.astype(dtype, copy=False) if dtype in _DTYPE_NAMES.values() else a
        return list(sess.run(None, feed))

    def describe(self) -> str:
        import onnxruntime as ort

        return f"{self.path.name} on onnxruntime {ort.__version__} (CPU, {self.threads} threads)"

    def close(self) -> None:
        self._sess = None


def _ort_spec(arg: Any) -> TensorSpec:
    return TensorSpec.from_json({"name": arg.name, "shape": arg.shape, "dtype": arg.type})


def _lite_api() -> Any:
    try:
        from rknnlite.api import RKNNLite
    except ImportError as exc:
        _, rt = librknnrt_version()
        pin = f"=={rt}" if rt else " matching /usr/lib/librknnrt.so"
        raise RkvoiceError(Stage.NPU, "missing-dependency",
                           f"rknn-toolkit-lite2 is not installed ({exc}); on the board run "
                           f"py312/bin/pip install rknn-toolkit-lite2{pin} (aarch64 only)") from exc
    return RKNNLite


def core_mask_value(api: Any, mask: str) -> Any:
    """Map a config core mask ("auto", "0", "1", "0_1", ...) to the RKNNLite constant."""
    key = str(mask).strip().lower()
    if key not in CORE_MASKS:
        raise RkvoiceError(Stage.NPU, "bad-core-mask",
                           f"unknown NPU core mask {mask!r}; choose one of: {', '.join(CORE_MASKS)}")
    attr = f"NPU_CORE_{key.upper()}"
    if not hasattr(api, attr):
        raise RkvoiceError(Stage.NPU, "bad-core-mask",
                           f"NPU core mask {mask!r} ({attr}) is not offered by this rknn-toolkit-lite2; "
                           "RK3576 has cores 0 and 1: use auto, 0, 1 or 0_1")
    return getattr(api, attr)


class RknnModel:
    """A compiled .rknn model run by RKNNLite on the board's NPU (aarch64 only)."""

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
        steps = (("load_rknn", "load-failed", f"load {self.path}", "the file may be truncated or built for another "
                  "toolkit version", lambda: rknn.load_rknn(str(self.path))),
                 ("init_runtime", "init-failed", f"start {self.path} on the NPU", "librknnrt, rknn-toolkit-lite2 "
                  "and the toolkit that built the file must be the same version (assistant.py --check)",
                  lambda: rknn.init_runtime(core_mask=mask)))
        for call, code, doing, hint, step in steps:
            try:
                ret = step()
            except Exception as exc:
                rknn.release()
                raise RkvoiceError(Stage.NPU, code, f"cannot {doing} with {self._versions()}: {exc}") from exc
            if ret != 0:
                rknn.release()
                raise RkvoiceError(Stage.NPU, code, f"cannot {doing} ({call} returned {ret}) with "
                                   f"{self._versions()}; {hint}")
        self._rknn = rknn
        log.debug("loaded %s on NPU cores %s", self.path, self.core_mask)

    def query_io(self) -> tuple[list[TensorSpec], list[TensorSpec]] | None:
        """Inputs and outputs as the loaded .rknn reports them (RKNNRuntime.get_in_out_num /
        get_tensor_attr of rknn-toolkit-lite2 2.x); None where this RKNNLite offers no such query."""
        rt = getattr(self._rknn, "rknn_runtime", None)
        if rt is None or not hasattr(rt, "get_in_out_num") or not hasattr(rt, "get_tensor_attr"):
            return None
        try:
            n_in, n_out = rt.get_in_out_num()
            ins = [_rknn_spec(rt.get_tensor_attr(i)) for i in range(int(n_in))]
            outs = [_rknn_spec(rt.get_tensor_attr(i, is_output=True)) for i in range(int(n_out))]
        except Exception as exc:  # a private API: any failure means "cannot ask"
            log.debug("%s: RKNNLite I/O query unavailable (%s)", self.path, exc)
            return None
        return ins, outs

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self._rknn is None:
            raise RkvoiceError(Stage.NPU, "not-loaded", f"{self.path}: call load() before run()")
        outs = self._rknn.inference(inputs=[np.ascontiguousarray(a) for a in inputs])
        if outs is None:
            raise RkvoiceError(Stage.NPU, "inference-failed",
                               f"RKNNLite inference on {self.path} returned nothing (see the RKNN log above)")
        return [np.asarray(o) for o in outs]

    def describe(self) -> str:
        return f"{self.path.name} on RKNNLite (cores {self.core_mask}; {self._versions()})"

    def close(self) -> None:
        if self._rknn is not None:
            self._rknn.release()
            self._rknn = None


def _rknn_spec(attr: Any) -> TensorSpec:
    name = getattr(attr, "name", "")
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    n_dims = int(getattr(attr, "n_dims", 0))
    dims = tuple(int(d) for d in list(getattr(attr, "dims", ()))[:n_dims])
    return TensorSpec(str(name).rstrip("\x00"), dims, dtype_name(getattr(attr, "type", "")))


def open_model(path: Path | str, *, threads: int = 1, core_mask: str = "auto",
               what: str = "model") -> ModelRuntime:
    """A runtime for ``path`` chosen by its suffix (.rknn -> RKNNLite, .onnx -> onnxruntime); not loaded."""
    p = Path(path)
    if p.suffix == ".rknn":
        return RknnModel(p, core_mask=core_mask, what=what)
    if p.suffix == ".onnx":
        return OnnxModel(p, threads=threads, what=what)
    raise RkvoiceError(Stage.NPU, "bad-model-path",
                       f"{what} model {p} must end in .rknn (NPU) or .onnx (CPU)")
