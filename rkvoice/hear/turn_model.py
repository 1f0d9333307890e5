"""Smart Turn v3, the end-of-turn model: the install's file, and its run on onnxruntime (the input is
rkvoice.hear.turn_features; the decision that uses it is rkvoice.hear.turn_end)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.turn_features import FRAMES, N_MELS, last_window, log_mel  # noqa: F401 (re-exported)
from rkvoice.hear.vad import SAMPLE_RATE

MODEL_FILE = "smart-turn-v3.2-cpu.onnx"


def turn_model_path(cfg: Config) -> Path:
    """The profile's copy: models/<profile>/turn/smart-turn-v3.2-cpu.onnx (both profiles install one)."""
    return cfg.models.path / cfg.models.profile / "turn" / MODEL_FILE


class TurnJudge(Protocol):
    def load(self) -> None: ...

    def probability(self, samples: np.ndarray) -> float:
        """How likely the speaker has finished, from the speech so far and the silence after it."""


class SmartTurn:
    """Smart Turn v3 on onnxruntime (``threads`` intra-op threads, sequential)."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        self.path = path
        self.threads = threads
        self._session: Any = None
        self._input = "input_features"

    def load(self) -> None:
        import onnxruntime as ort

        if not self.path.is_file():
            raise RkvoiceError(Stage.VAD, "missing-model", f"end-of-turn model {self.path} is missing; run ./install.sh")
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
            shape = [list(i.shape) for i in inputs]
            raise RkvoiceError(Stage.VAD, "bad-model", f"end-of-turn model {self.path} takes {shape}, not "
                               f"[batch, {N_MELS}, {FRAMES}] log-mel features; run ./install.sh to fetch it again")
        self._session, self._input = session, inputs[0].name
        self.probability(np.zeros(SAMPLE_RATE, np.float32))  # warm up: the first run is the slowest

    def probability(self, samples: np.ndarray) -> float:
        if self._session is None:
            raise RuntimeError("SmartTurn.load() was not called")
        out = self._session.run(None, {self._input: log_mel(samples)[None]})
        return float(np.asarray(out[0]).reshape(-1)[0])  # the graph ends in a sigmoid
