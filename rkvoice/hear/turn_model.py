"""Smart Turn v3, the end-of-turn model: the install's file, and its run on onnxruntime or, on the
board, on the NPU (the input is rkvoice.hear.turn_features; the decision that uses it is
rkvoice.hear.turn_end)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.turn_features import FRAMES, N_MELS, last_window, log_mel  # noqa: F401 (re-exported)
from rkvoice.hear.vad import SAMPLE_RATE
from rkvoice.needs import module_found

log = logging.getLogger(__name__)

MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
NPU_MODEL = "board/turn-npu/smart-turn.rknn"
"""The board's NPU build (manifest board-smart-turn-rknn, models/convert_turn.py), under models.dir."""
_warned: set[Path] = set()


def cpu_model_path(cfg: Config) -> Path:
    """The profile's int8 CPU file: models/<profile>/turn/smart-turn-v3.2-cpu.onnx (both profiles install one)."""
    return cfg.models.path / cfg.models.profile / "turn" / MODEL_FILE


def turn_model_path(cfg: Config, npu_runtime: bool | None = None) -> Path:
    """The file hear.endpoint.model names: ``auto`` is the NPU build on the board profile when it is
    installed, else the CPU file; a path is under models.dir unless absolute. A .rknn where
    rknn-toolkit-lite2 is not installed (``npu_runtime`` False; None: look) gives the CPU file, with one
    warning per process."""
    name = cfg.hear.endpoint.model
    if name == "auto":
        npu = cfg.models.path / NPU_MODEL
        if cfg.models.profile != "board" or not npu.is_file():
            return cpu_model_path(cfg)
        path = npu
    else:
        path = Path(name) if Path(name).is_absolute() else cfg.models.path / name
    if path.suffix != ".rknn" or (module_found("rknnlite") if npu_runtime is None else npu_runtime):
        return path
    fallback = cpu_model_path(cfg)
    if path not in _warned:
        _warned.add(path)
        log.warning("end-of-turn model %s needs rknn-toolkit-lite2 (the NPU runtime), which is not installed: "
                    "Smart Turn runs on the CPU (%s); on the board: py312/bin/pip install rknn-toolkit-lite2 of "
                    "the librknnrt version (assistant.py --check)", path, fallback)
    return fallback


_shared: dict[tuple[Path, int, str], tuple[tuple[int, int], SmartTurn]] = {}
_shared_lock = threading.Lock()


def shared_smart_turn(path: Path, threads: int = 1, core_mask: str = "auto") -> SmartTurn:
    """One SmartTurn per model file (as the file is now) and settings for the whole process: the wake's
    segmenter and the request's judge with the same model (a second copy costs ~33 MB of RSS on
    onnxruntime, or a second NPU context); a file replaced since (a reinstall, a reload) gets a new one."""
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = (0, 0)
    key = (path, threads, core_mask)
    with _shared_lock:
        held = _shared.get(key)
        if held is None or held[0] != stamp:
            held = _shared[key] = (stamp, SmartTurn(path, threads, core_mask))
        return held[1]


class TurnJudge(Protocol):
    def load(self) -> None: ...

    def probability(self, samples: np.ndarray) -> float:
        """How likely the speaker has finished, from the speech so far and the silence after it."""


class SmartTurn:
    """Smart Turn v3 on onnxruntime (a .onnx file: ``threads`` intra-op threads, sequential) or on the
    NPU (a .rknn file: RKNNLite on ``core_mask``, rkvoice.npu.runtime)."""

    def __init__(self, path: Path, threads: int = 1, core_mask: str = "auto") -> None:
        self.path = path
        self.threads = threads
        self.core_mask = core_mask
        self._session: Any = None
        self._npu: Any = None
        self._input = "input_features"
        self._lock = threading.Lock()  # one load; one NPU run at a time (a shared instance: shared_smart_turn)

    def load(self) -> None:
        """Load and warm up the model (once: loaded already, it returns)."""
        with self._lock:
            if self._session is None and self._npu is None:
                self._load()

    def _load(self) -> None:
        if not self.path.is_file():
            raise RkvoiceError(Stage.VAD, "missing-model", f"end-of-turn model {self.path} is missing; run ./install.sh")
        if self.path.suffix == ".rknn":
            self._load_npu()
        else:
            self._load_onnx()
        self._run(log_mel(np.zeros(SAMPLE_RATE, np.float32))[None])  # warm up: the first run is the slowest

    def _refuse_shape(self, shape: object) -> RkvoiceError:
        return RkvoiceError(Stage.VAD, "bad-model", f"end-of-turn model {self.path} takes {shape}, not "
                            f"[batch, {N_MELS}, {FRAMES}] log-mel features; run ./install.sh to fetch it again")

    def _load_npu(self) -> None:
        from rkvoice.npu.runtime import open_model

        model = open_model(self.path, core_mask=self.core_mask, what="end-of-turn")
        model.load()  # RkvoiceError naming the file, the runtime versions and the fix
        query = getattr(model, "query_io", None)
        specs = query() if query is not None else None
        io = ([i.shape for i in specs[0]], [o.shape for o in specs[1]]) if specs is not None else None
        if io is None:  # this RKNNLite cannot say: the sidecar the converter wrote beside the file does
            io = _sidecar_io(self.path.with_suffix(".json"))
        if io is not None:
            inputs, outputs = io
            if len(inputs) != 1 or list(inputs[0])[-2:] != [N_MELS, FRAMES] or len(outputs) != 1:
                model.close()
                raise self._refuse_shape([list(i) for i in inputs])
        self._npu = model

    def _load_onnx(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        try:
            session = ort.InferenceSession(str(self.path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own error types: a corrupt or foreign file
            raise RkvoiceError(Stage.VAD, "bad-model", f"end-of-turn model {self.path} does not load ({exc}); "
                               "run ./install.sh to fetch it again") from exc
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if len(inputs) != 1 or list(inputs[0].shape[1:]) != [N_MELS, FRAMES] or len(outputs) != 1:
            raise self._refuse_shape([list(i.shape) for i in inputs])
        self._session, self._input = session, inputs[0].name

    def describe(self) -> str:
        return self._npu.describe() if self._npu is not None else f"{self.path.name} on onnxruntime (CPU, {self.threads} threads)"

    def probability(self, samples: np.ndarray) -> float:
        features = log_mel(samples)[None]
        if self._npu is not None:
            with self._lock:
                return self._run(features)
        return self._run(features)  # onnxruntime's run is thread-safe

    def _run(self, features: np.ndarray) -> float:
        if self._npu is not None:
            out = self._npu.run([features])
        elif self._session is not None:
            out = self._session.run(None, {self._input: features})
        else:
            raise RuntimeError("SmartTurn.load() was not called")
        return float(np.asarray(out[0]).reshape(-1)[0])  # the graph ends in a sigmoid


def _sidecar_io(side: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]] | None:
    """The input and output shapes an .rknn's sidecar (X.json, models/convert_turn.py) records; None
    without a readable one."""
    import json

    try:
        data = json.loads(side.read_text(encoding="utf-8"))
        return ([tuple(i["shape"]) for i in data["inputs"]], [tuple(o["shape"]) for o in data["outputs"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None
