"""The rknn-toolkit2 plumbing the voice converters share: the toolkit's version, a model built and
run on the simulator (or the NPU on a board), the toolkit's own error lines read back from its log,
SNR and peak memory figures. models/npu_voice.py builds and proves the voice with these."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

VOCOS_OUTPUTS = ("mag", "x", "y")


class ConvertError(RuntimeError):
    """A refusal with the fix in its message (exit 2)."""


def snr_db(ref: np.ndarray, test: np.ndarray) -> float:
    ref = np.asarray(ref, np.float64)
    err = float(((ref - np.asarray(test, np.float64)) ** 2).sum())
    sig = float((ref**2).sum())
    if err == 0.0:
        return 200.0
    return round(10.0 * np.log10(max(sig, 1e-30) / err), 2)


def peak_rss_mb() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def toolkit_version(required: str | None) -> str:
    """The installed rknn-toolkit2 version; refuse a mismatch with the board's runtime."""
    try:
        have = importlib.metadata.version("rknn-toolkit2")
    except importlib.metadata.PackageNotFoundError:
        raise ConvertError("rknn-toolkit2 is not installed in this interpreter; create the toolkit venv: "
                           "python3 models/convert_rknn.py setup-venv DIR --toolkit-version V") from None
    if required and have != required:
        raise ConvertError(f"rknn-toolkit2 {have} is installed but --toolkit-version {required} was asked (the "
                           f"board's librknnrt must equal the converting toolkit): pip install rknn-toolkit2=={required} "
                           "in a fresh venv")
    return have


def load_onnx(path: Path) -> Any:
    import onnx

    if not path.is_file():
        raise ConvertError(f"{path}: no such file (download it first: ./install.sh --profile board)")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # protobuf DecodeError and friends
        raise ConvertError(f"{path} is not an ONNX model ({type(exc).__name__}); re-download it") from None


def _session(model_or_path: Any) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    data = model_or_path.SerializeToString() if hasattr(model_or_path, "SerializeToString") else str(model_or_path)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _io(model: Any) -> dict[str, list[dict]]:
    import onnx

    def one(vi: Any) -> dict:
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]
        return {"name": vi.name, "shape": dims,
                "dtype": str(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))}

    return {"inputs": [one(i) for i in model.graph.input], "outputs": [one(o) for o in model.graph.output]}


class Npu:
    """An rknn-toolkit2 build of one fixed graph, run in its simulator (x86) or on the NPU (board)."""

    def __init__(self, onnx_path: Path, target: str, fuse_qkv_opt: bool = False) -> None:
        from rknn.api import RKNN

        self.rknn = RKNN(verbose=False)
        self.rknn.config(target_platform=target, optimization_level=3)
        t0 = time.monotonic()
        if self.rknn.load_onnx(model=str(onnx_path)) != 0:
            raise ConvertError(f"rknn-toolkit2 could not load {onnx_path} (see its log above)")
        if self.rknn.build(do_quantization=False) != 0:
            raise ConvertError(f"rknn-toolkit2 could not build {onnx_path} (see its log above)")
        self.build_s = round(time.monotonic() - t0, 1)
        self.target = target

    def export(self, path: Path) -> None:
        if self.rknn.export_rknn(str(path)) != 0:
            raise ConvertError(f"rknn-toolkit2 could not write {path}")

    def start(self, mode: str) -> str:
        """'simulator' on x86_64; 'device' runs on this board's NPU; returns what ran (or 'none')."""
        if mode == "auto":
            mode = "simulator" if platform.machine() in ("x86_64", "AMD64") else "device"
        if mode == "none":
            return "none"
        ret = self.rknn.init_runtime() if mode == "simulator" else self.rknn.init_runtime(target=self.target)
        if ret != 0:
            raise ConvertError(f"rknn-toolkit2 init_runtime ({mode}) failed; pass --verify none to skip check B")
        return mode

    def run(self, feeds: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.rknn.inference(inputs=feeds)]

    def release(self) -> None:
        self.rknn.release()


# --------------------------------------------------------------------------------------------
# Toolkit log: the E RKNN lines (REGTASK overflows and others) counted for the JSON report

UNKNOWN_OP_TARGET = re.compile(r"Unk?n?own op target")  # 2.3.2 spells it "Unkown"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REGTASK = re.compile(r"REGTASK.*?target:\s*(\w+).*?offset:\s*(0x[0-9a-fA-F]+).*?limit:\s*(0x[0-9a-fA-F]+)"
                      r".*?value:\s*(0x[0-9a-fA-F]+)")


def toolkit_errors(text: str) -> dict[str, Any]:
    """Count the toolkit's error lines: total, REGTASK overflows (distinct target/offset/limit/value)
    and the distinct other messages (numbers kept: they name the op or layer where the toolkit says)."""
    lines = [_ANSI.sub("", raw).strip() for raw in text.replace("\r", "\n").splitlines()]
    errors = [ln for ln in lines if re.match(r"^E\s+(RKNN\b|\w+:)", ln)]  # the compiler's and the toolkit's own
    regtask = [ln for ln in errors if "REGTASK" in ln]
    values = sorted({m.groups() for m in map(_REGTASK.search, regtask) if m})
    other: dict[str, int] = {}
    for ln in errors:
        if "REGTASK" not in ln:
            key = re.sub(r"\[\d\d:\d\d:\d\d\.\d+\]\s*", "", ln)[:200]
            other[key] = other.get(key, 0) + 1
    warn = [ln for ln in lines if UNKNOWN_OP_TARGET.search(ln)]
    return {"count": len(errors), "regtask": len(regtask),
            "regtask_fields": [{"target": t, "offset": o, "limit": lim, "value": v} for t, o, lim, v in values][:40],
            "regtask_values": sorted({v for *_, v in values}), "other": other, "unknown_op_target": len(warn)}


def error_verdict(errors: dict | None) -> tuple[list[str], list[str]]:
    """(refusals, warnings) from ``toolkit_errors``: a REGTASK overflow (a register field the NPU
    cannot hold; the simulator does not run the register commands, so its check cannot clear it) or
    any other error line refuses the build; "Unkown op target" lines, which 2.3.2 prints on every
    Matcha/Vocos build here (5 on each decoder, with the simulator at 66 dB; also widely reported on
    models that run), are a warning said on stderr and kept in the JSON line and the sidecar."""
    if not errors:
        return [], []
    refuse, warn = [], []
    if errors.get("regtask"):
        refuse.append(f"{errors['regtask']} REGTASK register overflow line(s) (values {errors.get('regtask_values')})")
    for line, n in (errors.get("other") or {}).items():
        (warn if UNKNOWN_OP_TARGET.search(line) else refuse).append(f"{n} x {line!r}")
    return refuse, warn


class CapturedLog:
    """fds 1 and 2 into a temporary file while the toolkit works, replayed to stderr afterwards."""

    def __enter__(self) -> CapturedLog:
        sys.stdout.flush()
        sys.stderr.flush()
        self._tmp = tempfile.TemporaryFile()
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(self._tmp.fileno(), 1)
        os.dup2(self._tmp.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        self._tmp.seek(0)
        data = self._tmp.read()
        self._tmp.close()
        self.text = data.decode("utf-8", "replace")
        os.write(2, data)


def check_vocos_io(model: Any, path: Path) -> int:
    names = [i.name for i in model.graph.input]
    outs = [o.name for o in model.graph.output]
    if len(names) != 1 or tuple(outs[:3]) != VOCOS_OUTPUTS:
        raise ConvertError(f"{path}: not a Vocos mag/x/y vocoder: inputs {names}, outputs {outs}; expected one "
                           "mel input [1, n_mels, T] and outputs mag, x, y (sherpa-onnx vocos-*-univ.onnx)")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    n_mels = dims[1].dim_value if len(dims) == 3 and dims[1].HasField("dim_value") else 0
    if not n_mels:
        raise ConvertError(f"{path}: input {names[0]} is not [N, n_mels, T] with a fixed n_mels")
    return n_mels


def _stft_config(meta: dict) -> Any:
    from rkvoice.npu.istft import StftConfig

    return StftConfig(n_fft=int(meta.get("n_fft", 1024)), hop_length=int(meta.get("hop_length", 256)),
                      win_length=int(meta.get("win_length", meta.get("n_fft", 1024))),
                      window=str(meta.get("window_type", "hann")))
