"""The fastspeech2 voice's board configuration: its MB-MelGAN vocoder through rkvoice.npu.runtime.

Here (x86, no NPU) the fixed-window path runs the portable mb_melgan.onnx through the same
runtime interface, and the RKNNLite path runs against a scripted stand-in for rknnlite.api (the
one from tests/test_npu_runtime.py) whose inference computes the window with onnxruntime. Only
the real NPU call is board-only. Also: the per-profile silero path and what --check reports.
"""

from __future__ import annotations

import platform
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rkvoice.board import versions
from rkvoice.cli import check
from rkvoice.config import DEFAULT_CONFIG, ROOT, Config, ModelsConfig, TtsConfig, load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.hear.vad import vad_model_path
from rkvoice.needs import Probe, installed, missing
from rkvoice.npu import runtime
from rkvoice.tts import fastspeech2
from rkvoice.tts.fastspeech2 import FastSpeech2Tts
from rkvoice.tts.registry import TTS

BOARD_CONFIG = ROOT / "config.board.yaml"
PORTABLE = load_config(files=[DEFAULT_CONFIG])
FS2_DIR = PORTABLE.models.path / "portable" / "fastspeech2"
TEXTS = ("今天天气不错，我们出去走走吧。", "北京时间下午三点二十分，明天有小雨，最高气温二十五度，出门记得带伞。")
MIN_SNR_DB = 43.0
"""Fixed 50-frame windows with 16 frames of context vs one whole-mel run of the same ONNX
vocoder, measured 46.6-47.6 dB on these texts (context 12, the earlier default: ~34.5 dB)."""


def _snr_db(test: np.ndarray, ref: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / np.sum((test.astype(np.float64) - ref) ** 2)))


def _need_voice() -> None:
    names = fastspeech2.FILES.values()
    if not all((FS2_DIR / n).is_file() for n in names):
        pytest.skip(f"portable voice not installed (./install.sh): {FS2_DIR}/{{{','.join(names)}}}")


def _cfg(*sets: str, files: list[Path] | None = None) -> Config:
    return load_config([parse_override(s) for s in sets], files=files or [DEFAULT_CONFIG])


# --- configuration ---------------------------------------------------------------------------


def test_portable_default_is_the_whole_mel_onnx_vocoder():
    fs = PORTABLE.tts.fastspeech2
    assert fs.vocoder == "" and (fs.vocoder_frames, fs.vocoder_context) == (50, 16)
    assert fastspeech2.vocoder_path(PORTABLE) == FS2_DIR / "mb_melgan.onnx"
    assert fastspeech2.files(PORTABLE)["acoustic"] == FS2_DIR / "fastspeech2.onnx"


def test_board_config_selects_the_rknn_the_manifest_installs():
    from rkvoice.installer.manifest import load_manifest

    cfg = load_config(files=[DEFAULT_CONFIG, BOARD_CONFIG])
    assert cfg.models.profile == "board"
    path = fastspeech2.vocoder_path(cfg)
    assert path.suffix == ".rknn"
    assert cfg.tts.fastspeech2.vocoder_frames <= 50  # the compiler overflows its registers above
    entries = [m for m in load_manifest(ROOT / "models" / "manifest.yaml").profile("board") if m.engine == "fastspeech2"]
    installed = {ROOT / m.dir / f.path for m in entries for f in m.files}
    assert path.relative_to(cfg.models.path) == (ROOT / "models/board/fastspeech2/mb_melgan-50.rknn").relative_to(
        ROOT / "models")
    assert path in installed


def test_window_without_a_centre_is_a_config_error():
    with pytest.raises(RkvoiceError, match=r"tts\.fastspeech2: vocoder_frames 30 must exceed twice vocoder_context 16"):
        _cfg("tts.fastspeech2.vocoder_frames=30")


def test_rknn_vocoder_counts_as_missing_without_rknnlite(tmp_path, monkeypatch):
    voc = tmp_path / "v.rknn"
    voc.write_bytes(b"RKNN")
    cfg = _cfg(f"tts.fastspeech2.vocoder={voc}")
    assert fastspeech2.vocoder_path(cfg) == voc  # absolute paths are kept
    no_rknnlite = Probe(module=lambda name: name != "rknnlite")
    assert "rknnlite" in [lack.name for lack in missing(TTS.needs("fastspeech2", cfg), no_rknnlite, devices=False)]
    assert not installed(TTS.needs("fastspeech2", cfg), no_rknnlite)
    gone = _cfg(f"tts.fastspeech2.vocoder={tmp_path / 'nope.onnx'}")
    assert str(tmp_path / "nope.onnx") in [lack.name for lack in missing(TTS.needs("fastspeech2", gone), devices=False)]


# --- the fixed-window vocoder on the real portable voice -------------------------------------


class _Recording:
    """Wraps a runtime and records the input shapes it was run with."""

    def __init__(self, rt):
        self.rt, self.shapes = rt, []

    def run(self, inputs):
        self.shapes.append(tuple(inputs[0].shape))
        return self.rt.run(inputs)

    def __getattr__(self, name):
        return getattr(self.rt, name)


@pytest.fixture(scope="module")
def whole_voice():
    _need_voice()
    tts = FastSpeech2Tts(PORTABLE)
    tts.load()
    assert tts._chunked is None and tts._vocoder is not None  # the default path is unchanged
    return tts


def test_onnx_vocoder_in_fixed_windows_matches_the_whole_mel(whole_voice):
    cfg = _cfg("tts.fastspeech2.vocoder=portable/fastspeech2/mb_melgan.onnx")
    tts = FastSpeech2Tts(cfg)
    tts.load()
    assert "50-frame windows, context 16" in tts.vocoder_description()
    tts._chunked.runtime = rec = _Recording(tts._chunked.runtime)
    for text in TEXTS:
        ref, rate = whole_voice.generate(text)
        out, rate2 = tts.generate(text)
        assert rate == rate2 == 24000 and out.dtype == np.float32
        assert out.shape == ref.shape
        assert _snr_db(out, ref) >= MIN_SNR_DB, text
    assert rec.shapes and set(rec.shapes) == {(1, 50, 80)}
    tts.close()


def test_runtime_interface_chunks_match_one_onnxruntime_call(whole_voice):
    """open_model on mb_melgan.onnx + ChunkedVocoder at the config's window vs one whole run."""
    from rkvoice.npu.chunked_vocoder import ChunkedVocoder
    from rkvoice.npu.runtime import open_model

    fs = PORTABLE.tts.fastspeech2
    mel = whole_voice._mel(whole_voice._id_pieces(TEXTS[1])[0], 0, 1.0)
    assert mel.shape[1] > 10 * fs.vocoder_frames
    rt = open_model(FS2_DIR / "mb_melgan.onnx", threads=1, what="MB-MelGAN vocoder")
    rt.load()
    whole = rt.run([mel])[0].reshape(-1)
    chunked = ChunkedVocoder(rt, frames=fs.vocoder_frames, context=fs.vocoder_context, hop=fastspeech2.HOP)(mel)
    assert chunked.shape == whole.shape == (mel.shape[1] * fastspeech2.HOP,)
    assert _snr_db(chunked, whole) >= MIN_SNR_DB


# --- the RKNNLite selection, against the scripted stand-in ------------------------------------


@pytest.fixture
def lite_vocoder(monkeypatch, tmp_path):
    """rknnlite.api replaced by the test_npu_runtime stand-in; its inference runs mb_melgan.onnx."""
    _need_voice()
    import onnxruntime as ort
    from test_npu_runtime import _FakeLite  # the stand-in for rknnlite.api from test_npu_runtime.py

    sess = ort.InferenceSession(str(FS2_DIR / "mb_melgan.onnx"), providers=["CPUExecutionProvider"])

    class VocoderLite(_FakeLite):
        def inference(self, inputs):
            self.calls.append(("inference", [a.shape for a in inputs]))
            return sess.run(None, {"mels": inputs[0]})

    mod = types.ModuleType("rknnlite.api")
    mod.RKNNLite = VocoderLite
    pkg = types.ModuleType("rknnlite")
    pkg.api = mod
    monkeypatch.setitem(sys.modules, "rknnlite", pkg)
    monkeypatch.setitem(sys.modules, "rknnlite.api", mod)
    monkeypatch.setattr(runtime, "package_version", lambda d: "2.3.2")
    monkeypatch.setattr(runtime, "librknnrt_version", lambda: (Path("/usr/lib/librknnrt.so"), "2.3.2"))
    VocoderLite.script = {}
    VocoderLite.instances = _FakeLite.instances = []  # its __init__ appends to _FakeLite.instances
    rknn = tmp_path / "mb_melgan-50.rknn"
    rknn.write_bytes(b"RKNN")
    return VocoderLite, rknn


def test_rknn_vocoder_is_loaded_with_rknnlite_and_fed_fixed_windows(lite_vocoder, whole_voice):
    lite, rknn = lite_vocoder
    # quoted: YAML 1.1 reads a bare 0_1 as the integer 1
    cfg = _cfg(f"tts.fastspeech2.vocoder={rknn}", "tts.fastspeech2.core_mask=\"0_1\"")
    tts = FastSpeech2Tts(cfg)
    tts.load()
    assert isinstance(tts._chunked.runtime, runtime.RknnModel)
    assert "on RKNNLite (cores 0_1" in tts.vocoder_description()
    (npu,) = lite.instances
    assert npu.calls[:2] == [("load_rknn", str(rknn)), ("init_runtime", lite.NPU_CORE_0_1)]
    out, _ = tts.generate(TEXTS[0])
    ref, _ = whole_voice.generate(TEXTS[0])
    assert out.shape == ref.shape and _snr_db(out, ref) >= MIN_SNR_DB
    shapes = [c[1] for c in npu.calls if c[0] == "inference"]
    assert shapes and all(s == [(1, 50, 80)] for s in shapes)
    tts.close()
    assert npu.released


def test_rknn_vocoder_failures_name_the_file(lite_vocoder):
    lite, rknn = lite_vocoder
    lite.script = {"init": -1}
    with pytest.raises(RkvoiceError, match=f"cannot start {rknn} on the NPU .*librknnrt 2.3.2"):
        FastSpeech2Tts(_cfg(f"tts.fastspeech2.vocoder={rknn}")).load()
    missing = rknn.parent / "absent.rknn"
    with pytest.raises(RkvoiceError, match=f"{missing} not found"):
        FastSpeech2Tts(_cfg(f"tts.fastspeech2.vocoder={missing}")).load()


def _on_board() -> bool:
    return platform.machine() == "aarch64" and Path("/usr/lib/librknnrt.so").exists()


@pytest.mark.skipif(not _on_board(), reason="the real RKNNLite vocoder needs an RK3576 board (aarch64 + "
                    "/usr/lib/librknnrt.so); this machine has no NPU")
def test_real_npu_vocoder_matches_onnxruntime(whole_voice):
    cfg = load_config(files=[DEFAULT_CONFIG, BOARD_CONFIG])
    path = fastspeech2.vocoder_path(cfg)
    if not path.is_file():
        pytest.skip(f"{path} not installed (models/convert_rknn.py vocoder ... --frames 50 on a PC)")
    tts = FastSpeech2Tts(cfg)
    tts.load()
    out, _ = tts.generate(TEXTS[0])
    ref, _ = whole_voice.generate(TEXTS[0])
    # the .rknn is the float copy (no int8 output step): 26-28 dB from the int8 ONNX by itself here
    assert out.shape == ref.shape and _snr_db(out, ref) >= 22.0
    tts.close()


# --- per-profile silero path and --check ----------------------------------------------------


def test_silero_path_follows_the_profile_and_check_agrees():
    board = _cfg("models.profile=board")
    assert vad_model_path(PORTABLE) == PORTABLE.models.path / "portable/vad/silero_vad.onnx"
    assert vad_model_path(board) == board.models.path / "board/vad/silero_vad.onnx"
    for cfg in (PORTABLE, board):
        assert [f.paths for f in check.stage_needs(cfg, "vad", "silero").files] == [(vad_model_path(cfg),)]


RT_STAMP = b"\x00librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\x00"


@pytest.fixture
def board_fs2(tmp_path, monkeypatch):
    """The board config with the fastspeech2 voice, files in tmp, librknnrt 2.3.2 = toolkit-lite 2.3.2."""
    models = tmp_path / "models"
    for rel in ("portable/fastspeech2/fastspeech2.onnx", "portable/fastspeech2/baker_mapper.json"):
        (models / rel).parent.mkdir(parents=True, exist_ok=True)
        (models / rel).write_bytes(b"x")
    rt = tmp_path / "librknnrt.so"
    rt.write_bytes(RT_STAMP)
    monkeypatch.setattr(versions, "LIBRKNNRT_PATHS", (rt,))
    monkeypatch.setattr(versions, "NPU_DRIVER_PATHS", (tmp_path / "no-driver",))
    monkeypatch.setattr(versions, "package_version", lambda d: {"rknn-toolkit-lite2": "2.3.2"}.get(d))
    monkeypatch.setattr(check, "module_found", lambda name: True)
    cfg = load_config([parse_override(f"models.dir={models}"), parse_override("tts.engine=fastspeech2")],
                      files=[DEFAULT_CONFIG, BOARD_CONFIG])
    return cfg, models / "board/fastspeech2/mb_melgan-50.rknn"


def test_check_names_the_missing_npu_vocoder(board_fs2):
    cfg, _ = board_fs2
    assert check._choices(cfg, check.PROBE)["tts"] == ("fastspeech2", None)
    st = check.check_stage(cfg, "tts", "fastspeech2", Path("/nonexistent"))
    assert not st.ok
    assert st.problems[0] == "missing models/board/fastspeech2/mb_melgan-50.rknn (run ./install.sh --profile board)"
    assert any("50-frame windows, context 16" in n for n in st.notes)


def test_check_passes_with_the_vocoder_and_names_a_toolkit_mismatch(board_fs2):
    cfg, rknn = board_fs2
    rknn.parent.mkdir(parents=True)
    rknn.write_bytes(b'RKNN{"toolkit_version":"2.3.2"}')
    st = check.check_stage(cfg, "tts", "fastspeech2", Path("/nonexistent"))
    assert st.ok, st.problems
    assert "librknnrt 2.3.2 = rknn-toolkit-lite2 2.3.2" in st.notes
    rknn.write_bytes(b'RKNN{"toolkit_version":"2.5.0"}')
    st = check.check_stage(cfg, "tts", "fastspeech2", Path("/nonexistent"))
    assert any("mb_melgan-50.rknn was built by rknn-toolkit2 2.5.0" in p for p in st.problems)
    bad = replace(cfg, tts=replace(cfg.tts, fastspeech2=replace(cfg.tts.fastspeech2, core_mask="3")))
    st = check.check_stage(bad, "tts", "fastspeech2", Path("/nonexistent"))
    assert any("tts.fastspeech2.core_mask '3'" in p for p in st.problems)


def test_check_portable_fastspeech2_needs_no_npu(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "module_found", lambda name: True)
    cfg = Config(models=ModelsConfig(dir=str(tmp_path / "models")), tts=TtsConfig(engine="fastspeech2"))
    st = check.check_stage(cfg, "tts", "fastspeech2", Path("/nonexistent"))
    assert st.problems == [f"missing models/portable/fastspeech2/{n} (run ./install.sh --profile portable)"
                           for n in ("fastspeech2.onnx", "mb_melgan.onnx", "baker_mapper.json")]
    assert not any("rknn" in p or "librknnrt" in p for p in st.problems + st.notes)
