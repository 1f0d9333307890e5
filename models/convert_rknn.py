#!/usr/bin/env python3
"""Convert the portable voice's MB-MelGAN vocoder to an RK3576 .rknn file (x86_64 PC).

Runs in its own venv with rknn-toolkit2 2.5.0 (its numpy/onnx/torch pins clash with the
runtime's; see the README's developer section). Create it (1.5 GB) with

    python3 models/convert_rknn.py setup-venv /tmp/rknn-tk-venv --python python3.11

(the wheel with --no-deps, then protobuf<=4.25.4, psutil, ruamel.yaml, scipy, tqdm,
opencv-python-headless, fast-histogram, numpy<=1.26.4, onnx 1.16-1.18, onnxruntime,
torch==2.13.0 CPU, setuptools<81) and run the conversions with /tmp/rknn-tk-venv/bin/python.

Subcommands:

  float-copy  IN.onnx OUT.onnx
      Rewrite the vocoder without its output QuantizeLinear/DequantizeLinear pair (the TFLite
      model's int8 step after tanh). Needs only ``onnx``. The simulator matches onnxruntime at
      ~31 dB SNR with the pair and 44-49 dB without it.

  vocoder --onnx mb_melgan.onnx --out mb_melgan-50.rknn [--frames 50 ...] [--mel mel.npy] [--json]
      Float copy -> rknn-toolkit2 build (fp16, no quantization) for fixed input lengths
      (several via ``dynamic_input``; keep them <= 50 frames: from ~100 frames up the compiler
      overflows its REGTASK registers) -> export. With ``--mel`` (a [1, T, 80] postnet mel from
      the portable FastSpeech2) it then runs the simulator in the same process (the simulator
      only runs a model built in that process) on every ``frames``-long window of the mel and
      prints the SNR against onnxruntime on the same float copy.

The board runs the file through ``rkvoice.npu.runtime`` (RKNNLite) and
``rkvoice.npu.chunked_vocoder.ChunkedVocoder`` (overlapping <= 50-frame windows).
The toolkit version must equal the board's librknnrt (``assistant.py --check`` says which).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("convert_rknn")

MAX_FRAMES = 50
"""Longest vocoder window: REGTASK register overflows start near 100 frames."""


def strip_output_quantization(src: Path, dst: Path) -> int:
    """Copy ``src`` with every QuantizeLinear/DequantizeLinear turned into Identity; returns the count."""
    import onnx

    model = onnx.load(str(src))
    graph = model.graph
    changed = 0
    used_scales = set()
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            used_scales.update(node.input[1:])
            data = node.input[0]
            del node.input[:]
            node.input.append(data)
            del node.attribute[:]
            node.op_type = "Identity"
            node.domain = ""
            changed += 1
    still_used = {i for n in graph.node for i in n.input}
    keep = [init for init in graph.initializer if init.name not in used_scales or init.name in still_used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    del graph.value_info[:]  # int8 types of the rewired tensors are stale now
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return changed


def snr_db(test: Any, ref: Any) -> float:
    import numpy as np

    noise = float(np.sum((np.asarray(test, np.float64) - np.asarray(ref, np.float64)) ** 2))
    signal = float(np.sum(np.asarray(ref, np.float64) ** 2))
    if noise == 0.0:
        return float("inf")
    return 10.0 * np.log10(signal / noise)


def build_vocoder(onnx_path: Path, out: Path, frames: list[int], target: str, mel: Any) -> dict:
    from rknn.api import RKNN  # the toolkit venv only

    if any(f > MAX_FRAMES for f in frames):
        log.warning("frames %s > %d: expect REGTASK overflow errors from the compiler", frames, MAX_FRAMES)
    report: dict = {"target": target, "frames": frames, "onnx": str(onnx_path), "rknn": str(out)}
    with tempfile.TemporaryDirectory() as tmp:
        float_copy = Path(tmp) / "vocoder-float.onnx"
        report["stripped_qdq_nodes"] = strip_output_quantization(onnx_path, float_copy)
        rknn = RKNN(verbose=False)
        shapes = [[[1, f, 80]] for f in frames]
        if len(frames) > 1:
            rknn.config(target_platform=target, dynamic_input=shapes)
            ret = rknn.load_onnx(str(float_copy))
        else:
            rknn.config(target_platform=target)
            ret = rknn.load_onnx(str(float_copy), inputs=["mels"], input_size_list=shapes[0])
        if ret != 0:
            raise SystemExit(f"load_onnx({float_copy}) failed: {ret}")
        t0 = time.monotonic()
        if rknn.build(do_quantization=False) != 0:
            raise SystemExit("rknn build failed (see the log above)")
        report["build_s"] = round(time.monotonic() - t0, 2)
        out.parent.mkdir(parents=True, exist_ok=True)
        if rknn.export_rknn(str(out)) != 0:
            raise SystemExit(f"export_rknn({out}) failed")
        report["rknn_bytes"] = out.stat().st_size
        if mel is not None:
            report.update(simulate(rknn, float_copy, mel, frames))
        rknn.release()
    return report


def simulate(rknn: Any, float_copy: Path, mel: Any, frames: list[int]) -> dict:
    """Simulator vs onnxruntime (float copy) on every window of ``mel``; SNR per window length."""
    import numpy as np
    import onnxruntime as ort

    if rknn.init_runtime() != 0:
        raise SystemExit("init_runtime() (simulator) failed")
    sess = ort.InferenceSession(str(float_copy), providers=["CPUExecutionProvider"])
    mel = np.asarray(mel, np.float32)
    result: dict = {"mel_frames": int(mel.shape[1]), "snr_db": {}, "sim_s": {}}
    for f in frames:
        sims, refs = [], []
        t0 = time.monotonic()
        for start in range(0, mel.shape[1] - f + 1, f):
            window = np.ascontiguousarray(mel[:, start : start + f])
            sims.append(np.asarray(rknn.inference(inputs=[window], data_format="nchw")[0]).reshape(-1))
            refs.append(sess.run(None, {"mels": window})[0].reshape(-1))
        if not sims:
            raise SystemExit(f"the mel has {mel.shape[1]} frames, fewer than one {f}-frame window")
        result["sim_s"][str(f)] = round(time.monotonic() - t0, 2)
        result["snr_db"][str(f)] = round(snr_db(np.concatenate(sims), np.concatenate(refs)), 2)
    return result


def build_generic(onnx_path: Path, out: Path, shapes: dict[str, list[int]], target: str,
                  feeds: dict[str, Any], simulate_runs: bool) -> dict:
    """Any fixed-shape ONNX graph (e.g. Matcha 64 tokens -> 599 frames, Vocos 600 frames) -> .rknn.

    With ``simulate_runs``: simulator vs onnxruntime on the given feeds (random inputs where none
    is given), SNR per output.
    """
    import numpy as np
    import onnxruntime as ort
    from rknn.api import RKNN

    names = list(shapes)
    rknn = RKNN(verbose=False)
    rknn.config(target_platform=target)
    if rknn.load_onnx(str(onnx_path), inputs=names, input_size_list=[shapes[n] for n in names]) != 0:
        raise SystemExit(f"load_onnx({onnx_path}) failed")
    t0 = time.monotonic()
    if rknn.build(do_quantization=False) != 0:
        raise SystemExit("rknn build failed (see the log above)")
    report: dict = {"target": target, "onnx": str(onnx_path), "rknn": str(out), "build_s": round(time.monotonic() - t0, 2)}
    out.parent.mkdir(parents=True, exist_ok=True)
    if rknn.export_rknn(str(out)) != 0:
        raise SystemExit(f"export_rknn({out}) failed")
    report["rknn_bytes"] = out.stat().st_size
    if simulate_runs:
        if rknn.init_runtime() != 0:
            raise SystemExit("init_runtime() (simulator) failed")
        sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        types = {i.name: i.type for i in sess.get_inputs()}
        rng = np.random.default_rng(0)
        inputs = []
        for n in names:
            if n in feeds:
                arr = np.asarray(feeds[n])
            elif "int" in types[n]:
                arr = rng.integers(1, 10, size=shapes[n])
            else:
                arr = rng.standard_normal(shapes[n])
            inputs.append(arr.astype(np.int64 if "int64" in types[n] else np.int32 if "int32" in types[n] else np.float32))
        t1 = time.monotonic()
        sim = rknn.inference(inputs=inputs, data_format="nchw")
        report["sim_s"] = round(time.monotonic() - t1, 2)
        ref = sess.run(None, dict(zip(names, inputs)))
        report["snr_db"] = {o.name: round(snr_db(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)), 2)
                            for o, a, b in zip(sess.get_outputs(), sim, ref)}
    rknn.release()
    return report


TOOLKIT = "rknn-toolkit2==2.5.0"
TOOLKIT_DEPS = ["protobuf<=4.25.4", "psutil", "ruamel.yaml", "scipy", "tqdm", "opencv-python-headless",
                "fast-histogram", "numpy<=1.26.4", "onnx>=1.16,<1.19", "onnxruntime", "torch==2.13.0",
                "setuptools<81"]


def setup_venv(venv: Path, python: str) -> int:
    """Create the toolkit venv: the wheel without its deps (torch 2.4 + CUDA, 5.6 GB), then lean pins."""
    def run(*cmd: str) -> None:
        log.info("$ %s", " ".join(cmd))
        subprocess.run(cmd, check=True)

    run(python, "-m", "venv", str(venv))
    pip = str(venv / "bin" / "pip")
    with tempfile.TemporaryDirectory() as tmp:
        run(pip, "download", "--no-deps", "-d", tmp, TOOLKIT)
        wheels = sorted(Path(tmp).glob("rknn_toolkit2-*.whl"))
        run(pip, "install", "--no-deps", *map(str, wheels))
    run(pip, "install", *TOOLKIT_DEPS)
    run(str(venv / "bin" / "python"), "-c", "from rknn.api import RKNN")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="convert_rknn.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    fc = sub.add_parser("float-copy", help="strip the vocoder's Quantize/Dequantize nodes")
    fc.add_argument("src", type=Path)
    fc.add_argument("dst", type=Path)
    vo = sub.add_parser("vocoder", help="MB-MelGAN ONNX -> .rknn (+ simulator SNR with --mel)")
    vo.add_argument("--onnx", type=Path, required=True)
    vo.add_argument("--out", type=Path, required=True)
    vo.add_argument("--frames", type=int, action="append", help=f"fixed input length(s), <= {MAX_FRAMES}")
    vo.add_argument("--target", default="rk3576")
    vo.add_argument("--mel", type=Path, help="a [1, T, 80] .npy mel: simulate and report SNR")
    vo.add_argument("--json", action="store_true", help="print the report as one JSON line")
    ge = sub.add_parser("generic", help="any fixed-shape ONNX (Matcha, Vocos) -> .rknn (+ simulator SNR)")
    ge.add_argument("--onnx", type=Path, required=True)
    ge.add_argument("--out", type=Path, required=True)
    ge.add_argument("--shape", action="append", required=True, metavar="NAME=D,D,D", help="fixed input shape, per input")
    ge.add_argument("--feed", action="append", default=[], metavar="NAME=FILE.npy", help="simulation input")
    ge.add_argument("--simulate", action="store_true")
    ge.add_argument("--target", default="rk3576")
    ge.add_argument("--json", action="store_true")
    sv = sub.add_parser("setup-venv", help="create the rknn-toolkit2 venv (python 3.11; torch 2.13.0 CPU wheel)")
    sv.add_argument("venv", type=Path, nargs="?", default=Path(os.environ.get("RKNN_TOOLKIT_VENV", "/tmp/rknn-tk-venv")))
    sv.add_argument("--python", default="python3.11", help="a CPython 3.11 (the toolkit has cp311 wheels)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.cmd == "setup-venv":
        return setup_venv(args.venv, args.python)
    if args.cmd == "float-copy":
        n = strip_output_quantization(args.src, args.dst)
        log.info("wrote %s (%d Quantize/Dequantize nodes replaced)", args.dst, n)
        return 0
    if args.cmd == "generic":
        import numpy as np

        shapes = {k: [int(d) for d in v.split(",")] for k, v in (item.split("=", 1) for item in args.shape)}
        feeds = {k: np.load(v) for k, v in (item.split("=", 1) for item in args.feed)}
        report = build_generic(args.onnx, args.out, shapes, args.target, feeds, args.simulate)
        sys.stdout.write(json.dumps(report) + "\n" if args.json else f"{report}\n")
        return 0
    if not args.onnx.is_file():
        ap.error(f"{args.onnx} not found (install the portable voice first: ./install.sh)")
    import numpy as np

    mel = np.load(args.mel) if args.mel else None
    report = build_vocoder(args.onnx, args.out, args.frames or [MAX_FRAMES], args.target, mel)
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
    else:
        for k, v in report.items():
            log.info("%s: %s", k, v)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
