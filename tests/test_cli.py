"""assistant.py --say as a user runs it: bad input gets one clear line, a real run writes speech."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FS2 = ROOT / "models" / "portable" / "fastspeech2"
FS2_FILES = ("fastspeech2.onnx", "mb_melgan.onnx", "baker_mapper.json")
HAVE_FS2 = all((FS2 / f).is_file() for f in FS2_FILES)


def run(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("RKVOICE_CONFIG", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "assistant.py"), *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
    )


def one_clear_line(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("error: ")
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def nothing_written(folder: Path) -> None:
    assert [p.name for p in folder.iterdir() if p.suffix in (".wav", ".part", ".json", ".tmp")] == []


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_is_refused(tmp_path, text):
    proc = run("--say", text, "--out", str(tmp_path / "x.wav"))
    assert proc.returncode == 2
    one_clear_line(proc, "nothing to say")
    nothing_written(tmp_path)


def test_20000_characters_are_refused_with_the_limit_and_the_fix(tmp_path):
    proc = run("--say", "今天天气不错。" * 2858, "--out", str(tmp_path / "x.wav"))
    assert proc.returncode == 2
    one_clear_line(proc, "20006 characters", "tts.max_text_chars")
    nothing_written(tmp_path)


def test_emoji_only_is_refused(tmp_path):
    proc = run("--say", "😀🎉👍", "--out", str(tmp_path / "x.wav"))
    assert proc.returncode == 2
    one_clear_line(proc, "nothing to pronounce")
    nothing_written(tmp_path)


def test_unknown_tts_names_the_choices(tmp_path):
    proc = run("--say", "你好", "--tts", "nope", "--out", str(tmp_path / "x.wav"))
    assert proc.returncode == 1
    one_clear_line(proc, "'nope'", "choose one of", "fastspeech2")
    nothing_written(tmp_path)


@pytest.mark.parametrize("where", ["missing-dir", "is-dir"])
def test_unwritable_out_is_refused_before_loading_models(tmp_path, where):
    out = tmp_path / "no" / "such" / "x.wav" if where == "missing-dir" else tmp_path
    proc = run("--say", "你好", "--out", str(out), "--set", "models.dir=/nonexistent-models")
    assert proc.returncode == 2  # the --out check comes before the model check
    one_clear_line(proc, "--out")


def test_bad_set_and_unknown_config_key_are_one_line(tmp_path):
    proc = run("--say", "你好", "--set", "tts.nonsense=1")
    assert proc.returncode == 1
    one_clear_line(proc, "tts.nonsense")
    proc = run("--say", "你好", "--set", "novalue")
    one_clear_line(proc, "KEY=VALUE")


def test_missing_model_files_name_the_file_and_the_fix(tmp_path):
    proc = run("--say", "你好", "--tts", "fastspeech2", "--set", f"models.dir={tmp_path}", "--out",
               str(tmp_path / "x.wav"))
    assert proc.returncode == 1
    one_clear_line(proc, "missing", "install.sh")
    nothing_written(tmp_path)


@pytest.mark.skipif(not HAVE_FS2, reason="fastspeech2 model not installed (run ./install.sh)")
def test_truncated_model_file_is_named(tmp_path):
    models = tmp_path / "models"
    dst = models / "portable" / "fastspeech2"
    dst.mkdir(parents=True)
    for f in FS2_FILES:
        shutil.copy(FS2 / f, dst / f)
    data = (FS2 / "fastspeech2.onnx").read_bytes()
    (dst / "fastspeech2.onnx").write_bytes(data[: len(data) // 3])
    out = tmp_path / "x.wav"
    proc = run("--say", "你好", "--tts", "fastspeech2", "--set", f"models.dir={models}", "--out", str(out))
    assert proc.returncode == 1
    one_clear_line(proc, "fastspeech2.onnx", "truncated or corrupt")
    assert not out.exists()
    nothing_written(tmp_path)


@pytest.mark.skipif(not HAVE_FS2, reason="fastspeech2 model not installed (run ./install.sh)")
def test_real_run_writes_wav_and_metrics(tmp_path):
    out, metrics = tmp_path / "x.wav", tmp_path / "m.json"
    proc = run("--say", "你好，今天天气不错。记得带伞。", "--tts", "fastspeech2", "--no-play",
               "--out", str(out), "--metrics", str(metrics), "--compare-whole", "--set", "tts.first_chars=6")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout
    with wave.open(str(out)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
        seconds = w.getnframes() / w.getframerate()
    assert 1.0 < seconds < 8.0
    data = json.loads(metrics.read_text(encoding="utf-8"))
    names = [e["name"] for e in data["events"]]
    for name in ("text_ready", "chunk", "synth_start", "synth_end", "audio_first", "play_end", "whole_text_synth"):
        assert name in names
    assert names.index("text_ready") < names.index("audio_first") < names.index("play_end")
    s = data["summary"]
    assert s["chunks"] == names.count("chunk") >= 2
    assert s["audio_s"] > 0 and s["synth_ms"] > 0 and s["rtf"] > 0
    assert s["first_audio_ms"] > 0 and s["whole_text_synth_ms"] > 0
    assert s["max_gap_ms"] >= 0
    # the WAV holds exactly what was handed to the player
    played = sum(e["audio_s"] for e in data["events"] if e["name"] == "play_chunk")
    assert abs(played - seconds) < 0.01
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "x.wav"]
