"""Client of models/npu_serve.py: rknn-toolkit2's simulator as an rkvoice ModelRuntime.

The engine opens ``X.rknn`` files; on the board that is RKNNLite on the NPU. Here a test swaps in
:class:`SimulatedModel`, which asks a server process in the toolkit venv to run the same graph
(``X.onnx``, the fixed-shape twin the converter wrote next to ``X.rknn``) in the simulator. Inputs,
outputs and metadata come from the ``X.json`` sidecar, exactly what the board runtime reads.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import ROOT


class SimulatorServer:
    """A toolkit process that built models and now answers run requests (``convert_rknn.py ... --serve``
    or ``models/npu_serve.py``): the JSON lines it printed first are kept in ``reports``."""

    def __init__(self, cmd: Sequence[str], log: Path) -> None:
        self.log = Path(log)
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        assert self.proc.stdout is not None
        self.reports: list[dict] = []
        while True:
            line = self.proc.stdout.readline()
            if line.strip() == b"READY":
                break
            if not line:
                code = self.proc.wait()
                tail = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{cmd[1] if len(cmd) > 1 else cmd} ended (exit {code}) before serving:\n{tail}")
            if line.startswith(b"{"):
                self.reports.append(json.loads(line))
        self.models = [Path(r["out"]) for r in self.reports]

    @classmethod
    def for_onnx(cls, python: Path, onnx_paths: Sequence[Path], log: Path, target: str = "rk3576") -> SimulatorServer:
        """models/npu_serve.py on fixed graphs: model i answers for ``onnx_paths[i]`` with suffix .rknn."""
        server = cls([str(python), str(ROOT / "models" / "npu_serve.py"), "--target", target, *map(str, onnx_paths)], log)
        server.models = [Path(p).with_suffix(".rknn") for p in onnx_paths]
        return server

    def run(self, index: int, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        buf = io.BytesIO()
        np.savez(buf, model=np.array(index), **{f"in{i}": np.ascontiguousarray(a) for i, a in enumerate(inputs)})
        data = buf.getvalue()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(struct.pack(">Q", len(data)) + data)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(8)
        if len(head) < 8:
            raise RuntimeError(f"simulator process died (exit {self.proc.wait()}): {self.log.read_text()[-2000:]}")
        (n,) = struct.unpack(">Q", head)
        reply = np.load(io.BytesIO(self.proc.stdout.read(n)))
        if "error" in reply.files:
            raise RuntimeError(f"simulator: {reply['error']}")
        return [reply[f"out{i}"] for i in range(len(reply.files))]

    def close(self) -> int:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(struct.pack(">Q", 0))
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


class SimulatedModel:
    """``X.rknn`` answered by the simulator; the I/O contract from ``X.json`` like the board runtime."""

    def __init__(self, server: SimulatorServer, rknn_path: Path) -> None:
        self.path = Path(rknn_path)
        self.server = server
        self.index = server.models.index(self.path)
        self.sidecar = json.loads(self.path.with_suffix(".json").read_text(encoding="utf-8"))
        self.calls = 0

    def load(self) -> None:
        return None

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.calls += 1
        outs = self.server.run(self.index, list(inputs))
        shapes = [o["shape"] for o in self.sidecar["outputs"]]
        return [o.reshape(s) if all(isinstance(d, int) for d in s) else o for o, s in zip(outs, shapes)]

    def describe(self) -> str:
        return f"simulated {self.path.name}"

    def close(self) -> None:
        return None


def rknn_opener(servers: Sequence[SimulatorServer]) -> Any:
    """A replacement for rkvoice.npu.runtime.open_model: .rknn -> simulator, .onnx -> onnxruntime."""
    from rkvoice.npu.runtime import open_model

    def opener(path: Path | str, **kwargs: Any) -> Any:
        p = Path(path)
        if p.suffix == ".rknn":
            for server in servers:
                if p in server.models:
                    return SimulatedModel(server, p)
            raise FileNotFoundError(f"no simulator serves {p}")
        return open_model(path, **kwargs)

    return opener
