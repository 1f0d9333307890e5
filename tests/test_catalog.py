"""The engine is the catalogue: languages and voices come from the engine classes, --check asks the
registry entries instead of naming engines, and the Wyoming ``info`` announces what they declare."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rkvoice.config import Config, ModelsConfig
from rkvoice.hear.asr import ASR
from rkvoice.hear.wake_registry import WAKE
from rkvoice.needs import Probe
from rkvoice.registry import Registry
from rkvoice.tts.registry import TTS, engine_languages, engine_voices, installed_voices
from rkvoice.tts.vits import VOICES

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("registry", [ASR, WAKE], ids=["asr", "wake"])
def test_every_hearing_engine_class_declares_its_languages(registry: Registry) -> None:
    for name in registry.names():
        langs = registry.target(name).languages
        assert langs and all(isinstance(lang, str) and lang == lang.lower() for lang in langs), name


def test_tts_voices_come_from_the_engine_classes() -> None:
    assert [v.name for v in engine_voices("vits")] == list(VOICES)  # one per entry of VitsTts.voices
    assert all(dict(v.kwargs) == {"voice": v.name} and v.languages == VOICES[v.name].languages
               for v in engine_voices("vits"))
    for name in ("fastspeech2", "matcha"):
        (voice,) = engine_voices(name)
        assert (voice.name, voice.kwargs, voice.languages) == (name, (), TTS.target(name).languages)


def test_installed_voices_and_languages_follow_the_files(tmp_path: Path) -> None:
    cfg = Config(models=ModelsConfig(dir=str(tmp_path)))
    everything = Probe(module=lambda name: True)
    assert installed_voices(cfg, everything) == {} and engine_languages(cfg, everything) == {}
    d = tmp_path / "portable" / "piper-joe"  # the Piper voice's files (rkvoice.tts.registry.vits_needs)
    for need in TTS.needs("vits", cfg, voice="piper-joe").files:
        need.paths[0].parent.mkdir(parents=True, exist_ok=True)
        need.paths[0].write_bytes(b"x")
    assert d.is_dir()
    assert list(installed_voices(cfg, everything)) == ["piper-joe"]
    assert engine_languages(cfg, everything) == {"vits": ("en",)}
    assert installed_voices(cfg, Probe(module=lambda name: False)) == {}  # its runtime is not importable


def test_check_names_no_engine() -> None:
    """--check asks each stage's registry (needs, then the entry's ``check``); no engine name in its code."""
    from rkvoice.answer.llm.registry import LLM

    engines = {n for reg in (ASR, WAKE, TTS, LLM) for n in reg.names()}
    tree = ast.parse((ROOT / "rkvoice" / "cli" / "check.py").read_text(encoding="utf-8"))
    named = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in engines}
    assert not named


def test_wyoming_info_announces_the_declared_languages(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wyoming")
    from rkvoice.wyoming import info

    class Asr:
        name = "scripted"
        languages = ("en",)

    class Wake:
        languages = ("en",)

    monkeypatch.setattr(WAKE, "target", lambda name: Wake)  # the configured wake engine's class
    voices = type("Voices", (), {"specs": {}, "default": None, "engines": None})()
    built = info.build_info(Config(), Asr(), voices, "llama")
    assert built.asr[0].models[0].languages[0] == "en"
    assert built.wake[0].models[0].languages[0] == "en"


def test_installed_voices_come_in_the_order_preferred_for_chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Wyoming voice choice takes the first installed voice that speaks a language: Matcha before
    FastSpeech2 before the VITS voices, as the daemon prefers them."""
    monkeypatch.setattr("rkvoice.tts.registry.installed", lambda needs, probe=None: True)
    assert list(installed_voices(Config())) == ["matcha", "fastspeech2", *VOICES]
