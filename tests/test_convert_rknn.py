"""models/convert_rknn.py: the float copy here, the RK3576 build + simulator in the toolkit venv."""

import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from rkvoice.config import ROOT, load_config

onnx = pytest.importorskip("onnx", reason="the float copy is written with the onnx package")

spec = importlib.util.spec_from_file_location("convert_rknn", ROOT / "models" / "convert_rknn.py")
convert_rknn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convert_rknn)

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
    assert convert_rknn.strip_output_quantization(src, dst) == 3
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
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert out.stat().st_size == report["rknn_bytes"] > 1_000_000
    assert report["stripped_qdq_nodes"] == 3
    assert report["snr_db"]["50"] >= 40.0, report
    print(f"\nconvert+simulate: {time.monotonic() - t0:.1f} s, SNR {report['snr_db']['50']} dB")
