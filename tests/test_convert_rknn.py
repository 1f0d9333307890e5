"""models/convert_rknn.py: the float copy here, the RK3576 build + simulator in the toolkit venv."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rkvoice.config import ROOT, load_config

onnx = pytest.importorskip("onnx", reason="the float copy is written with the onnx package")

sys.path.insert(0, str(ROOT / "models"))  # the converter's modules are scripts beside each other
import convert_rknn  # noqa: E402
import rknn_graphs  # noqa: E402

TOOLKIT_PY = Path(os.environ.get("RKNN_TOOLKIT_VENV", "/tmp/rknn-tk-venv")) / "bin" / "python"


def _voice():
    d = load_config().models.path / "portable" / "fastspeech2"
    if not (d / "mb_melgan.onnx").exists() or not (d / "fastspeech2.onnx").exists():
        pytest.skip("portable voice not installed (./install.sh): models/portable/fastspeech2/*.onnx")
    return d


@pytest.fixture(scope="module")
def real_mel():
    """A postnet mel [1, T, 80] from the portable FastSpeech2 for a real sentence."""
    _voice()
    from rkvoice.tts.fastspeech2 import FastSpeech2Tts

    tts = FastSpeech2Tts(load_config())
    tts.load()
    return tts._mel(tts._id_pieces("今天天气不错，我们出去走走吧。")[0], 0, 1.0)


def test_float_copy_drops_the_output_int8_step(tmp_path, real_mel):
    import onnxruntime as ort

    src = _voice() / "mb_melgan.onnx"
    dst = tmp_path / "float.onnx"
    assert rknn_graphs.strip_output_quantization(src, dst) == 3
    ops = {n.op_type for n in onnx.load(str(dst)).graph.node}
    assert not ops & {"QuantizeLinear", "DequantizeLinear"}
    ref = ort.InferenceSession(str(src)).run(None, {"mels": real_mel})[0]
    new = ort.InferenceSession(str(dst)).run(None, {"mels": real_mel})[0]
    assert new.shape == ref.shape == (1, real_mel.shape[1] * 300, 1)
    # the only difference is the removed 1/128 quantisation of the band signals (before PQMF synthesis)
    assert 20 < convert_rknn.snr_db(new, ref) < 40


def test_snr_db():
    a = np.sin(np.arange(1000))
    assert convert_rknn.snr_db(a, a) == float("inf")
    assert abs(convert_rknn.snr_db(a * 1.1, a) - 20.0) < 1e-9


@pytest.mark.skipif(not TOOLKIT_PY.exists(),
                    reason=f"rknn-toolkit2 venv not found at {TOOLKIT_PY.parent.parent}: create it with "
                    "`python3 models/convert_rknn.py setup-venv --python python3.11` (1.5 GB)")
def test_vocoder_builds_for_rk3576_and_simulator_matches_onnxruntime(tmp_path, real_mel):
    np.save(tmp_path / "mel.npy", real_mel)
    out = tmp_path / "mb_melgan-50.rknn"
    t0 = time.monotonic()
    res = subprocess.run([str(TOOLKIT_PY), str(ROOT / "models" / "convert_rknn.py"), "vocoder",
                          "--onnx", str(_voice() / "mb_melgan.onnx"), "--out", str(out), "--frames", "50",
                          "--mel", str(tmp_path / "mel.npy"), "--json"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("{")))
    assert out.stat().st_size == report["rknn_bytes"] > 1_000_000
    assert report["stripped_qdq_nodes"] == 3
    assert report["snr_db"]["50"] >= 40.0, report
    print(f"\nconvert+simulate: {time.monotonic() - t0:.1f} s, SNR {report['snr_db']['50']} dB")


@pytest.fixture(scope="module")
def real_ids():
    _voice()
    from rkvoice.tts.fastspeech2 import FastSpeech2Tts

    tts = FastSpeech2Tts(load_config())
    tts.load()
    return np.asarray([tts._id_pieces("今天天气不错，我们出去走走吧。")[0]])


def test_fastspeech2_split_at_length_regulator_reproduces_the_whole_graph(tmp_path, real_ids):
    import onnxruntime as ort

    src = _voice() / "fastspeech2.onnx"
    report = rknn_graphs.split_fastspeech2(src, tmp_path)
    assert report["encoder_layer_norms_fused"] == 12 and report["decoder_layer_norms_fused"] == 6
    assert report["encoder_mask_constants"] == report["decoder_mask_constants"] == 1
    dec = onnx.load(str(tmp_path / "fastspeech2-decoder.onnx"))
    assert "GlobalAveragePool" not in {n.op_type for n in dec.graph.node}
    feeds = {"input_ids": real_ids.astype(np.int32), "speaker_ids": np.array([0], np.int32),
             "speed_ratios": np.array([1.0], np.float32), "f0_ratios": np.array([1.0], np.float32),
             "energy_ratios": np.array([1.0], np.float32)}
    whole = ort.InferenceSession(str(src)).run(["Identity_1"], feeds)[0]
    enc = ort.InferenceSession(str(tmp_path / "fastspeech2-encoder.onnx"))
    names = {i.name for i in enc.get_inputs()}
    hidden, durations = enc.run(None, {k: v for k, v in feeds.items() if k in names})
    x, mask, total = rknn_graphs.regulate(hidden, durations)
    mel = ort.InferenceSession(str(tmp_path / "fastspeech2-decoder.onnx")).run(None, {"t800": x, "t715": mask})[0]
    assert mel.shape == whole.shape and total == whole.shape[1]
    assert convert_rknn.snr_db(mel, whole) > 50


def test_regulate_repeats_tokens_and_pads_with_mask():
    h = np.arange(3 * 2, dtype=np.float32).reshape(1, 3, 2)
    x, mask, total = rknn_graphs.regulate(h, np.array([[2, 0, 3]]))
    assert total == 5 and x.shape == (1, 5, 2) and mask.tolist() == [[1] * 5]
    np.testing.assert_array_equal(x[0, :, 0], [0, 0, 4, 4, 4])
    x, mask, total = rknn_graphs.regulate(h, np.array([[2, 0, 3]]), frames=8)
    assert x.shape == (1, 8, 2) and mask.tolist() == [[1] * 5 + [0] * 3] and (x[0, 5:] == 0).all()
    with pytest.raises(ValueError, match="do not fit"):
        rknn_graphs.regulate(h, np.array([[2, 0, 3]]), frames=4)
    with pytest.raises(ValueError, match=r"hidden \[1, N, D\]"):
        rknn_graphs.regulate(h, np.array([[1, 1]]))


@pytest.mark.skipif(not TOOLKIT_PY.exists(),
                    reason=f"rknn-toolkit2 venv not found at {TOOLKIT_PY.parent.parent}: create it with "
                    "`python3 models/convert_rknn.py setup-venv --python python3.11` (1.5 GB)")
def test_fastspeech2_decoder_builds_and_simulates_near_onnxruntime(tmp_path, real_ids):
    np.save(tmp_path / "ids.npy", real_ids)
    res = subprocess.run([str(TOOLKIT_PY), str(ROOT / "models" / "convert_rknn.py"), "fastspeech2",
                          "--onnx", str(_voice() / "fastspeech2.onnx"), "--out-dir", str(tmp_path),
                          "--frames", "256", "--ids", str(tmp_path / "ids.npy"), "--json"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("{")))
    snr = report["snr_db"]["256"]
    # the NPU decoder vs onnxruntime on the same padded input, and vs the unsplit CPU graph
    assert snr["vs_onnxruntime_padded"] >= 40 and snr["vs_whole_graph"] >= 35, report
