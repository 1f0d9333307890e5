"""Build and prove the board vocoder: Vocos (per frame bucket) -> .rknn, its ISTFT on the CPU.

Called by ``models/convert_rknn.py vocos`` in the toolkit venv; the checks are the ones the module
docstring of models/npu_voice.py states (A: fixed vs original graph; B: simulator vs onnxruntime on
mag/x/y and the ISTFT waveform, the window's last quarter on its own).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matcha_graph as mg  # noqa: E402
from npu_toolkit import (  # noqa: E402
    VOCOS_OUTPUTS,
    ConvertError,
    Npu,
    _session,
    _stft_config,
    check_vocos_io,
    load_onnx,
    snr_db,
    toolkit_version,
)
from npu_voice import (  # noqa: E402
    ORIGINAL_DB,
    VOCOS_SIM_DB,
    WAVE_SIM_DB,
    _build_and_check,
    _write_sidecar,
    toolkit_gate,
)
from onnx_edit import set_input_shape  # noqa: E402


def test_mel(n_mels: int, frames: int, seed: int) -> np.ndarray:
    """A speech-like log-mel: smooth in time and frequency, -11..2 (natural log of magnitude)."""
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((n_mels, frames + 8))
    kernel = np.hanning(9) / np.hanning(9).sum()
    smooth = np.apply_along_axis(lambda r: np.convolve(r, kernel, mode="valid"), 1, raw)
    smooth = np.apply_along_axis(lambda c: np.convolve(c, kernel, mode="same"), 0, smooth)
    tilt = np.linspace(0.0, -4.0, n_mels)[:, None]
    return (smooth * 6.0 + tilt - 4.0).clip(-11.5, 2.0)[None].astype(np.float32)


def convert_vocos(onnx_path: Path, out_dir: Path, frames: list[int], target: str, required_toolkit: str | None,
                  verify: str = "auto", mel_path: Path | None = None,
                  emit: Callable[[dict], None] | None = None, keep: list | None = None) -> list[dict]:
    import onnx

    from rkvoice.npu.istft import istft_mag_xy

    version = toolkit_version(required_toolkit) if verify != "onnx-only" else "none"
    src = load_onnx(onnx_path)
    n_mels = check_vocos_io(src, onnx_path)
    meta = {p.key: p.value for p in src.metadata_props}
    stft = _stft_config(meta)
    out_dir.mkdir(parents=True, exist_ok=True)
    orig = _session(src)
    in_name = src.graph.input[0].name
    reports = []
    for n in frames:
        if n < 16:
            raise ConvertError(f"--frames {n}: a Vocos window needs at least 16 frames")
        fixed = onnx.ModelProto()
        fixed.CopyFrom(src)
        set_input_shape(fixed, in_name, [1, n_mels, n])
        fixed = onnx.shape_inference.infer_shapes(mg.simplify(fixed))
        name = f"vocos-f{n}"
        fixed_path = out_dir / f"{name}.onnx"
        onnx.save(fixed, str(fixed_path))
        mel = np.load(mel_path)[..., :n] if mel_path else test_mel(n_mels, n, seed=n)
        if mel.shape[-1] < n:
            mel = np.concatenate([mel, np.full(mel.shape[:2] + (n - mel.shape[-1],), mel.min(), np.float32)], axis=2)
        sess = _session(fixed_path)
        ref = sess.run(list(VOCOS_OUTPUTS), {in_name: mel})
        base = orig.run(list(VOCOS_OUTPUTS), {in_name: mel})
        snr_a = min(snr_db(b, r) for b, r in zip(base, ref))
        report = {"model": "vocos", "out": str(out_dir / f"{name}.rknn"), "frames": n, "snr_vs_original_db": snr_a,
                  "snr_db": None, "wave_snr_db": None, "tail_snr_db": None, "true_frames_ok": True,
                  "capacity_ok": None, "build_s": None, "peak_rss_mb": None, "toolkit_version": version,
                  "target": target, "verify": "none"}
        def check_b(npu: Npu, report: dict = report, mel: np.ndarray = mel, ref: list = ref, n: int = n) -> None:
            shaped = [np.asarray(o) for o in npu.run([mel])[:3]]
            capacity = all(o.size == r.size for o, r in zip(shaped, ref))
            if capacity:
                shaped = [o.reshape(r.shape) for o, r in zip(shaped, ref)]
                q = max(1, n // 4)
                report["snr_db"] = min(snr_db(r, o) for r, o in zip(ref, shaped))
                report["tail_snr_db"] = min(snr_db(r[..., -q:], o[..., -q:]) for r, o in zip(ref, shaped))
                wave_ref = istft_mag_xy(ref[0], ref[1], ref[2], stft)
                report["wave_snr_db"] = snr_db(wave_ref, istft_mag_xy(shaped[0], shaped[1], shaped[2], stft))
            report["capacity_ok"] = bool(capacity and report["tail_snr_db"] >= VOCOS_SIM_DB)

        _build_and_check(fixed_path, report, target, verify, check_b, keep)
        report["ok"] = _vocos_ok(report)
        _write_sidecar(out_dir / f"{name}.json", fixed, report, None, n)
        if emit:
            emit(report)
        reports.append(report)
    return reports


def _vocos_ok(r: dict) -> bool:
    ok = toolkit_gate(r) and r["snr_vs_original_db"] >= ORIGINAL_DB
    if r["verify"] != "none":
        ok = ok and bool(r["capacity_ok"]) and (r["snr_db"] or 0) >= VOCOS_SIM_DB and (r["wave_snr_db"] or 0) >= WAVE_SIM_DB
    return bool(ok)

