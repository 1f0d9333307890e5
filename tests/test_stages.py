"""The composition root (rkvoice/stages.py): what every mode's stages are built with."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from rkvoice.config import load_config
from rkvoice.stages import assistant, default_voice, product_plan, serving_stages

ROOT = Path(__file__).resolve().parent.parent


def test_every_mode_builds_its_assistant_on_the_configured_time_zone(tmp_path: Path) -> None:
    """Issue 24: the daemon's assistant (which a Wyoming server beside it shares), the Wyoming server's
    own and the CLI's answer in ``wyoming.time_zone``, not only the standalone server's."""
    cfg = load_config([{"wyoming": {"time_zone": "Asia/Shanghai"}, "state": {"dir": str(tmp_path)}}])
    (answer,) = [s for s in product_plan(cfg).stages if s.name == "answer"]
    (serving,) = [s for s in serving_stages("America/Sao_Paulo") if s.name == "answer"]
    assert answer.build(cfg).now().utcoffset() == timedelta(hours=8)
    assert assistant(cfg).now().utcoffset() == timedelta(hours=8)
    assert serving.build(cfg).now().utcoffset() == timedelta(hours=-3)  # the server's --wyoming settings
    changed = load_config([{"wyoming": {"time_zone": "Europe/Berlin"}, "state": {"dir": str(tmp_path)}}])
    assert answer.key(changed) != answer.key(cfg)  # a new zone reloads the assistant on SIGHUP


def test_the_default_voice_speaks_chinese_unless_one_is_named() -> None:
    from rkvoice.tts.registry import engine_languages

    cfg = load_config([{"tts": {"engine": "auto"}}])
    voice = default_voice(cfg)  # constructed, not loaded
    assert "zh" in engine_languages(cfg)[voice.name]
    assert default_voice(cfg, "fastspeech2").name == "fastspeech2"


def test_the_daemon_runs_without_the_wyoming_package_when_no_uri_is_set(tmp_path: Path) -> None:
    """Issue 25: with ``wyoming.uri`` empty the daemon loads its stages, serves a turn and stops
    without importing rkvoice.wyoming (nor the wyoming package)."""
    script = f"""
import sys, json
sys.path.insert(0, {str(ROOT / 'tests')!r})
from pathlib import Path
from test_daemon_fakes import QUESTION, Harness, Rig, _cfg
import rkvoice.daemon.service, rkvoice.cli.entry
from rkvoice.stages import product_plan
cfg = _cfg(Path({str(tmp_path)!r}))
assert not cfg.wyoming.uri
product_plan(cfg)
with Harness(cfg, Rig([QUESTION])) as h:
    turn = h.next_turn()
print(json.dumps({{"answer": turn.result, "code": h.code,
                   "wyoming": sorted(m for m in sys.modules if m.split(".")[:2] == ["rkvoice", "wyoming"]
                                     or m.split(".")[0] == "wyoming")}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["answer"] == "好的，这是回答。" and seen["code"] == 0
    assert seen["wyoming"] == []
