#!/usr/bin/env python3
"""Convert Smart Turn v3.2 (the end-of-turn model) to an RK3576 .rknn, checked on the simulator.

Runs in the rknn-toolkit2 venv (``models/convert_rknn.py setup-venv``; at install time the board's
throw-away venv of the ``rknn`` step, manifest entry ``board-smart-turn-rknn``):

    python models/convert_turn.py --onnx smart-turn-v3.2-cpu.onnx --out DIR [--features F.npy]
        [--target rk3576] [--toolkit-version V] [--verify auto|simulator|device|none] [--serve]

1. ``DIR/smart-turn.onnx``: the int8 QDQ file as an equivalent float graph (models/turn_float.py),
   batch fixed to 1;
2. ``DIR/smart-turn.rknn``: rknn-toolkit2's fp16 build of it (no quantization) and its sidecar
   ``DIR/smart-turn.json`` (I/O, toolkit version, the figures below);
3. the checks, on ``--features`` ([N, 80, 800] log-mel inputs, rkvoice.hear.turn_features; the tests
   pass the Chinese turn-end set's) or, without it, on synthetic voiced bursts: the simulator (the NPU
   on a board) against onnxruntime on the float graph (max |probability difference| <= 0.05 and no
   complete/wait verdict changed at 0.85, else exit 1), and the float graph against the int8 file
   (reported only: the int8 build moves by up to ~0.5 under 1e-3 input noise, the float one by
   ~0.005, so the two cannot agree closely: docs/decisions/0013-end-of-turn.md).

One JSON line on stdout (``"model": "smart-turn"``); the toolkit's log goes to stderr. ``--serve``
then answers run requests with the built model (models/npu_serve.py; tests/npu_sim.py is the client).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from npu_toolkit import (  # noqa: E402
    CapturedLog,
    ConvertError,
    Npu,
    _io,
    error_verdict,
    load_onnx,
    peak_rss_mb,
    toolkit_errors,
    toolkit_version as installed_toolkit,  # noqa: E402
)
from turn_float import FloatGraphError, agreement, probabilities, write_float  # noqa: E402

NAME = "smart-turn"
THRESHOLD = 0.75  # hear.endpoint.threshold's default
SIM_MAX_DIFF = 0.05
FLIP_MARGIN = 0.01
"""An input whose float-graph probability lies this close to the threshold may flip by fp16 rounding
alone (the turn-end set has one 0.0015 from 0.75): not counted as a changed verdict."""


def synthetic_features(n: int = 8, seed: int = 0) -> np.ndarray:
    """Log-mel inputs of voiced bursts (harmonics under a syllable envelope, 0.6-4 s, then 200 ms of
    silence): the install-time check's inputs where the turn-end set's speech is not at hand."""
    from rkvoice.hear.turn_features import log_mel

    rng = np.random.default_rng(seed)
    rate, out = 16000, []
    for _ in range(n):
        t = np.arange(int(rate * rng.uniform(0.6, 4.0))) / rate
        f0 = rng.uniform(100, 260) * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(0.5, 3) * t))
        phase = 2 * np.pi * np.cumsum(f0) / rate
        voice = sum(np.sin(k * phase) / k for k in range(1, 8))
        envelope = np.clip(np.sin(np.pi * rng.uniform(3, 6) * t), 0, None) ** 0.5
        audio = 0.2 * voice * envelope + 0.003 * rng.standard_normal(t.size)
        out.append(log_mel(np.concatenate([audio, np.zeros(rate // 5)]).astype(np.float32)))
    return np.stack(out).astype(np.float32)


def convert(src: Path, out_dir: Path, target: str, required: str | None, verify: str,
            features: np.ndarray, keep: list | None = None) -> dict[str, Any]:
    """Float copy, fp16 .rknn + sidecar, checks; the JSON report (``ok`` false when a check failed)."""
    version = installed_toolkit(required)
    load_onnx(src)  # a clear refusal for a missing or foreign file
    if features.ndim != 3 or features.shape[1:] != (80, 800):
        raise ConvertError(f"--features must hold [N, 80, 800] log-mel inputs, got {list(features.shape)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    fixed = out_dir / f"{NAME}.onnx"
    try:
        rewrite = write_float(src, fixed, fixed_batch=1)
    except FloatGraphError as exc:
        raise ConvertError(f"{src}: {exc}") from None
    p_int8, p_float = probabilities(src, features), probabilities(fixed, features)
    report: dict[str, Any] = {"model": NAME, "out": str(out_dir / f"{NAME}.rknn"), "target": target,
                              "toolkit_version": version, "dtype": "fp16", "inputs": int(len(features)),
                              "rewrite": rewrite, "float_vs_int8": agreement(p_int8, p_float, THRESHOLD)}
    with CapturedLog() as captured:
        npu = Npu(fixed, target)
    report["toolkit_errors"] = toolkit_errors(captured.text)
    report["toolkit_refused"], report["toolkit_warnings"] = error_verdict(report["toolkit_errors"])
    npu.export(fixed.with_suffix(".rknn"))
    report["build_s"] = npu.build_s
    report["verify"] = npu.start(verify)
    ok = not report["toolkit_refused"]
    if report["verify"] != "none":
        p_npu = np.array([float(np.asarray(npu.run([f[None]])[0]).reshape(-1)[0]) for f in features])
        report["npu_vs_float"] = agreement(p_float, p_npu, THRESHOLD, FLIP_MARGIN)
        report["npu_vs_int8"] = agreement(p_int8, p_npu, THRESHOLD)
        ok = ok and report["npu_vs_float"]["max_abs_diff"] <= SIM_MAX_DIFF and not report["npu_vs_float"]["verdict_flips"]
    report["ok"] = bool(ok)
    report["peak_rss_mb"] = peak_rss_mb()
    side = {**_io(load_onnx(fixed)), **{k: v for k, v in report.items() if k != "out"}}
    (out_dir / f"{NAME}.json").write_text(json.dumps(side, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    if keep is None:
        npu.release()
    else:
        keep.append(npu)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="convert_turn.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx", type=Path, required=True, help="smart-turn-v3.2-cpu.onnx (the int8 file)")
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--features", type=Path, help="[N, 80, 800] .npy log-mel inputs for the checks")
    ap.add_argument("--target", default="rk3576")
    ap.add_argument("--toolkit-version", help="refuse unless the installed rknn-toolkit2 is this version")
    ap.add_argument("--verify", default="auto", choices=["auto", "simulator", "device", "none"])
    ap.add_argument("--serve", action="store_true", help="then answer run requests (models/npu_serve.py)")
    args = ap.parse_args(argv)
    sys.stdout.flush()
    json_fd = os.dup(1)
    os.dup2(2, 1)  # the toolkit logs to stdout: keep stdout for the JSON line
    keep: list | None = [] if args.serve else None
    try:
        if args.features is not None and not args.features.is_file():
            raise ConvertError(f"--features {args.features}: no such file")
        features = np.load(args.features).astype(np.float32) if args.features else synthetic_features()
        report = convert(args.onnx, args.out, args.target, args.toolkit_version, args.verify, features, keep)
    except ConvertError as exc:
        sys.stderr.write(f"convert_turn.py: {exc}\n")
        return 2
    os.write(json_fd, (json.dumps(report, ensure_ascii=False) + "\n").encode())
    if not report["ok"]:
        sys.stderr.write(f"convert_turn.py: {report['out']} failed its checks (see its JSON line); it is written "
                         "but must not be installed\n")
    if keep is not None:
        import npu_serve

        npu_serve.serve_built(keep, json_fd)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
