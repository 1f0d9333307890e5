"""The board's ``--tts vits`` fallback (vits-zh-aishell3 layout) through sherpa-onnx, without a board.

models/standins/make_aishell3.py puts the installed Piper voice's real VITS network into the
aishell3 layout: aishell3 input names with ``sid``, 4 speakers, a Chinese lexicon spelled in the
voice's phoneme tokens, tokens.txt and the four rule FSTs (number.fst rewrites digits). The
engine then runs exactly the board's configuration: files, lexicon lookup by sherpa-onnx, FSTs,
speaker id, sample rate. The audio is meaningless; the plumbing is real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from models.prepare_piper import with_onnx_metadata
from rkvoice.cli import entry as cli
from rkvoice.config import ROOT, load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.tts.vits import VOICES, VitsTts, read_onnx_metadata

PIPER = ROOT / "models" / "portable" / "piper-joe"
VOICE = "vits-zh-aishell3"


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    """A models.dir holding board/vits-zh-aishell3/ built from the Piper voice."""
    if not (PIPER / "model.onnx").is_file():
        pytest.skip(f"the Piper voice {PIPER}/model.onnx is absent (run ./install.sh)")
    models = tmp_path_factory.mktemp("vits_board") / "models"
    run = subprocess.run(
        [sys.executable, str(ROOT / "models" / "standins" / "make_aishell3.py"), "--piper", str(PIPER),
         "--out", str(models / "board" / VOICE)],
        check=False, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return models


def board_cfg(models, *items: str):
    return load_config([parse_override(i) for i in (f"models.dir={models}", "models.profile=board",
                                                    f"tts.vits_voice={VOICE}", *items)])


@pytest.fixture(scope="module")
def voice(models_dir):
    tts = VitsTts(board_cfg(models_dir))
    tts.load()
    return tts


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio))))


def test_the_standin_has_the_aishell3_layout(models_dir):
    d = models_dir / "board" / VOICE
    spec = VOICES[VOICE]
    assert spec.installed(board_cfg(models_dir)) and spec.model_path(board_cfg(models_dir)).name == "vits-aishell3.onnx"
    assert all((d / f).is_file() for f in spec.rule_fsts)
    meta = read_onnx_metadata(d / "vits-aishell3.onnx")
    assert meta["language"] == "Chinese" and meta["n_speakers"] == "4" and "piper" not in meta["comment"]
    import onnxruntime as ort

    names = [i.name for i in ort.InferenceSession(str(d / "vits-aishell3.onnx")).get_inputs()]
    assert names == ["x", "x_length", "noise_scale", "length_scale", "noise_scale_w", "sid"]
    assert "你 n i 3" in (d / "lexicon.txt").read_text(encoding="utf-8").splitlines()


def test_chinese_text_through_lexicon_speaker_and_rate(voice):
    assert voice.sample_rate == 22050 and voice._speakers == 4
    audio, rate = voice.generate("你好，今天天气怎么样？")
    assert rate == 22050 and len(audio) > 0.5 * rate and np.all(np.abs(audio) <= 1.0)
    quiet, _ = voice.generate("你好，今天天气怎么样？", sid=3)  # the stand-in scales speaker 3 by 1/4
    assert 2.5 < rms(audio) / rms(quiet) < 6.0
    with pytest.raises(RkvoiceError, match="4 speaker"):
        voice.generate("你好", sid=4)


def test_rule_fsts_rewrite_digits_before_the_lexicon(voice, models_dir, tmp_path):
    audio, _ = voice.generate("3")  # number.fst: 3 -> 三, which the lexicon knows
    assert len(audio) > 0
    bare = tmp_path / "models"
    shutil.copytree(models_dir, bare)
    (bare / "board" / VOICE / "number.fst").unlink()
    without = VitsTts(board_cfg(bare))
    without.load()
    assert len(without.generate("3")[0]) == 0  # no FST: a digit is not in the Chinese lexicon
    assert len(without.generate("hello")[0]) == 0  # out-of-lexicon text: nothing, not a crash


def test_bad_voice_files_are_clear_errors(models_dir, tmp_path):
    broken = tmp_path / "models"
    shutil.copytree(models_dir, broken)
    d = broken / "board" / VOICE
    model = d / "vits-aishell3.onnx"
    meta = read_onnx_metadata(model)
    del meta["n_speakers"]
    model.write_bytes(with_onnx_metadata(model.read_bytes(), meta))
    with pytest.raises(RkvoiceError, match="n_speakers"):
        VitsTts(board_cfg(broken)).load()
    (d / "lexicon.txt").unlink()
    with pytest.raises(RkvoiceError, match="lexicon.txt is missing"):
        VitsTts(board_cfg(broken)).load()


def test_say_with_the_board_vits_voice_writes_speech(models_dir, tmp_path, capsys):
    out = tmp_path / "say.wav"
    code = cli.main(["--say", "你好，现在是3点。", "--tts", "vits", "--out", str(out), "--no-play",
                     "--set", f"models.dir={models_dir}", "--set", "models.profile=board",
                     "--set", f"tts.vits_voice={VOICE}"])
    assert code == 0, capsys.readouterr().err
    audio, rate = sf.read(out, dtype="float32")
    assert rate == load_config().audio.output_rate and len(audio) > 0.5 * rate and rms(audio) > 0.001
