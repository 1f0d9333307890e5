#!/usr/bin/env python3
"""Convert the portable voice (FastSpeech2 + MB-MelGAN) to RK3576 .rknn files (x86_64 PC).

Runs in its own venv with rknn-toolkit2 2.5.0 (its numpy/onnx/torch pins clash with the
runtime's; see docs/npu-conversion.md). Create it (1.5 GB) with

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

  fastspeech2 --onnx fastspeech2.onnx --out-dir DIR [--frames 256 ...] [--ids ids.npy] [--json]
      FastSpeech2 does not convert whole (its length regulator builds a data-dependent Range).
      Split it there: DIR/fastspeech2-encoder.onnx (token ids -> hidden [1, N, 256] + durations;
      keep it on the CPU: padding the ids changes the predicted durations) and
      DIR/fastspeech2-decoder.onnx (regulated hidden [1, T, 256] + frame mask -> postnet mel),
      both with the -1e9 attention-mask constant reduced to -1e4 (fp16 overflow -> NaN) and the
      decomposed layer norms fused into LayerNormalization (fp16 loses the decomposed form:
      ~21 dB -> ~44 dB). The decoder is built for fixed frame counts (several via
      ``dynamic_input``); ``rknn_graphs.regulate`` pads and masks between the
      halves. With ``--ids`` it reports the simulator's mel SNR against onnxruntime.

  generic --onnx X.onnx --out X.rknn --shape NAME=D,D ... [--feed NAME=F.npy] [--simulate]
      Any graph that is fixed-shape once its inputs are.

  matcha --onnx model-steps-3.onnx --out DIR --tokens 32 --tokens 64 [--frames W ...] [--vocos V.onnx]
         [--target rk3576] [--toolkit-version V] [--verify auto|simulator|device|none|onnx-only]
      The board's Matcha split at its length regulator (models/matcha_split.py): DIR/matcha-encoder.onnx
      (text encoder + durations, dynamic, onnxruntime fp32 on the CPU) and one decoder .rknn per token
      bucket's frame window (the flow-matching decoder over W frames with its mask; the alignment
      runs in numpy between them, rkvoice.npu.length_regulator.align). models/npu_voice.py (npu_vocos.py) builds and
      checks each bucket, in its own process when there are several. One JSON line per bucket (with
      the toolkit's error-line counts and the peak RSS); exit 1 below the SNR thresholds or when the
      toolkit printed a REGTASK overflow or another error line (npu_toolkit.error_verdict; its
      "Unkown op target" lines are warned of). Both are said again at the end of stderr.

  vocos --onnx vocos-16khz-univ.onnx --out DIR --frames 600 [--frames 200 ...] [--mel mel.npy] ...
      The board's Vocos, one .rknn per frame bucket, same checks and JSON lines.

The ONNX rewrites live in models/rknn_graphs.py, the venv set-up in models/rknn_setup.py, the
portable voice's builds and simulator checks in models/rknn_portable.py.
The board runs the vocoder file through ``rkvoice.npu.runtime`` (RKNNLite) and
``rkvoice.npu.chunked_vocoder.ChunkedVocoder`` (overlapping <= 50-frame windows).
The toolkit version must equal the board's librknnrt (``assistant.py --check`` says which).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from rknn_graphs import strip_output_quantization
from rknn_portable import MAX_FRAMES, build_vocoder, fastspeech2, snr_db
from rknn_setup import DEFAULT_TOOLKIT_VERSION, setup_venv

log = logging.getLogger("convert_rknn")


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


def _voice(args: argparse.Namespace) -> int:
    """matcha / vocos subcommands: one JSON line per bucket; 0 all pass, 1 a check failed, 2 refused."""
    import npu_vocos
    import npu_voice

    # The toolkit logs to stdout; keep stdout for the JSON lines alone (its logs go to stderr).
    sys.stdout.flush()
    json_fd = os.dup(1)
    os.dup2(2, 1)

    def emit(report: dict) -> None:
        os.write(json_fd, (json.dumps(report, ensure_ascii=False) + "\n").encode())

    keep: list | None = [] if args.serve else None
    if args.cmd == "matcha" and len(args.tokens) > 1 and not args.serve:
        return _buckets_apart(args, json_fd)
    try:
        if args.cmd == "matcha":
            reports = npu_voice.convert_matcha(args.onnx, args.out, args.tokens, args.frames, args.target,
                                               args.toolkit_version, args.verify, args.fuse_qkv, emit, keep,
                                               args.vocos)
        else:
            reports = npu_vocos.convert_vocos(args.onnx, args.out, args.frames or [600], args.target,
                                              args.toolkit_version, args.verify, args.mel, emit, keep)
    except npu_voice.ConvertError as exc:
        sys.stderr.write(f"convert_rknn.py {args.cmd}: {exc}\n")
        return 2
    failed = [r["out"] for r in reports if not r["ok"]]
    say_toolkit_lines(args.cmd, reports)
    for out in failed:
        sys.stderr.write(f"convert_rknn.py {args.cmd}: {out} failed its checks (below the thresholds, or refused for "
                         "the toolkit's error lines above; see its JSON line); it is written but must not be installed\n")
    if keep is not None:
        import npu_serve

        npu_serve.serve_built(keep, json_fd)
    return 1 if failed else 0


def say_toolkit_lines(cmd: str, reports: list[dict]) -> None:
    """The toolkit's error lines, read back from its log, said last on stderr (where an installer's
    tail shows them): the ones that refuse a build (its ``ok`` is false) and the ones only warned of."""
    for r in reports:
        for line in r.get("toolkit_refused") or []:
            sys.stderr.write(f"convert_rknn.py {cmd}: {Path(r['out']).name} REFUSED: rknn-toolkit2 printed {line}\n")
        warned = r.get("toolkit_warnings") or []
        if warned:
            sys.stderr.write(f"convert_rknn.py {cmd}: {Path(r['out']).name} warning: rknn-toolkit2 printed "
                             f"{'; '.join(warned)} (not refused: the simulator check ran; see the JSON line)\n")


def _buckets_apart(args: argparse.Namespace, json_fd: int) -> int:
    """Several Matcha buckets: each in its own process (one build's memory at a time, <= 1.5 GB on the
    board instead of the sum); their JSON lines are passed on; the worst exit code is returned."""
    import subprocess

    worst, reports = 0, []
    for i, k in enumerate(args.tokens):
        cmd = [sys.executable, str(Path(__file__).resolve()), "matcha", "--onnx", str(args.onnx), "--out", str(args.out),
               "--tokens", str(k), "--target", args.target, "--verify", args.verify]
        if args.frames:
            cmd += ["--frames", str(args.frames[i])]
        if args.toolkit_version:
            cmd += ["--toolkit-version", args.toolkit_version]
        if args.fuse_qkv:
            cmd.append("--fuse-qkv")
        if args.vocos:
            cmd += ["--vocos", str(args.vocos)]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE)
        os.write(json_fd, proc.stdout)
        reports += [json.loads(line) for line in proc.stdout.decode().splitlines() if line.startswith("{")]
        if proc.returncode == 2:
            return 2
        worst = max(worst, proc.returncode)
    say_toolkit_lines(args.cmd, reports)  # again, after every bucket's log, for the tail
    return worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="convert_rknn.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
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
    fs = sub.add_parser("fastspeech2", help="split FastSpeech2 at its length regulator; decoder -> .rknn")
    fs.add_argument("--onnx", type=Path, required=True)
    fs.add_argument("--out-dir", type=Path, required=True)
    fs.add_argument("--frames", type=int, action="append", help="decoder frame count(s), e.g. 256")
    fs.add_argument("--ids", type=Path, help="a [1, N] .npy of token ids: simulate and report SNR")
    fs.add_argument("--target", default="rk3576")
    fs.add_argument("--json", action="store_true")
    for name, what in (("matcha", "Matcha ONNX -> fixed-shape .onnx + .rknn per token bucket, checked"),
                       ("vocos", "Vocos ONNX -> fixed-shape .onnx + .rknn per frame bucket, checked")):
        vp = sub.add_parser(name, help=what)
        vp.add_argument("--onnx", type=Path, required=True)
        vp.add_argument("--out", type=Path, required=True, help="output directory")
        if name == "matcha":
            vp.add_argument("--tokens", type=int, action="append", required=True, help="token bucket (repeat)")
            vp.add_argument("--frames", type=int, action="append", help="frame window per bucket (default 9.375/token)")
            vp.add_argument("--fuse-qkv", action="store_true",
                            help="let onnxsim merge q/k/v (reproduces the toolkit's attention bug; for tests)")
            vp.add_argument("--vocos", type=Path,
                            help="a Vocos ONNX: check B also compares the waveforms (>= 35 dB)")
        else:
            vp.add_argument("--frames", type=int, action="append", help="frame bucket (repeat; default 600)")
            vp.add_argument("--mel", type=Path, help="a [1, n_mels, T] .npy mel for the checks")
        vp.add_argument("--target", default="rk3576")
        vp.add_argument("--toolkit-version", help="refuse unless the installed rknn-toolkit2 is this version")
        vp.add_argument("--serve", action="store_true",
                        help="then answer run requests on stdin/stdout with the built models (models/npu_serve.py)")
        vp.add_argument("--verify", default="auto", choices=["auto", "simulator", "device", "none", "onnx-only"],
                        help="check B: simulator (x86), device (on the board), none; onnx-only skips the build")
    sv = sub.add_parser("setup-venv", help="create the rknn-toolkit2 venv (python 3.11; torch 2.13.0 CPU wheel)")
    sv.add_argument("venv", type=Path, nargs="?", default=Path(os.environ.get("RKNN_TOOLKIT_VENV", "/tmp/rknn-tk-venv")))
    sv.add_argument("--python", default="python3.11", help="a CPython 3.11 (the toolkit has cp311 wheels)")
    sv.add_argument("--toolkit-version", default=DEFAULT_TOOLKIT_VERSION, help="rknn-toolkit2 version")
    sv.add_argument("--model-code", action="store_true", help="also matcha-tts + vocos (for the stand-in voice)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.cmd == "setup-venv":
        return setup_venv(args.venv, args.python, args.toolkit_version, args.model_code)
    if args.cmd in ("matcha", "vocos"):
        return _voice(args)
    src = args.src if args.cmd == "float-copy" else args.onnx
    if not src.is_file():
        ap.error(f"{src} not found" + ("" if args.cmd == "generic" else " (install the portable voice first: ./install.sh)"))
    if args.cmd == "float-copy":
        n = strip_output_quantization(args.src, args.dst)
        log.info("wrote %s (%d Quantize/Dequantize nodes replaced)", args.dst, n)
        return 0
    if args.cmd == "fastspeech2":
        import numpy as np

        ids = np.load(args.ids) if args.ids else None
        report = fastspeech2(args.onnx, args.out_dir, args.frames or [256], args.target, ids)
        sys.stdout.write(json.dumps(report) + "\n" if args.json else f"{report}\n")
        return 0
    if args.cmd == "generic":
        import numpy as np

        shapes = {k: [int(d) for d in v.split(",")] for k, v in (item.split("=", 1) for item in args.shape)}
        feeds = {k: np.load(v) for k, v in (item.split("=", 1) for item in args.feed)}
        report = build_generic(args.onnx, args.out, shapes, args.target, feeds, args.simulate)
        sys.stdout.write(json.dumps(report) + "\n" if args.json else f"{report}\n")
        return 0
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
