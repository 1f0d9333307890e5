"""The portable voice (FastSpeech2 + MB-MelGAN) built for the NPU and checked on rknn-toolkit2's
simulator: the vocoder at fixed window lengths, FastSpeech2's decoder behind its CPU encoder.
Runs in the toolkit venv; models/convert_rknn.py is the command line (see its docstring).
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from rknn_graphs import FS2_EXPANDED, FS2_MASK, FS2_MEL, regulate, split_fastspeech2, strip_output_quantization

log = logging.getLogger("convert_rknn")

MAX_FRAMES = 50
"""Longest vocoder window: REGTASK register overflows start near 100 frames."""


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


def build_fs2_decoder(decoder: Path, out: Path, frames: list[int], target: str) -> Any:
    """fastspeech2-decoder.onnx -> .rknn for fixed frame counts (several via dynamic_input); returns the RKNN."""
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    shapes = [[[1, f, 256], [1, f]] for f in frames]
    if len(frames) > 1:
        rknn.config(target_platform=target, dynamic_input=shapes)
        ret = rknn.load_onnx(str(decoder))
    else:
        rknn.config(target_platform=target)
        ret = rknn.load_onnx(str(decoder), inputs=[FS2_EXPANDED, FS2_MASK], input_size_list=shapes[0])
    if ret != 0 or rknn.build(do_quantization=False) != 0:
        raise SystemExit(f"building {decoder} for {target} failed (see the log above)")
    if rknn.export_rknn(str(out)) != 0:
        raise SystemExit(f"export_rknn({out}) failed")
    return rknn


def fastspeech2(src: Path, out_dir: Path, frames: list[int], target: str, ids: Any) -> dict:
    """Split, build the decoder, and with ``ids`` compare simulator and onnxruntime mels (SNR)."""
    import numpy as np
    import onnxruntime as ort

    report = split_fastspeech2(src, out_dir)
    dec_onnx = out_dir / "fastspeech2-decoder.onnx"
    out = out_dir / f"fastspeech2-decoder-{'-'.join(map(str, frames))}.rknn"
    t0 = time.monotonic()
    rknn = build_fs2_decoder(dec_onnx, out, frames, target)
    report.update({"build_s": round(time.monotonic() - t0, 2), "rknn": str(out), "rknn_bytes": out.stat().st_size})
    if ids is not None:
        feeds = {"input_ids": np.asarray(ids, np.int32).reshape(1, -1), "speaker_ids": np.array([0], np.int32),
                 "speed_ratios": np.array([1.0], np.float32), "f0_ratios": np.array([1.0], np.float32),
                 "energy_ratios": np.array([1.0], np.float32)}
        whole = ort.InferenceSession(str(src)).run([FS2_MEL], feeds)[0]
        enc = ort.InferenceSession(str(out_dir / "fastspeech2-encoder.onnx"))
        enc_names = {i.name for i in enc.get_inputs()}
        hidden, durations = enc.run(None, {k: v for k, v in feeds.items() if k in enc_names})
        dec = ort.InferenceSession(str(dec_onnx))
        x, mask, total = regulate(hidden, durations)
        split_mel = dec.run(None, {FS2_EXPANDED: x, FS2_MASK: mask})[0]
        report["split_vs_whole_snr_db"] = round(snr_db(split_mel, whole), 2)
        report["mel_frames"] = total
        if rknn.init_runtime() != 0:
            raise SystemExit("init_runtime() (simulator) failed")
        report["snr_db"] = {}
        for f in frames:
            if f < total:
                continue
            xp, mp, _ = regulate(hidden, durations, f)
            ref = dec.run(None, {FS2_EXPANDED: xp, FS2_MASK: mp})[0][:, :total]
            sim = np.asarray(rknn.inference(inputs=[xp, mp], data_format="nchw")[0]).reshape(1, f, -1)[:, :total]
            report["snr_db"][str(f)] = {"vs_onnxruntime_padded": round(snr_db(sim, ref), 2),
                                        "vs_whole_graph": round(snr_db(sim, whole), 2)}
    rknn.release()
    return report
