"""bench.board_report prints one JSON with sane figures, and reports missing engines instead of crashing.

The first test runs the real portable profile (the models ./install.sh installs) with --no-llm and
one TTS run; the second points the report at the board profile on this machine, where the board's
models are not installed, and a third at the Matcha voice built from tiny contract graphs, so the
per-bucket times appear.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rkvoice.config import ROOT, load_config
from rkvoice.needs import installed
from rkvoice.tts.registry import TTS


def run_report(*args: str, timeout: int = 600) -> dict:
    res = subprocess.run([sys.executable, "-m", "bench.board_report", *args], capture_output=True, text=True, timeout=timeout,
                         cwd=ROOT, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def _portable_installed() -> bool:
    cfg = load_config()
    m = cfg.models.path / "portable"
    return installed(TTS.needs("fastspeech2", cfg)) and (m / "whisper-base" / "model.bin").is_file() and \
        (m / "vad" / "silero_vad.onnx").is_file()


@pytest.mark.skipif(not _portable_installed(), reason="portable models not installed (./install.sh)")
def test_portable_report_has_every_measurement(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    r = run_report("--no-llm", "--runs", "1", "--out", str(out))
    assert json.loads(out.read_text(encoding="utf-8")) == r
    assert r["bench"] == "board_report" and r["profile"] == "portable"
    mem = r["memory"]
    assert mem["mem_available_mb_before"] > 0 and mem["mem_available_mb_after"] > 0
    assert mem["rss_mb_loaded"] > mem["rss_mb_start"] > 0
    for stage in ("tts", "vad", "asr", "wake"):
        e = r["engines"][stage]
        assert e["status"] == "ok", (stage, e)
        assert e["load_s"] > 0 and isinstance(e["rss_delta_mb"], float)
    assert r["engines"]["asr"]["engine"] == "whisper" and r["engines"]["wake"]["engine"] == "asr-match"
    assert r["engines"]["llm"] == {"status": "skipped", "why": "--no-llm"} and r["llm"]["status"] == "skipped"
    tts = r["tts"]
    assert tts["status"] == "ok" and 0 < tts["first_audio_ms"] < 30000 and 0 < tts["rtf"] < 5
    assert tts["audio_s"] > 2 and tts["max_gap_ms"] >= 0 and tts["chunks"] >= 2
    asr = r["asr"]
    assert asr["status"] == "ok" and asr["transcript"] and 0 <= asr["cer"] < 0.5, asr
    wake = r["wake"]
    assert wake["status"] == "ok" and wake["phrase"] == "小智小智"
    assert wake["with_request"]["detected"] is True, wake  # the phrase and a request in one breath
    assert isinstance(wake["alone"]["detected"], bool)
    assert r["voices"]["matcha"]["status"] == "missing" and "matcha-t*" in r["voices"]["matcha"]["why"]


def test_board_profile_here_reports_missing_engines(tmp_path: Path) -> None:
    cfg = tmp_path / "board.yaml"
    cfg.write_text(f"models:\n  profile: board\n  dir: {tmp_path / 'models'}\ntts:\n  engine: matcha\n",
                   encoding="utf-8")
    r = run_report("--config", str(cfg), "--runs", "1", timeout=120)
    assert r["profile"] == "board"
    for stage, engine in (("tts", "matcha"), ("vad", "silero"), ("asr", "paraformer"), ("wake", "kws"),
                          ("llm", "rkllm")):
        e = r["engines"][stage]
        assert e["status"] == "missing" and e["engine"] == engine and e["why"], (stage, e)
    assert "install.sh --profile board" in r["engines"]["tts"]["why"]
    assert r["tts"]["status"] == "missing" and r["asr"]["status"] == "missing" and r["llm"]["status"] == "missing"


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "bench.board_report", "--config", str(tmp_path / "nope.yaml")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert res.returncode == 2 and "no such file" in res.stderr and not res.stdout
    res = subprocess.run([sys.executable, "-m", "bench.board_report", "--set", "tts.nope=1"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, check=False)
    assert res.returncode == 2 and "unknown config key 'tts.nope'" in res.stderr


def test_matcha_report_times_every_bucket(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_matcha import model_dir

    d = model_dir(tmp_path)  # t16/t32/t64 + f200/f600 contract graphs, zh-en voice files
    cfg = tmp_path / "matcha.yaml"
    cfg.write_text(f"models:\n  dir: {tmp_path}\ntts:\n  engine: matcha\n  matcha:\n    dir: {d}\n"
                   "    runtime: onnx\n    espeak_lib_dir: ''\n", encoding="utf-8")
    r = run_report("--config", str(cfg), "--runs", "1", "--no-llm", timeout=300)
    e = r["engines"]["tts"]
    assert e["status"] == "ok" and e["engine"] == "matcha", e
    buckets = r["tts"]["buckets"]
    assert set(buckets["matcha"]) == {"t16", "t32", "t64"} and set(buckets["vocos"]) == {"f200", "f600"}
    used = {k: v for k, v in buckets["matcha"].items() if v["calls"]}
    assert used and all(v["mean_ms"] > 0 and v["max_ms"] >= v["mean_ms"] for v in used.values())
    assert buckets["matcha"]["t64"]["window"] == 600 and buckets["vocos"]["f200"]["size"] == 200
    assert r["tts"]["first_audio_ms"] > 0 and r["tts"]["sample_rate"] == 16000
