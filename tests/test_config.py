"""Config layering, unknown keys, type checks and the YAML reading of str fields."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rkvoice.config import DEFAULT_CONFIG, Config, load_config, parse_override
from rkvoice.errors import RkvoiceError


def test_repo_defaults_load_and_are_frozen():
    cfg = load_config(files=[DEFAULT_CONFIG])
    assert isinstance(cfg, Config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.tts.threads = 3  # type: ignore[misc]


def test_layers_override_in_order(tmp_path: Path):
    system = tmp_path / "system.yaml"
    system.write_text("tts:\n  threads: 2\n  speed: 1.5\n", encoding="utf-8")
    cfg = load_config([parse_override("tts.speed=0.8")], files=[DEFAULT_CONFIG, system])
    assert cfg.tts.threads == 2  # from the system file
    assert cfg.tts.speed == pytest.approx(0.8)  # the CLI wins
    assert cfg.audio == load_config(files=[DEFAULT_CONFIG]).audio  # untouched sections keep defaults


def test_env_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    f = tmp_path / "c.yaml"
    f.write_text("tts:\n  threads: 2\n", encoding="utf-8")
    monkeypatch.setenv("RKVOICE_CONFIG", str(f))
    assert load_config().tts.threads == 2


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("tts.thread=2", "'tts.thread'"),
        ("nosuch.key=1", "'nosuch'"),
        ("audio.player.x=1", "audio.player"),
    ],
)
def test_unknown_or_misplaced_key_names_its_path(override: str, needle: str):
    with pytest.raises(RkvoiceError) as err:
        load_config([parse_override(override)], files=[DEFAULT_CONFIG])
    assert needle in str(err.value)


def test_unknown_key_in_a_file_names_the_path(tmp_path: Path):
    f = tmp_path / "bad.yaml"
    f.write_text("audio:\n  outptu_rate: 22050\n", encoding="utf-8")
    with pytest.raises(RkvoiceError, match=r"audio\.outptu_rate"):
        load_config(files=[DEFAULT_CONFIG, f])


def test_wrong_type_names_the_path():
    with pytest.raises(RkvoiceError, match=r"tts\.threads: expected int, got 'two'"):
        load_config([parse_override("tts.threads=two")], files=[DEFAULT_CONFIG])


def test_bad_yaml_and_non_mapping_files_are_clear(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tts: [unclosed\n", encoding="utf-8")
    with pytest.raises(RkvoiceError, match="not valid YAML"):
        load_config(files=[bad])
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(RkvoiceError, match="mapping"):
        load_config(files=[lst])
    with pytest.raises(RkvoiceError, match="cannot read"):
        load_config(files=[DEFAULT_CONFIG, tmp_path / "missing.yaml"])


def test_override_syntax_errors():
    with pytest.raises(RkvoiceError, match="KEY=VALUE"):
        parse_override("tts.threads")


@pytest.mark.parametrize("mask", ["0_1", "0_1_2"])
def test_core_mask_with_underscores_stays_a_string(mask: str, tmp_path: Path):
    # Plain YAML 1.1 reads 0_1 as the integer 1, which would silently run on one NPU core.
    cfg = load_config([parse_override(f"tts.matcha_core_mask={mask}")], files=[DEFAULT_CONFIG])
    assert cfg.tts.matcha_core_mask == mask
    f = tmp_path / "c.yaml"
    f.write_text(f"tts:\n  matcha_core_mask: {mask}\n", encoding="utf-8")
    assert load_config(files=[DEFAULT_CONFIG, f]).tts.matcha_core_mask == mask


def test_numbers_still_parse_as_numbers():
    cfg = load_config(
        [parse_override("tts.threads=2"), parse_override("tts.speed=1e0"), parse_override("audio.output_rate=22050")],
        files=[DEFAULT_CONFIG],
    )
    assert (cfg.tts.threads, cfg.tts.speed, cfg.audio.output_rate) == (2, 1.0, 22050)
