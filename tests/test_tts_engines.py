"""Contract of every TTS engine with its real installed model; registry and auto selection;
missing/corrupt model files; the Piper preparation CLI."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.prepare_piper import with_onnx_metadata
from rkvoice.config import ROOT, Config, load_config
from rkvoice.errors import RkvoiceError
from rkvoice.needs import installed
from rkvoice.tts import fastspeech2, vits
from rkvoice.tts.mixed import MixedTts
from rkvoice.tts.registry import (
    TTS,
    choose_engine,
    create_tts,
    engine_languages,
    text_language,
)

CFG = load_config()
ZH = "今天天气不错，我们出去走走吧。"  # 14 syllables
EN = "The weather is nice today, let us go for a walk."  # 11 words


def cfg_with_models(models_dir: Path, **tts: object) -> Config:
    over: list[dict] = [{"models": {"dir": str(models_dir)}}]
    if tts:
        over.append({"tts": dict(tts)})
    return load_config(overrides=over)


# --- engines under test: (engine, voice, language, text, plausible seconds per unit, units) ---

ENGINES = {
    "fastspeech2": dict(make=lambda: fastspeech2.FastSpeech2Tts(CFG), installed=installed(TTS.needs("fastspeech2", CFG)),
                        text=ZH, units=14, per_unit=(0.12, 0.45), rate=24000),
    "vits-piper-joe": dict(make=lambda: vits.VitsTts(CFG, "piper-joe"),
                           installed=vits.VOICES["piper-joe"].installed(CFG),
                           text=EN, units=11, per_unit=(0.15, 0.7), rate=22050),
    "vits-zh-aishell3": dict(make=lambda: vits.VitsTts(CFG, "vits-zh-aishell3"),
                             installed=vits.VOICES["vits-zh-aishell3"].installed(CFG),
                             text=ZH, units=14, per_unit=(0.12, 0.5), rate=None),
}
_loaded: dict[str, object] = {}


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest):  # noqa: ANN201
    spec = ENGINES[request.param]
    if not spec["installed"]:
        where = "the board profile (./install.sh --profile board)" if "aishell3" in request.param \
            else "./install.sh"
        pytest.skip(f"{request.param} model files not installed here; they come with {where}")
    if request.param not in _loaded:
        eng = spec["make"]()
        eng.load()
        _loaded[request.param] = eng
    return _loaded[request.param], spec


def duration(audio: np.ndarray, rate: int) -> float:
    return len(audio) / rate


def test_generate_contract(engine) -> None:  # noqa: ANN001
    eng, spec = engine
    audio, rate = eng.generate(spec["text"])
    assert rate == eng.sample_rate
    if spec["rate"]:
        assert rate == spec["rate"]
    assert isinstance(audio, np.ndarray) and audio.dtype == np.float32 and audio.ndim == 1
    assert np.all(np.isfinite(audio)) and np.max(np.abs(audio)) <= 1.0
    lo, hi = spec["per_unit"]
    assert lo * spec["units"] <= duration(audio, rate) <= hi * spec["units"]
    assert float(np.sqrt(np.mean(audio**2))) > 0.01  # speech, not silence


def test_speed_changes_duration(engine) -> None:  # noqa: ANN001
    eng, spec = engine
    normal = duration(*eng.generate(spec["text"]))
    fast = duration(*eng.generate(spec["text"], speed=2.0))
    slow = duration(*eng.generate(spec["text"], speed=0.5))
    assert fast < 0.75 * normal
    assert slow > 1.4 * normal


@pytest.mark.parametrize("text", ["", "   ", "。，！……"])
def test_unpronounceable_text_gives_no_samples(engine, text: str) -> None:  # noqa: ANN001
    eng, _ = engine
    audio, rate = eng.generate(text)
    assert audio.dtype == np.float32 and len(audio) == 0 and rate == eng.sample_rate


def test_bad_speed_and_speaker_are_clear_errors(engine) -> None:  # noqa: ANN001
    eng, spec = engine
    with pytest.raises(RkvoiceError, match="speed"):
        eng.generate(spec["text"], speed=0.0)
    with pytest.raises(RkvoiceError, match="sid 999"):
        eng.generate(spec["text"], sid=999)


def test_fastspeech2_emoji_only_is_empty_and_long_text_is_chunked() -> None:
    if not installed(TTS.needs("fastspeech2", CFG)):
        pytest.skip("fastspeech2 model files not installed (run ./install.sh)")
    eng = _loaded.get("fastspeech2") or fastspeech2.FastSpeech2Tts(CFG)
    if "fastspeech2" not in _loaded:
        eng.load()
        _loaded["fastspeech2"] = eng
    assert len(eng.generate("😀🎉")[0]) == 0
    pieces = eng._id_pieces(ZH * 12)  # ~170 syllables: more than one model call
    assert len(pieces) > 1 and all(len(p) <= fastspeech2.MAX_IDS for p in pieces)
    one_clause = "天" * 400  # no punctuation at all: cut into windows
    assert all(len(p) <= fastspeech2.MAX_IDS for p in eng._id_pieces(one_clause))


def test_generate_before_load_is_an_error() -> None:
    with pytest.raises(RkvoiceError, match="before load"):
        fastspeech2.FastSpeech2Tts(CFG).generate(ZH)
    with pytest.raises(RkvoiceError, match="before load"):
        vits.VitsTts(CFG, "piper-joe").generate(EN)


# --- missing and corrupt model files ------------------------------------------------------------


def _copy_fastspeech2(tmp: Path) -> Path:
    if not installed(TTS.needs("fastspeech2", CFG)):
        pytest.skip("fastspeech2 model files not installed (run ./install.sh)")
    dst = tmp / "portable" / "fastspeech2"
    shutil.copytree(fastspeech2.model_dir(CFG), dst)
    return dst


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("name", ["fastspeech2.onnx", "mb_melgan.onnx"])
def test_fastspeech2_truncated_model_is_named(tmp_path: Path, name: str) -> None:
    d = _copy_fastspeech2(tmp_path)
    _truncate(d / name)
    with pytest.raises(RkvoiceError) as err:
        fastspeech2.FastSpeech2Tts(cfg_with_models(tmp_path)).load()
    assert err.value.code == "corrupt-model"
    assert str(d / name) in str(err.value) and "./install.sh" in str(err.value)
    assert "\n" not in str(err.value)


def test_fastspeech2_missing_files_are_named(tmp_path: Path) -> None:
    d = _copy_fastspeech2(tmp_path)
    (d / "mb_melgan.onnx").unlink()
    with pytest.raises(RkvoiceError) as err:
        fastspeech2.FastSpeech2Tts(cfg_with_models(tmp_path)).load()
    assert err.value.code == "missing-model" and "mb_melgan.onnx" in str(err.value)
    (d / "baker_mapper.json").write_text('{"symbol_to_id": {', encoding="utf-8")
    with pytest.raises(RkvoiceError) as err:
        fastspeech2.FastSpeech2Tts(cfg_with_models(tmp_path)).load()
    assert err.value.code == "corrupt-model" and "baker_mapper.json" in str(err.value)
    shutil.rmtree(d)
    with pytest.raises(RkvoiceError, match="missing.*install.sh"):
        fastspeech2.FastSpeech2Tts(cfg_with_models(tmp_path)).load()


def _copy_piper(tmp: Path) -> Path:
    src = vits.VOICES["piper-joe"].dir(CFG)
    if not vits.VOICES["piper-joe"].installed(CFG):
        pytest.skip("piper-joe voice not installed (run ./install.sh)")
    dst = tmp / "portable" / "piper-joe"
    dst.mkdir(parents=True)
    shutil.copyfile(src / "tokens.txt", dst / "tokens.txt")
    return dst


def test_vits_truncated_model_is_named(tmp_path: Path) -> None:
    d = _copy_piper(tmp_path)
    src = vits.VOICES["piper-joe"].dir(CFG) / "model.onnx"
    with src.open("rb") as f:
        (d / "model.onnx").write_bytes(f.read(src.stat().st_size // 2))
    with pytest.raises(RkvoiceError) as err:
        vits.VitsTts(cfg_with_models(tmp_path), "piper-joe").load()
    assert err.value.code == "corrupt-model"
    assert str(d / "model.onnx") in str(err.value) and "./install.sh" in str(err.value)


def test_vits_model_without_sherpa_metadata_is_named(tmp_path: Path) -> None:
    d = _copy_piper(tmp_path)
    raw = with_onnx_metadata((vits.VOICES["piper-joe"].dir(CFG) / "model.onnx").read_bytes(), {})
    (d / "model.onnx").write_bytes(raw)
    with pytest.raises(RkvoiceError, match="lacks sherpa-onnx metadata"):
        vits.VitsTts(cfg_with_models(tmp_path), "piper-joe").load()


def test_vits_missing_tokens_is_named(tmp_path: Path) -> None:
    d = _copy_piper(tmp_path)
    (d / "model.onnx").symlink_to(vits.VOICES["piper-joe"].dir(CFG) / "model.onnx")
    (d / "tokens.txt").unlink()
    with pytest.raises(RkvoiceError) as err:
        vits.VitsTts(cfg_with_models(tmp_path), "piper-joe").load()
    assert err.value.code == "missing-model" and "tokens.txt" in str(err.value)


def test_board_voices_missing_say_how_to_get_them(tmp_path: Path) -> None:
    cfg = cfg_with_models(tmp_path)
    with pytest.raises(RkvoiceError, match=r"--profile board"):
        vits.VitsTts(cfg, "vits-zh-aishell3").load()
    with pytest.raises(RkvoiceError, match=r"--profile board"):
        create_tts(cfg, "matcha").load()


# --- registry and auto selection --------------------------------------------------------------


def test_registry_names_and_unknown_engine() -> None:
    assert TTS.names() == ["fastspeech2", "matcha", "vits"]
    with pytest.raises(RkvoiceError) as err:
        create_tts(CFG, "espeak")
    assert err.value.code == "unknown-backend"
    for choice in ("auto", "fastspeech2", "matcha", "vits"):
        assert choice in str(err.value)
    with pytest.raises(RkvoiceError, match="unknown vits voice"):
        vits.VitsTts(CFG, "nope")


def test_text_language() -> None:
    assert text_language("今天天气不错") == "zh"
    assert text_language("打开WiFi") == "zh"
    assert text_language("Hello there") == "en"
    assert text_language("") == "zh" and text_language("123。") == "zh"


def _link_models(tmp: Path, *dirs: str) -> Path:
    for rel in dirs:
        src = CFG.models.path / rel
        if not src.is_dir():
            pytest.skip(f"{src} not installed (run ./install.sh)")
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).symlink_to(src)
    return tmp


def test_auto_picks_by_language_and_installed_models(tmp_path: Path) -> None:
    cfg = cfg_with_models(_link_models(tmp_path, "portable/fastspeech2", "portable/piper-joe"))
    assert engine_languages(cfg) == {"fastspeech2": ("zh",), "vits": ("en",)}
    zh = create_tts(cfg, None, "今天天气不错")
    assert isinstance(zh, MixedTts) and zh.name == "fastspeech2" and zh.primary._acoustic is None  # not loaded
    en = create_tts(cfg, "auto", "Hello there")
    assert isinstance(en, MixedTts) and en.name == "vits" and en.voice.name == "piper-joe" and en.primary._tts is None


def test_auto_falls_back_with_a_warning_and_fails_when_nothing_is_installed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    only_zh = cfg_with_models(_link_models(tmp_path / "a", "portable/fastspeech2"))
    with caplog.at_level(logging.WARNING, logger="rkvoice.tts.registry"):
        assert choose_engine(only_zh, "Hello there") == ("fastspeech2", {})
    assert "no installed voice speaks en" in caplog.text
    empty = cfg_with_models(tmp_path / "b")
    with pytest.raises(RkvoiceError) as err:
        create_tts(empty, None, "你好")
    assert err.value.code == "no-voice" and "./install.sh" in str(err.value)


def test_explicit_vits_follows_the_text_language(tmp_path: Path) -> None:
    cfg = cfg_with_models(_link_models(tmp_path, "portable/piper-joe"))
    assert create_tts(cfg, "vits", "Hello").voice.name == "piper-joe"
    pinned = cfg_with_models(tmp_path, vits_voice="vits-zh-aishell3")
    assert create_tts(pinned, "vits", "Hello").voice.name == "vits-zh-aishell3"


# --- models/prepare_piper.py ---------------------------------------------------------------------


def _tiny_onnx() -> bytes:
    """A real four-node ONNX model shaped like Piper's VITS (z_p and a cast mask made by top-level
    nodes, a /flow/ node, a /dec/ node) carrying an old metadata entry the tool must replace."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    nodes = [helper.make_node("Cast", ["x"], ["mask"], name="/Cast_2", to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "x"], ["zp"], name="/Add"),
             helper.make_node("Mul", ["zp", "mask"], ["z"], name="/flow/Mul"),
             helper.make_node("Neg", ["z"], ["y"], name="/dec/Neg")]
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"old": "x"})
    return model.SerializeToString()


def _run_prepare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "models" / "prepare_piper.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_prepare_piper_writes_metadata_and_tokens_deterministically(tmp_path: Path) -> None:
    (tmp_path / "v.onnx").write_bytes(_tiny_onnx())
    config = {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}, "num_speakers": 1,
              "language": {"name_english": "English"}, "phoneme_type": "espeak",
              "phoneme_id_map": {"_": [0], "^": [1], "$": [2], " ": [3], "ə": [59], "a": [14]}}
    (tmp_path / "v.onnx.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    outs = []
    for n, flags in enumerate((("--json", "--out"), ("--config", "--out-dir"))):
        out = tmp_path / f"out{n}"
        proc = _run_prepare("--onnx", str(tmp_path / "v.onnx"), flags[0], str(tmp_path / "v.onnx.json"),
                            flags[1], str(out))
        assert proc.returncode == 0, proc.stderr
        outs.append(tuple((out / n).read_bytes() for n in ("model.onnx", "tokens.txt", "text.onnx", "flow.onnx",
                                                           "decoder.onnx")))
    assert outs[0] == outs[1]
    import onnxruntime as ort  # the split graphs chain back to the whole one: x -> (2x, x) -> 2x*x -> -2x*x

    x = np.asarray([3.0], dtype=np.float32)
    zp, mask = ort.InferenceSession(outs[0][2]).run(None, {"x": x})
    z = ort.InferenceSession(outs[0][3]).run(None, {"zp": zp, "mask": mask})[0]
    assert ort.InferenceSession(outs[0][4]).run(None, {"z": z})[0].tolist() == [-18.0]
    meta = vits.read_onnx_metadata(tmp_path / "out0" / "model.onnx")
    assert meta["comment"] == "piper" and meta["model_type"] == "vits" and meta["voice"] == "en-us"
    assert meta["sample_rate"] == "22050" and meta["n_speakers"] == "1" and "old" not in meta
    assert outs[0][1].decode("utf-8") == "_ 0\n^ 1\n$ 2\n  3\na 14\nə 59\n"


def test_prepare_piper_rejects_truncated_input_without_output(tmp_path: Path) -> None:
    (tmp_path / "v.onnx").write_bytes(_tiny_onnx()[:-3])
    (tmp_path / "v.onnx.json").write_text(json.dumps({"audio": {"sample_rate": 22050},
                                                      "espeak": {"voice": "en-us"},
                                                      "phoneme_id_map": {"_": [0]}}))
    proc = _run_prepare("--onnx", str(tmp_path / "v.onnx"), "--json", str(tmp_path / "v.onnx.json"),
                        "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and "not a complete ONNX model" in proc.stderr
    assert not (tmp_path / "out" / "model.onnx").exists()


# --- models/convert_tflite.py canonical form ------------------------------------------------------


def _load_convert_module():  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location("convert_tflite", ROOT / "models" / "convert_tflite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _graph(names: dict[str, str], swap: bool, dim: str):  # noqa: ANN202
    pytest.importorskip("onnx", reason="onnx (dev requirement) builds the test graphs")
    from onnx import TensorProto, helper, numpy_helper

    c1 = numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), names["c1"])
    c2 = numpy_helper.from_array(np.full((1, 4), 3.0, np.float32), names["c2"])
    add = helper.make_node("Add", ["x", names["c1"]], [names["a"]], name=names["n1"])
    mul = helper.make_node("Mul", ["x", names["c2"]], [names["b"]], name=names["n2"])
    out = helper.make_node("Sub", [names["a"], names["b"]], ["y"], name=names["n3"])
    nodes = [mul, add, out] if swap else [add, mul, out]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4])],
        initializer=[c2, c1] if swap else [c1, c2],
        doc_string=f"converted from /some/path/{dim}",
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_convert_canonical_form_is_name_and_order_independent() -> None:
    conv = _load_convert_module()
    first = _graph(dict(c1="const__12", c2="const_fold_opt__7", a="add__3:0", b="mul__9", n1="Add__1",
                        n2="Mul__2", n3="Sub"), swap=False, dim="unk__100")
    second = _graph(dict(c1="const_fold__99", c2="const__5", a="t__77", b="u__78", n1="x__1",
                         n2="y__2", n3="z__3"), swap=True, dim="unk__200")
    a = conv.canonicalize(first).SerializeToString(deterministic=True)
    b = conv.canonicalize(second).SerializeToString(deterministic=True)
    assert a == b
    import onnxruntime as ort

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = ort.InferenceSession(a, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(y, (x + 2) - (x * 3))


def test_convert_cli_names_missing_inputs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "models" / "convert_tflite.py"), "--src", str(tmp_path),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "fastspeech2_quan.tflite" in proc.stderr and "mb_melgan.tflite" in proc.stderr
    assert not (tmp_path / "out").exists()


# --- intelligibility: an independent ASR hears the words -----------------------------------------


@pytest.fixture(scope="module")
def whisper():  # noqa: ANN201
    fw = pytest.importorskip("faster_whisper", reason="faster-whisper (portable ASR) not installed")
    model_dir = CFG.models.path / "portable" / "whisper-base"
    if not (model_dir / "model.bin").is_file():
        pytest.skip(f"{model_dir} not installed (run ./install.sh)")
    return fw.WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=2)


def _transcribe(model, audio: np.ndarray, rate: int, lang: str) -> str:  # noqa: ANN001
    import soxr

    prompt = "以下是普通话的句子。" if lang == "zh" else None
    segments, _ = model.transcribe(soxr.resample(audio, rate, 16000), language=lang, beam_size=1,
                                   initial_prompt=prompt)
    return "".join(s.text for s in segments)


@pytest.mark.parametrize("name", ["fastspeech2", "vits-piper-joe"])
def test_asr_hears_the_text(whisper, name: str) -> None:  # noqa: ANN001
    from tests.support import cer

    spec = ENGINES[name]
    if not spec["installed"]:
        pytest.skip(f"{name} model files not installed (run ./install.sh)")
    if name not in _loaded:
        eng = spec["make"]()
        eng.load()
        _loaded[name] = eng
    eng = _loaded[name]
    lang = eng.languages[0]
    text = "北京的冬天很冷，但是夏天非常热。" if lang == "zh" else "Remember to bring water and a hat."
    heard = _transcribe(whisper, *eng.generate(text), lang)
    if lang == "zh":
        assert cer(text, heard) <= 0.2, heard
    else:
        # VITS draws fresh noise each call, so a word is sometimes misheard ("hat" -> "head"): like
        # the CER bound above, allow one of the four content words to be missed, never two.
        words = set(re.findall(r"[a-z]+", heard.lower()))
        assert len({"remember", "bring", "water", "hat"} & words) >= 3, heard
