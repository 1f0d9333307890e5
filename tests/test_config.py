"""Config layering, unknown keys, type checks and the YAML reading of str fields."""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path

import pytest

from rkvoice.config import DEFAULT_CONFIG, AudioConfig, Config, LlmConfig, TtsConfig, load_config, parse_override
from rkvoice.config_fields import Range
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


# ---------------------------------------------------------------- declared ranges, checked at load

def _sections(cls: type = Config, path: str = "") -> list[tuple[str, type]]:
    """(path, class) of every section dataclass under Config."""
    out = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            sub = f"{path}.{f.name}" if path else f.name
            out += [(sub, tp), *_sections(tp, sub)]
    return out


def _is_numeric(tp: typing.Any) -> bool:
    kinds = typing.get_args(tp) or (tp,)  # int | Literal["auto"] -> (int, Literal["auto"])
    return int in kinds or float in kinds


def _numeric_fields() -> list[tuple[str, dataclasses.Field, type]]:
    out = []
    for path, cls in _sections():
        hints = typing.get_type_hints(cls)
        out += [(f"{path}.{f.name}", f, hints[f.name]) for f in dataclasses.fields(cls) if _is_numeric(hints[f.name])]
    return out


NUMERIC = _numeric_fields()
IDS = [p for p, _, _ in NUMERIC]


def test_the_walk_finds_every_section_and_its_numbers():
    paths = {p for p, _ in _sections()}
    assert {"tts", "tts.matcha", "tts.fastspeech2", "audio", "hear", "llm", "daemon"} <= paths
    assert {"tts.threads", "audio.block_ms", "daemon.max_failures", "llm.temperature", "tts.first_chars",
            "llm.threads", "hear.max_request_s", "tts.matcha.vocoder_context"} <= set(IDS)
    assert all(cls.PATH == p for p, cls in _sections())  # errors name the key by this path


@pytest.mark.parametrize(("path", "fld", "tp"), NUMERIC, ids=IDS)
def test_every_numeric_key_declares_a_finite_range_holding_its_default(path: str, fld: dataclasses.Field, tp: type):
    rng = fld.metadata.get("range")
    assert isinstance(rng, Range), f"{path} declares no range: use num(default, lo, hi)"
    assert math.isfinite(rng.lo) and math.isfinite(rng.hi) and rng.lo <= rng.hi
    assert fld.default == "auto" or fld.default in rng


def _section_and_key(path: str) -> tuple[str, str]:
    section, _, key = path.rpartition(".")
    return section, key


def _load(path: str, value: object) -> Config:
    section, key = _section_and_key(path)
    data: dict = {key: value}
    for part in reversed(section.split(".")):
        data = {part: data}
    return load_config([data], files=[DEFAULT_CONFIG])


def _bad_values(rng: Range, tp: type) -> list[object]:
    """Just outside each end (or the end itself where it is open), NaN, infinity, a word and a bool."""
    is_int = _is_int(tp)
    step = 1 if is_int else (rng.hi - rng.lo) / 1000 or 0.001
    below = rng.lo if rng.lo_open else rng.lo - step
    above = rng.hi if rng.hi_open else rng.hi + step
    specials = {v for v, _ in rng.also}
    vals: list[object] = [v for v in (below, above) if v not in specials]
    vals += ["many", True]
    if not is_int:
        vals += [math.nan, math.inf, -math.inf]
    else:
        vals += [float(rng.lo) + 0.5]  # a fraction where a whole number belongs
    return vals


@pytest.mark.parametrize(("path", "fld", "tp"), NUMERIC, ids=IDS)
def test_every_numeric_key_refuses_values_outside_its_range(path: str, fld: dataclasses.Field, tp: type):
    rng = fld.metadata["range"]
    for value in _bad_values(rng, tp):
        with pytest.raises(RkvoiceError) as err:
            _load(path, value)
        msg = str(err.value)
        assert f"{path}: " in msg, msg
        assert rng.describe() in msg, msg  # the allowed range is named
        shown = repr(float(value)) if isinstance(value, float) else repr(value)
        assert shown in msg, msg
    for value in (rng.lo if not rng.lo_open else None, rng.hi if not rng.hi_open else None, *(v for v, _ in rng.also)):
        if value is None or path in CHECKED_IN_PAIRS:
            continue
        value = int(value) if float(value).is_integer() and _is_int(tp) else value
        assert _get(_load(path, value), path) == value  # both closed ends are accepted


CHECKED_IN_PAIRS = {"llm.max_tokens", "llm.context", "tts.fastspeech2.vocoder_frames", "tts.fastspeech2.vocoder_context"}
"""Keys also checked against another (max_tokens < context, frames > 2 x context): an end of their own
range can be refused because of the other's default, so only the refusals above apply to them."""


def test_keys_checked_in_pairs():
    assert dataclasses.replace(LlmConfig(), context=128, max_tokens=127).max_tokens == 127
    with pytest.raises(RkvoiceError, match="llm.max_tokens 200 leaves no room for the prompt in llm.context 128"):
        dataclasses.replace(LlmConfig(), context=128)
    with pytest.raises(RkvoiceError, match="vocoder_frames 32 must exceed twice vocoder_context 16"):
        _load("tts.fastspeech2.vocoder_frames", 32)


def _is_int(tp: type) -> bool:
    return tp is int or int in typing.get_args(tp)


def _get(cfg: Config, path: str) -> object:
    obj: object = cfg
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("tts.threads=0", "tts.threads: 0 is out of range (allowed: 1 to 64)"),
        ("audio.block_ms=0", "audio.block_ms: 0 is out of range (allowed: 5 to 500)"),
        ("daemon.max_failures=0", "daemon.max_failures: 0 is out of range (allowed: 1 to 10000)"),
        ("llm.temperature=-3", "llm.temperature: -3.0 is out of range (allowed: 0 to 2)"),
        ("tts.first_chars=0", "tts.first_chars: 0 is out of range (allowed: 1 to 500)"),
        ("daemon.stop_timeout_s=-1", "daemon.stop_timeout_s: -1.0 is out of range (allowed: above 0, up to 60)"),
        ("llm.top_p=.nan", "llm.top_p: nan is out of range (allowed: above 0, up to 1)"),
        ("tts.speed=fast", "tts.speed: expected float, got 'fast' (allowed: 0.25 to 4)"),
        ("hear.threads=true", "hear.threads: expected int, got True (allowed: 1 to 64)"),
        ("llm.seed=-2", "llm.seed: -2 is out of range (allowed: -1 (a new seed per answer) or 0 to 2147483647)"),
        ("hear.wake_probe_s=0.5", "hear.wake_probe_s: 0.5 is out of range (allowed: 0 (off) or 1 to 10)"),
        ("tts.matcha.runtime=npu", "tts.matcha.runtime: 'npu' is not allowed; choose one of: auto, rknn, onnx"),
    ],
)
def test_refusal_names_the_key_the_value_and_the_range(override: str, message: str):
    with pytest.raises(RkvoiceError) as err:
        load_config([parse_override(override)], files=[DEFAULT_CONFIG])
    assert message in str(err.value)
    assert err.value.stage == "config"


def test_a_bad_value_in_a_file_is_refused_like_an_override(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("daemon:\n  answer_gap_timeout_s: 0\n", encoding="utf-8")
    with pytest.raises(RkvoiceError, match=r"daemon\.answer_gap_timeout_s: 0\.0 is out of range"):
        load_config(files=[DEFAULT_CONFIG, f])


def test_sections_made_in_code_are_checked_too():
    with pytest.raises(RkvoiceError, match=r"audio\.crossfade_ms: -5 is out of range"):
        dataclasses.replace(AudioConfig(), crossfade_ms=-5)
    with pytest.raises(RkvoiceError, match=r"tts\.threads: expected int, got 2\.5"):
        TtsConfig(threads=2.5)  # type: ignore[arg-type]
