"""The composition root (rkvoice/stages.py): what every mode's stages are built with."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import Field, fields, is_dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rkvoice.config import Config, load_config
from rkvoice.errors import RkvoiceError
from rkvoice.stages import (
    Hear,
    StageSet,
    StageSpec,
    StageSpecs,
    assistant,
    default_voice,
    product_plan,
    serving_stages,
)

ROOT = Path(__file__).resolve().parent.parent


def test_every_mode_builds_its_assistant_on_the_configured_time_zone(tmp_path: Path) -> None:
    """Issue 24: the daemon's assistant (which a Wyoming server beside it shares), the Wyoming server's
    own and the CLI's answer in ``wyoming.time_zone``, not only the standalone server's."""
    cfg = load_config([{"wyoming": {"time_zone": "Asia/Shanghai"}, "state": {"dir": str(tmp_path)}}])
    answer = product_plan(cfg).stages.answer
    serving = serving_stages("America/Sao_Paulo").answer
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


def _candidates(value: object, f: Field[Any]) -> list[object]:
    """Values unequal to ``value`` that the field may take (its section checks them on construction)."""
    if "choices" in f.metadata:
        return [c for c in f.metadata["choices"] if c != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, (int, float)):
        return [value + 1, value - 1, value * 0.5]
    if isinstance(value, str):
        return [value + "x", 1, value + "/x", "http://127.0.0.1:1", "tcp://127.0.0.1:1", "Asia/Shanghai"]
    return []


def _changes(part: Any) -> list[tuple[str, Any]]:
    """(field, the section with that field changed) for every field of ``part`` a valid change exists for."""
    out = []
    for f in fields(part):
        value = getattr(part, f.name)
        if is_dataclass(value):  # a nested section: any change of it
            out += [(f"{f.name}.{name}", replace(part, **{f.name: inner})) for name, inner in _changes(value)][:1]
            continue
        for candidate in _candidates(value, f):
            try:
                out.append((f.name, replace(part, **{f.name: candidate})))
                break
            except RkvoiceError:
                continue
    return out


def _reloaded(specs: StageSpecs, old: Config, new: Config) -> list[str]:
    """The stages a StageSet loaded for ``old`` reloads for ``new`` (stand-ins that load nothing)."""
    class Idle:
        def load(self) -> None: ...

        def close(self) -> None: ...

    idle: Any = [StageSpec(s.name, s.reads, lambda c: Idle()) for s in (specs.hear, specs.answer, specs.speak)]
    stages = StageSet(StageSpecs(*idle))  # stand-ins for Hear, Assistant, Speak
    stages.load_all(old)
    return stages.reload(old, new)


def test_a_change_in_any_field_of_a_section_a_stage_reads_reloads_it() -> None:
    """The reload keys come from the sections a stage reads: no field of them can be left off (the
    hand-written keys missed hear.wake_phrase for the assistant's name, home_assistant, audio.input)."""
    cfg = load_config()
    for specs in (product_plan(cfg).stages, serving_stages("")):
        for spec in (specs.hear, specs.answer, specs.speak):
            for section in spec.reads:
                part = getattr(cfg, section)
                changes = _changes(part)
                assert len(changes) == len(fields(part)), f"not every field of {section} could be changed"
                for name, changed in changes:
                    new = replace(cfg, **{section: changed})
                    assert spec.name in _reloaded(specs, cfg, new), f"{section}.{name} does not reload {spec.name}"
    assert "answer" in _reloaded(product_plan(cfg).stages, cfg,
                                 replace(cfg, hear=replace(cfg.hear, wake_phrase="你好小智")))  # its name


def test_a_section_no_stage_reads_reloads_nothing_and_an_unknown_one_is_refused() -> None:
    cfg = load_config()
    new = replace(cfg, daemon=replace(cfg.daemon, stall_s=cfg.daemon.stall_s + 1))
    assert _reloaded(product_plan(cfg).stages, cfg, new) == []
    with pytest.raises(ValueError, match="unknown config sections"):
        StageSpec("hear", ("hearing",), Hear)
