"""Build and prove the board voice: Matcha (per token bucket) and Vocos (per frame bucket) -> .rknn.

Called by ``models/convert_rknn.py matcha|vocos`` in the toolkit venv (a PC, or the board itself at
install time). For every bucket it writes ``NAME.onnx`` (the fixed-shape graph, which onnxruntime
runs off the board), ``NAME.rknn`` and ``NAME.json`` (a sidecar: I/O, metadata, toolkit version and
the measured figures), and prints one JSON line. Two checks gate each file (exit 1 below either):

A. the fixed graph against the original dynamic graph, both fp32 on onnxruntime, same inputs and
   noise, over the true frames, for a short input (<= 16 tokens) and a full bucket: >= 60 dB;
B. rknn-toolkit2's simulator (or the NPU itself on an aarch64 board) against onnxruntime on the
   fixed graph: Matcha mel >= 40 dB; Vocos mag/x/y >= 40 dB and its ISTFT waveform >= 35 dB, with
   the window's last quarter checked on its own (a model that silently holds fewer frames than it
   claims fails there).

A build is also refused (exit 1) when rknn-toolkit2 printed a REGTASK overflow or any other error
line while building it; its "Unkown op target" lines are only warned of (npu_toolkit.error_verdict).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matcha_graph as mg  # noqa: E402
import matcha_split as ms  # noqa: E402
from npu_toolkit import (  # noqa: E402
    VOCOS_OUTPUTS,
    CapturedLog,
    ConvertError,
    Npu,
    _io,
    _session,
    _stft_config,
    check_vocos_io,
    error_verdict,
    load_onnx,
    peak_rss_mb,
    snr_db,
    toolkit_errors,
    toolkit_version,
)

log = logging.getLogger("npu_voice")

ORIGINAL_DB = 60.0
MATCHA_SIM_DB = 40.0
VOCOS_SIM_DB = 40.0
WAVE_SIM_DB = 35.0
SHORT_TOKENS = 16


# --------------------------------------------------------------------------------------------
# Matcha: CPU encoder (dynamic, fp32) | numpy alignment | NPU decoder per frame window


def _ids(rw: mg.Rewrite, n: int, rng: np.random.Generator) -> np.ndarray:
    pick = np.arange(rw.vocab)
    pick = pick[pick != rw.pad_id]
    return rng.choice(pick, size=n)[None].astype(np.int64)


def _encoder_feed(enc: Any, ids: np.ndarray, length_scale: float = 1.0) -> dict[str, np.ndarray]:
    feed = {"x": ids, "x_length": np.array([ids.shape[1]], np.int64),
            "noise_scale": np.array([0.667], np.float32), "length_scale": np.array([length_scale], np.float32)}
    return {i.name: feed[i.name] for i in enc.get_inputs()}


def encode(enc: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    mu_x, cum, t, t_dec = enc.run(list(ms.ENCODER_OUTPUTS), _encoder_feed(enc, ids))
    return mu_x, cum, int(t[0]), int(t_dec[0])


def decoder_feeds(mu_x: np.ndarray, cum: np.ndarray, frames: int, dec_frames: int, window: int,
                  noise: np.ndarray) -> dict[str, np.ndarray]:
    from rkvoice.npu.length_regulator import align

    mu, mask = align(mu_x, cum, frames, window)
    return {"mu": mu, "mask": mask, "noise": noise, "noise_scale": np.array([0.667], np.float32),
            "decoder_frames": np.array([dec_frames], np.float32)}


def window_for(enc: Any, rw: mg.Rewrite, tokens: int, probes: int = 4, headroom: float = 1.25) -> int:
    """Default frame window: the field's 9.375 frames a token, or more when this model speaks slower:
    the longest T' of a few full buckets of random tokens (the CPU encoder's own count), plus 25 %."""
    rng = np.random.default_rng(7)
    longest = max(encode(enc, _ids(rw, tokens, rng))[3] for _ in range(probes))
    need = int(-(-int(np.ceil(longest * headroom)) // 4) * 4)
    return max(mg.default_frames(tokens), need)


def check_matcha_original(src: Any, enc: Any, dec: Any, rw: mg.Rewrite, seed: int = 0) -> tuple[float, bool, list[dict]]:
    """Check A: encoder + numpy alignment + decoder against the original graph, all fp32 on onnxruntime,
    same ids and noise, over the true frames, for a short input and a full bucket."""
    orig = _session(mg.original_with_noise(src, rw.n_mels))
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((1, rw.n_mels, rw.frames)).astype(np.float32)
    worst, frames_ok, probes = 200.0, True, []
    for n in sorted({min(SHORT_TOKENS, rw.tokens), rw.tokens}):
        ids = _ids(rw, n, rng)
        mu_x, cum, t, t_dec = encode(enc, ids)
        if t_dec > rw.frames:
            raise ConvertError(f"--tokens {rw.tokens}: {n} tokens need {t_dec} frames but the window holds "
                               f"{rw.frames}; pass a larger --frames (>= {t_dec}, a multiple of 4)")
        (mel,) = dec.run(["mel"], decoder_feeds(mu_x, cum, t, t_dec, rw.frames, noise))
        feeds = {"x": ids, "x_length": np.array([n], np.int64), "noise_scale": np.array([0.667], np.float32),
                 "length_scale": np.array([1.0], np.float32), "noise": noise[:, :, :t_dec]}
        mel_o, _ = orig.run(["mel", mg.DEC_LEN], feeds)
        ok = mel_o.shape[-1] == t
        db = snr_db(mel_o, mel[:, :, :t]) if ok else -100.0
        probes.append({"tokens": n, "frames": t, "original_frames": int(mel_o.shape[-1]), "snr_db": db})
        worst, frames_ok = min(worst, db), frames_ok and ok
    return worst, frames_ok, probes


class Waves:
    """Mel -> waveform with a Vocos ONNX on onnxruntime + the numpy ISTFT (the waveform check)."""

    def __init__(self, path: Path) -> None:
        from rkvoice.npu.istft import istft_mag_xy

        model = load_onnx(path)
        check_vocos_io(model, path)
        self.sess = _session(model)
        self.name = model.graph.input[0].name
        self.stft = _stft_config({p.key: p.value for p in model.metadata_props})
        self._istft = istft_mag_xy

    def __call__(self, mel: np.ndarray) -> np.ndarray:
        mag, x, y = self.sess.run(list(VOCOS_OUTPUTS), {self.name: np.ascontiguousarray(mel, np.float32)})
        return self._istft(mag, x, y, self.stft)


def matcha_npu_cases(enc: Any, dec_path: Path, rw: mg.Rewrite, waves: Waves | None = None,
                     seed: int = 1) -> list[dict]:
    """Check B's inputs and onnxruntime's answers, made before the build (so onnxruntime's memory is
    freed by then): the same aligned input (the CPU encoder's, fp32) for a short text, a full bucket
    and the whole window filled (the full bucket's input stretched to W frames: a build that holds
    fewer frames fails there)."""
    dec = _session(dec_path)
    names = [i.name for i in dec.get_inputs()]
    rng = np.random.default_rng(seed)
    inputs = []
    for n in sorted({min(SHORT_TOKENS, rw.tokens), rw.tokens}):
        mu_x, cum, t, t_dec = encode(enc, _ids(rw, n, rng))
        inputs.append((str(n), mu_x, cum, min(t, rw.frames), min(t_dec, rw.frames)))
    _, mu_x, cum, _, _ = inputs[-1]
    inputs.append(("window", mu_x, (cum * (rw.frames / max(float(cum[0, -1]), 1e-3))).astype(np.float32),
                   rw.frames, rw.frames))
    cases = []
    for label, mu_x, cum, t, t_dec in inputs:
        noise = rng.standard_normal((1, rw.n_mels, rw.frames)).astype(np.float32)
        feeds = decoder_feeds(mu_x, cum, t, t_dec, rw.frames, noise)
        (ref,) = dec.run(["mel"], feeds)
        cases.append({"input": label, "frames": t, "feeds": [feeds[k] for k in names], "ref": ref,
                      "wave": waves(ref[:, :, :t]) if waves is not None else None})
    return cases


def check_matcha_npu(npu: Npu, cases: list[dict], waves: Waves | None = None) -> tuple[float, float | None, list[dict]]:
    """Check B, like with like: the built decoder (simulator/NPU) against onnxruntime on the same
    aligned input; mel SNR over the true frames, and with ``waves`` the waveform SNR through the
    same Vocos + ISTFT."""
    worst, worst_wave, probes = 200.0, None, []
    for case in cases:
        ref, t = case["ref"], case["frames"]
        sim = npu.run(case["feeds"])[0].reshape(ref.shape)
        probe: dict[str, Any] = {"input": case["input"], "frames": t, "snr_db": snr_db(ref[:, :, :t], sim[:, :, :t])}
        if waves is not None:
            probe["wave_snr_db"] = snr_db(case["wave"], waves(sim[:, :, :t]))
            worst_wave = min(worst_wave if worst_wave is not None else 200.0, probe["wave_snr_db"])
        probes.append(probe)
        worst = min(worst, probe["snr_db"])
    return worst, worst_wave, probes


def _io_only(model: Any) -> Any:
    """A model with only the inputs, outputs and metadata of ``model`` (for its sidecar)."""
    import onnx

    light = onnx.ModelProto()
    light.graph.input.extend(model.graph.input)
    light.graph.output.extend(model.graph.output)
    light.metadata_props.extend(model.metadata_props)
    return light


def release_memory() -> None:
    """Give freed heap back to the OS before the toolkit's build (its peak adds to what is resident)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _save(model: Any, path: Path) -> None:
    """Write atomically (a bucket process may be reading the encoder another one wrote)."""
    import onnx

    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)


def convert_matcha(onnx_path: Path, out_dir: Path, tokens: list[int], frames: list[int] | None, target: str,
                   required_toolkit: str | None, verify: str = "auto", fuse_qkv: bool = False,
                   emit: Callable[[dict], None] | None = None, keep: list | None = None,
                   vocos: Path | None = None) -> list[dict]:
    version = toolkit_version(required_toolkit) if verify != "onnx-only" else "none"
    src = load_onnx(onnx_path)
    try:
        cut = ms.find_cut(src)
        encoder = ms.encoder_graph(src, cut)
    except mg.GraphError as exc:
        raise ConvertError(f"{onnx_path}: {exc}") from None
    if frames and len(frames) != len(tokens):
        raise ConvertError("give one --frames per --tokens (or none: 9.375 frames per token)")
    waves = Waves(vocos) if vocos else None
    out_dir.mkdir(parents=True, exist_ok=True)
    enc_path = out_dir / ms.ENCODER_FILE
    _save(encoder, enc_path)
    enc = _session(enc_path)
    probe_rw = mg.Rewrite(tokens=0, frames=0, vocab=mg.vocab_size(src),
                          pad_id=int({p.key: p.value for p in src.metadata_props}.get("pad_id", 0)))
    reports = []
    for i, k in enumerate(tokens):
        if k < 4:
            raise ConvertError(f"--tokens {k}: a bucket needs at least 4 tokens")
        w = frames[i] if frames else window_for(enc, probe_rw, k)
        t0 = time.monotonic()
        try:
            fixed, rw = ms.decoder_graph(src, cut, k, w, fuse_qkv=fuse_qkv)
        except mg.GraphError as exc:
            raise ConvertError(f"{onnx_path}: {exc}") from None
        name = f"matcha-t{k}"
        fixed_path = out_dir / f"{name}.onnx"
        _save(fixed, fixed_path)
        split_s = round(time.monotonic() - t0, 1)
        snr_a, frames_ok, probes_a = check_matcha_original(src, enc, _session(fixed_path), rw)
        cases = matcha_npu_cases(enc, fixed_path, rw, waves) if verify not in ("none", "onnx-only") else []
        fixed = _io_only(fixed)  # the weights are on disk now; keep what the sidecar needs
        report = {"model": "matcha", "out": str(out_dir / f"{name}.rknn"), "tokens": k, "frames": w,
                  "encoder": str(enc_path), "snr_vs_original_db": snr_a, "snr_db": None, "wave_snr_db": None,
                  "true_frames_ok": frames_ok, "split_s": split_s, "build_s": None, "peak_rss_mb": None,
                  "toolkit_version": version, "target": target, "verify": "none", "toolkit_errors": None,
                  "rewrite": rw.replaced, "probes_original": probes_a}

        def check_b(npu: Npu, report: dict = report, cases: list = cases) -> None:
            snr_b, wave_b, probes_b = check_matcha_npu(npu, cases, waves)
            report.update(snr_db=snr_b, wave_snr_db=wave_b, probes_npu=probes_b)

        if keep is None and verify != "onnx-only":
            _build_apart(fixed_path, report, target, verify, cases, waves)
        else:
            _build_and_check(fixed_path, report, target, verify, check_b, keep)
        report["ok"] = _matcha_ok(report)
        _write_sidecar(out_dir / f"{name}.json", fixed, report, rw.tokens, w)
        if emit:
            emit(report)
        reports.append(report)
    return reports


def _build_apart(fixed_path: Path, report: dict, target: str, verify: str, cases: list[dict],
                 waves: Waves | None) -> None:
    """Build and run check B in a fresh process that holds nothing but the toolkit and the decoder
    (``npu_voice.py build``): the toolkit's build and its simulator are the peak, and this process's
    onnxruntime sessions and graphs must not add to it. Both peaks go into the report."""
    import subprocess

    release_memory()
    with tempfile.TemporaryDirectory() as tmp:
        feeds = Path(tmp) / "cases.npz"
        np.savez(feeds, **{f"c{i}_{j}": a for i, c in enumerate(cases) for j, a in enumerate(c["feeds"])})
        result = Path(tmp) / "result.json"
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "build", str(fixed_path), target,
                               verify, str(feeds), str(result), str(len(cases)), str(len(cases[0]["feeds"]) if cases else 0)])
        if proc.returncode != 0 or not result.is_file():
            raise ConvertError(f"rknn-toolkit2 could not build {fixed_path} (exit {proc.returncode}; see its log above)")
        got = json.loads(result.read_text())
        outs = np.load(Path(tmp) / "outputs.npz") if got["verify"] != "none" else None
        report.update(build_s=got["build_s"], toolkit_errors=got["toolkit_errors"], verify=got["verify"])
        if outs is not None:
            class Answers:  # check B's NPU: the child's answers, in case order
                def __init__(self) -> None:
                    self.i = 0

                def run(self, feeds: list[np.ndarray]) -> list[np.ndarray]:
                    self.i += 1
                    return [outs[f"out{self.i - 1}"]]

            snr_b, wave_b, probes_b = check_matcha_npu(Answers(), cases, waves)  # type: ignore[arg-type]
            report.update(snr_db=snr_b, wave_snr_db=wave_b, probes_npu=probes_b)
    report["peak_rss_build_mb"] = got["peak_rss_mb"]
    report["peak_rss_prepare_mb"] = peak_rss_mb()
    report["peak_rss_mb"] = max(got["peak_rss_mb"], report["peak_rss_prepare_mb"])


def _build_child(argv: list[str]) -> int:
    """``npu_voice.py build FIXED.onnx TARGET VERIFY CASES.npz RESULT.json N_CASES N_INPUTS``."""
    fixed, target, verify, feeds_path, result = Path(argv[0]), argv[1], argv[2], Path(argv[3]), Path(argv[4])
    n_cases, n_inputs = int(argv[5]), int(argv[6])
    with CapturedLog() as captured:
        npu = Npu(fixed, target)
    errors = toolkit_errors(captured.text)
    npu.export(fixed.with_suffix(".rknn"))
    mode = npu.start(verify)
    if mode != "none":
        feeds = np.load(feeds_path)
        outs = {f"out{i}": npu.run([feeds[f"c{i}_{j}"] for j in range(n_inputs)])[0] for i in range(n_cases)}
        np.savez(result.parent / "outputs.npz", **outs)
    npu.release()
    result.write_text(json.dumps({"build_s": npu.build_s, "toolkit_errors": errors, "verify": mode,
                                  "peak_rss_mb": peak_rss_mb()}))
    return 0


def _build_and_check(fixed_path: Path, report: dict, target: str, verify: str,
                     check_b: Callable[[Npu], None], keep: list | None) -> None:
    """Build ``NAME.rknn`` from the fixed graph, run check B where possible, record time and memory.
    ``keep`` collects the builds for --serve (the simulator runs only what this process built)."""
    if verify != "onnx-only":
        release_memory()
        with CapturedLog() as captured:
            npu = Npu(fixed_path, target)
        report["toolkit_errors"] = toolkit_errors(captured.text)
        npu.export(fixed_path.with_suffix(".rknn"))
        report["build_s"] = npu.build_s
        report["verify"] = npu.start(verify)
        if report["verify"] != "none":
            check_b(npu)
        if keep is None:
            npu.release()
        else:
            keep.append(npu)
    report["peak_rss_mb"] = peak_rss_mb()


def toolkit_gate(r: dict) -> bool:
    """The toolkit's error lines read: ``toolkit_refused`` / ``toolkit_warnings`` into the report;
    False when a line refuses the build (npu_toolkit.error_verdict)."""
    refuse, warn = error_verdict(r.get("toolkit_errors"))
    r["toolkit_refused"], r["toolkit_warnings"] = refuse, warn
    return not refuse


def _matcha_ok(r: dict) -> bool:
    ok = toolkit_gate(r) and r["snr_vs_original_db"] >= ORIGINAL_DB and r["true_frames_ok"]
    if r["verify"] != "none":
        ok = ok and r["snr_db"] is not None and r["snr_db"] >= MATCHA_SIM_DB
        ok = ok and (r["wave_snr_db"] is None or r["wave_snr_db"] >= WAVE_SIM_DB)
    return bool(ok)


def _write_sidecar(path: Path, model: Any, report: dict, tokens: int | None, frames: int) -> None:
    side = {"model": report["model"], "frames": frames, **_io(model),
            "metadata": {p.key: p.value for p in model.metadata_props},
            **{k: report[k] for k in ("toolkit_version", "target", "snr_vs_original_db", "snr_db",
                                       "true_frames_ok", "build_s", "peak_rss_mb", "verify", "ok", "toolkit_errors",
                                       "toolkit_refused", "toolkit_warnings")
               if k in report}}
    if report.get("encoder"):
        side["encoder"] = Path(report["encoder"]).name
    if tokens is not None:
        side["tokens"] = tokens
    path.write_text(json.dumps(side, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "build":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    raise SystemExit(_build_child(sys.argv[2:]))
