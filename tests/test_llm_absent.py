"""A board without its RKLLM model: the assistant loads and answers; a question for the language model
gets one spoken sentence saying it is not installed and naming what the local tools do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fakes import SeenTimeline, SteppedSpeaker
from test_answer import NOW, FakeTts, ask

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.llm.absent import NotInstalledLlm, not_installed_sentence
from rkvoice.answer.llm.registry import RUNS_WITHOUT, create_llm, not_installed
from rkvoice.answer.respond import Answerer
from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config, HomeAssistantConfig, LlmConfig, ModelsConfig, StateConfig
from rkvoice.installer.manifest import load_manifest
from rkvoice.stages import assistant as build_assistant
from rkvoice.state import StateStore
from tests.support import FakeClock

ROOT = Path(__file__).resolve().parents[1]


def board_cfg(tmp_path: Path, **llm: object) -> Config:
    return Config(models=ModelsConfig(dir=str(tmp_path / "models"), profile="board"),
                  state=StateConfig(dir=str(tmp_path / "state")), llm=dataclasses.replace(LlmConfig(), **llm))


def test_a_question_for_the_llm_gets_one_spoken_sentence_and_tools_still_answer(tmp_path):
    cfg = board_cfg(tmp_path)
    clock = FakeClock()
    tts = FakeTts()
    speaker = SteppedSpeaker(tts, NullPlayer(cfg, clock), cfg, clock)
    speaker.load()
    assistant = Assistant(cfg, clock, now=lambda: NOW, store=StateStore(tmp_path / "state"))
    assistant.load()  # the daemon's answer stage loads without the model
    try:
        assert isinstance(assistant.llm, NotInstalledLlm)
        answerer = Answerer(assistant, speaker, cfg)
        turn = ask(answerer, "给我讲个故事吧", SeenTimeline(clock, lambda e: None))
        sentence = not_installed_sentence(cfg)
        assert turn.route == "llm" and turn.result == sentence
        spoken = "".join(tts.calls)
        assert spoken.startswith("语言模型还没有安装") and spoken.count("。") == 1 and spoken.endswith("。")
        for can in ("报时", "提醒", "待办", "算术"):
            assert can in spoken
        assert ask(answerer, "现在几点", SeenTimeline(clock, lambda e: None)).route == "tool:time"
    finally:
        speaker.close()
        assistant.close()


def test_the_sentence_names_home_assistant_only_when_it_is_configured(tmp_path):
    cfg = board_cfg(tmp_path)
    assert "Home Assistant" not in not_installed_sentence(cfg)
    ha = dataclasses.replace(cfg, home_assistant=HomeAssistantConfig(url="http://homeassistant.local:8123"))
    assert "通过Home Assistant控制家里的设备" in not_installed_sentence(ha)


def test_the_daemon_composition_root_builds_and_loads_the_answer_stage_without_the_model(tmp_path):
    stage = build_assistant(board_cfg(tmp_path))
    stage.load()
    stage.close()


def test_an_installed_model_is_the_real_engine(tmp_path):
    model = tmp_path / "mine.rkllm"
    cfg = board_cfg(tmp_path, model=str(model))
    assert not_installed(cfg, "rkllm") == f"missing {model}"
    model.write_bytes(b"x" * 100)
    assert not_installed(cfg, "rkllm") is None
    assert type(create_llm(cfg)).__name__ == "RkllmEngine"  # built, not loaded


def test_the_engines_run_without_are_the_optional_llm_models_of_the_manifest():
    m = load_manifest(ROOT / "models" / "manifest.yaml")
    assert {x.engine for x in m.models if x.stage == "llm" and x.optional} == set(RUNS_WITHOUT)
