import platform
import sys
import types
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package builds the tiny test graphs")
from onnx import TensorProto, helper  # noqa: E402

from rkvoice.config import load_config  # noqa: E402
from rkvoice.errors import RkvoiceError  # noqa: E402
from rkvoice.npu import runtime  # noqa: E402
from rkvoice.npu.chunked_vocoder import ChunkedVocoder  # noqa: E402
from rkvoice.npu.runtime import OnnxModel, RknnModel, core_mask_value, open_model  # noqa: E402


def _tiny(path: Path) -> Path:
    """y = float(ids) * scale + 1 ; ids int64 [1, N], scale float [1]."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "N"])
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "N"])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "scale"], ["m"]),
             helper.make_node("Add", ["m", "one"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [ids, scale], [y], initializer=[one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"n_fft": "1024", "hop_length": "256"})
    onnx.save(model, str(path))
    return path


def test_onnx_runs_in_input_order_and_casts_dtypes(tmp_path):
    m = open_model(_tiny(tmp_path / "t.onnx"), threads=1)
    assert isinstance(m, OnnxModel)
    m.load()
    assert [s.name for s in m.input_specs()] == ["ids", "scale"]
    assert m.metadata["hop_length"] == "256"
    # int32 ids and a float64 scale are cast to the graph's declared types
    (y,) = m.run([np.array([[1, 2, 3]], dtype=np.int32), np.array([2.0])])
    np.testing.assert_allclose(y, [[3.0, 5.0, 7.0]])
    assert "onnxruntime" in m.describe()


def test_onnx_wrong_input_count_names_inputs(tmp_path):
    m = OnnxModel(_tiny(tmp_path / "t.onnx"))
    m.load()
    with pytest.raises(RkvoiceError, match="ids, scale"):
        m.run([np.zeros((1, 2), np.int64)])


def test_onnx_run_before_load_is_clear(tmp_path):
    with pytest.raises(RkvoiceError, match="load"):
        OnnxModel(_tiny(tmp_path / "t.onnx")).run([])


def test_missing_file_names_it(tmp_path):
    with pytest.raises(RkvoiceError, match="vocoder model file .*nope.onnx not found") as e:
        OnnxModel(tmp_path / "nope.onnx", what="vocoder").load()
    assert e.value.code == "missing-model"


def test_corrupt_onnx_names_file_and_runtime_version(tmp_path):
    import onnxruntime as ort

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model" * 10)
    with pytest.raises(RkvoiceError) as e:
        OnnxModel(bad).load()
    assert str(bad) in str(e.value) and f"onnxruntime {ort.__version__}" in str(e.value)
    assert e.value.code == "load-failed"


def test_open_model_rejects_unknown_suffix(tmp_path):
    assert isinstance(open_model(tmp_path / "m.rknn"), RknnModel)
    with pytest.raises(RkvoiceError, match=r"\.rknn .* or \.onnx"):
        open_model(tmp_path / "m.tflite")


# --- RKNNLite wrapper logic, against a scripted stand-in for rknnlite.api (no NPU here) ---

class _FakeLite:
    NPU_CORE_AUTO, NPU_CORE_0, NPU_CORE_1, NPU_CORE_0_1 = 0, 1, 2, 3
    script: dict = {}
    instances: list = []

    def __init__(self, verbose=False):
        self.calls = []
        self.released = False
        _FakeLite.instances.append(self)

    def load_rknn(self, path):
        self.calls.append(("load_rknn", path))
        return self.script.get("load", 0)

    def init_runtime(self, core_mask=None):
        self.calls.append(("init_runtime", core_mask))
        return self.script.get("init", 0)

    def inference(self, inputs):
        self.calls.append(("inference", [a.shape for a in inputs]))
        return None if self.script.get("fail_run") else [inputs[0] * 2]

    def release(self):
        self.released = True


@pytest.fixture
def fake_lite(monkeypatch, tmp_path):
    mod = types.ModuleType("rknnlite.api")
    mod.RKNNLite = _FakeLite
    pkg = types.ModuleType("rknnlite")
    pkg.api = mod
    monkeypatch.setitem(sys.modules, "rknnlite", pkg)
    monkeypatch.setitem(sys.modules, "rknnlite.api", mod)
    monkeypatch.setattr(runtime, "package_version", lambda d: "2.3.2")
    monkeypatch.setattr(runtime, "librknnrt_version", lambda: (Path("/usr/lib/librknnrt.so"), "2.3.0"))
    _FakeLite.script = {}
    _FakeLite.instances = []
    f = tmp_path / "m.rknn"
    f.write_bytes(b"RKNN")
    return f


def test_rknn_load_init_with_core_mask_and_run(fake_lite):
    m = RknnModel(fake_lite, core_mask="0_1")
    m.load()
    (out,) = m.run([np.ones((1, 4), np.float32)])
    np.testing.assert_allclose(out, 2.0)
    lite = _FakeLite.instances[-1]
    assert lite.calls[:2] == [("load_rknn", str(fake_lite)), ("init_runtime", _FakeLite.NPU_CORE_0_1)]
    m.close()
    assert lite.released


def test_rknn_init_failure_names_file_and_versions(fake_lite):
    _FakeLite.script = {"init": -1}
    with pytest.raises(RkvoiceError) as e:
        RknnModel(fake_lite).load()
    msg = str(e.value)
    assert str(fake_lite) in msg and "rknn-toolkit-lite2 2.3.2" in msg and "librknnrt 2.3.0" in msg
    assert _FakeLite.instances[-1].released


def test_rknn_load_failure_and_empty_inference(fake_lite):
    _FakeLite.script = {"load": -1}
    with pytest.raises(RkvoiceError, match="load_rknn returned -1"):
        RknnModel(fake_lite).load()
    _FakeLite.script = {"fail_run": True}
    m = RknnModel(fake_lite)
    m.load()
    with pytest.raises(RkvoiceError, match="returned nothing"):
        m.run([np.zeros(1)])


def test_core_mask_values():
    assert core_mask_value(_FakeLite, "auto") == _FakeLite.NPU_CORE_AUTO
    assert core_mask_value(_FakeLite, "1") == _FakeLite.NPU_CORE_1
    with pytest.raises(RkvoiceError, match="choose one of"):
        core_mask_value(_FakeLite, "3")
    with pytest.raises(RkvoiceError, match="cores 0 and 1"):
        core_mask_value(_FakeLite, "0_1_2")


def test_rknn_without_toolkit_lite_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "rknnlite", None)
    monkeypatch.setitem(sys.modules, "rknnlite.api", None)
    monkeypatch.setattr(runtime, "librknnrt_version", lambda: (Path("/usr/lib/librknnrt.so"), "2.3.2"))
    f = tmp_path / "m.rknn"
    f.write_bytes(b"x")
    with pytest.raises(RkvoiceError, match=r"rknn-toolkit-lite2==2\.3\.2"):
        RknnModel(f).load()


def _on_board() -> bool:
    return platform.machine() == "aarch64" and Path("/usr/lib/librknnrt.so").exists()


@pytest.mark.skipif(not _on_board(), reason="RKNNLite needs an RK3576 board (aarch64 + /usr/lib/librknnrt.so); "
                    "this machine has no NPU")
def test_real_rknnlite_loads_installed_board_model():
    from rkvoice.tts.matcha_engine import MatchaTts

    files = MatchaTts(load_config()).files()
    path = next((p for k, p in files.items() if k.startswith("vocoder") and p.suffix == ".rknn"), None)
    if path is None or not path.exists():
        pytest.skip(f"no Vocos .rknn bucket installed ({files.get('vocoder')}; ./install.sh --profile board)")
    frames = int(path.stem.rsplit("-f", 1)[1])
    m = RknnModel(path, core_mask="auto")
    m.load()
    outs = m.run([np.zeros((1, 80, frames), np.float32)])
    assert [o.shape for o in outs] == [(1, 513, frames)] * 3
    m.close()


# --- ChunkedVocoder: a fixed-length (NPU) vocoder over mels of any length ---


class _Echo:
    """A fixed-length 'vocoder' whose output sample k*hop+j is the window's frame k value (+ j/hop)."""

    def __init__(self, frames, hop):
        self.frames, self.hop, self.shapes = frames, hop, []

    def run(self, inputs):
        (mel,) = inputs
        self.shapes.append(mel.shape)
        assert mel.shape[1] == self.frames
        v = mel[0, :, 0]
        return [(np.repeat(v, self.hop) + np.tile(np.arange(self.hop) / self.hop, self.frames))[None, :, None]]


@pytest.mark.parametrize("total", [1, 10, 26, 49, 50, 51, 100, 237])
def test_windows_cover_every_frame_once_in_order(total):
    echo = _Echo(50, 4)
    voc = ChunkedVocoder(echo, frames=50, context=12, hop=4)
    mel = np.zeros((1, total, 3), np.float32)
    mel[0, :, 0] = np.arange(total) + 1000
    out = voc(mel)
    expect = np.repeat(np.arange(total) + 1000, 4) + np.tile(np.arange(4) / 4, total)
    np.testing.assert_allclose(out, expect)
    assert all(s == (1, 50, 3) for s in echo.shapes)
    # every kept frame has its full context inside the mel whenever the mel allows it
    for start, k0, k1 in voc.windows(total):
        if total >= 50:
            assert 0 <= start and start + 50 <= total
            assert k0 - start >= min(12, k0) and start + 50 - k1 >= min(12, total - k1)


def test_bad_shape():
    with pytest.raises(RkvoiceError, match=r"\[1, T, C\]"):
        ChunkedVocoder(_Echo(50, 1))(np.zeros((236, 80)))


def test_real_mb_melgan_in_50_frame_windows_matches_whole_run():
    cfg = load_config()
    d = cfg.models.path / "portable" / "fastspeech2"
    if not (d / "mb_melgan.onnx").exists() or not (d / "fastspeech2.onnx").exists():
        pytest.skip("portable voice not installed (./install.sh): models/portable/fastspeech2/*.onnx")
    from rkvoice.tts.fastspeech2 import FastSpeech2Tts

    tts = FastSpeech2Tts(cfg)
    tts.load()
    mel = tts._mel(tts._id_pieces("今天天气不错，我们出去走走吧。")[0], 0, 1.0)
    voc = OnnxModel(d / "mb_melgan.onnx")
    voc.load()
    whole = voc.run([mel])[0].reshape(-1)
    snr = {}
    for ctx in (12, 16):
        out = ChunkedVocoder(voc, frames=50, context=ctx, hop=300)(mel)
        assert out.shape == whole.shape
        snr[ctx] = 10 * np.log10(np.sum(whole ** 2) / np.sum((out - whole) ** 2))
    assert snr[12] > 30 and snr[16] > 40, snr


# --- what a model declares: one spelling of element types, specs from onnxruntime and RKNNLite ---

def test_dtype_names_and_tensor_specs():
    from rkvoice.npu.runtime import TensorSpec, dtype_name

    assert {dtype_name(x) for x in ("tensor(int64)", "INT64", np.int64, "int64")} == {"int64"}
    assert {dtype_name(x) for x in ("tensor(float)", "float", np.float32, "FP32")} == {"float32"}
    assert dtype_name("tensor(float16)") == "float16"
    s = TensorSpec.from_json({"name": "noise", "shape": [1, 80, 600], "dtype": "float32"})
    assert s.fixed and s.size == 48000 and s.describe() == "noise float32 [1, 80, 600]"
    d = TensorSpec.from_json({"name": "x", "shape": [1, "N"], "dtype": "int64"})
    assert not d.fixed and d.size is None and d.shape == (1, "N")


def test_onnx_specs_and_rknn_query(tmp_path, monkeypatch):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["mels"], ["mag"])], "g",
                          [helper.make_tensor_value_info("mels", TensorProto.FLOAT, [1, 80, "T"])],
                          [helper.make_tensor_value_info("mag", TensorProto.FLOAT, [1, 80, "T"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "v.onnx"))
    om = OnnxModel(tmp_path / "v.onnx")
    om.load()
    (spec,) = om.input_specs()
    assert (spec.name, spec.shape, spec.dtype) == ("mels", (1, 80, "T"), "float32")
    assert [o.name for o in om.output_specs()] == ["mag"]

    class Attr:
        def __init__(self, name, dims):
            self.name, self.n_dims, self.dims, self.type = name.encode(), len(dims), dims + [0] * 4, "float16"

    class Runtime:
        def get_in_out_num(self):
            return 1, 1

        def get_tensor_attr(self, index, is_output=False):
            return Attr("mag" if is_output else "mels", [1, 80, 600])

    rm = RknnModel(tmp_path / "v.rknn")
    rm._rknn = type("Lite", (), {"rknn_runtime": Runtime()})()
    ins, outs = rm.query_io()
    assert (ins[0].name, ins[0].shape, ins[0].dtype, outs[0].name) == ("mels", (1, 80, 600), "float16", "mag")
    rm._rknn = type("OldLite", (), {"rknn_runtime": object()})()  # no query in this RKNNLite
    assert rm.query_io() is None
