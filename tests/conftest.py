"""Shared pytest fixtures (each helper adds its own, additively)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (a hash of each test picks them), so a CI run
# never fails on an input no earlier run saw: the suite passes or fails the same way every time.
# To hunt for new inputs: RKVOICE_HYPOTHESIS=explore (random draws; what fails is saved in
# .hypothesis/ and replayed first next time) -- then pin the case as a plain test.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("RKVOICE_HYPOTHESIS", "ci"))

# --- hear helper fixtures: speech made by the project's own portable voice ------------------------

HEAR_FIXTURES = {
    # name: (text spoken, wake expected, request expected after the wake phrase or "" )
    "req_weather": ("今天天气怎么样", False, "今天天气怎么样"),
    "req_alarm": ("帮我设置一个明天早上七点的闹钟", False, "帮我设置一个明天早上七点的闹钟"),
    "req_joke": ("给我讲一个笑话", False, "给我讲一个笑话"),
    "req_time": ("现在几点了", False, "现在几点了"),
    "wake_request": ("小智小智，现在几点", True, "现在几点"),
    "wake_alone": ("小智小智", True, ""),
    "unrelated": ("我们明天一起去公园散步吧", False, "我们明天一起去公园散步吧"),
    "silence": ("", False, ""),
    "noise": ("", False, ""),
}


def _hear_tts(cfg):
    try:
        from rkvoice.tts.registry import create_tts
    except ImportError:  # the registry lands with the voice helper; the engine is the same
        from rkvoice.tts.fastspeech2 import FastSpeech2Tts

        return FastSpeech2Tts(cfg)
    return create_tts(cfg, "fastspeech2")


@pytest.fixture(scope="session")
def hear_voice():
    """The portable FastSpeech2 voice, loaded once (skips when its model files are absent)."""
    from rkvoice.config import load_config

    cfg = load_config()
    model = cfg.models.path / "portable" / "fastspeech2" / "fastspeech2.onnx"
    if not model.is_file():
        pytest.skip(f"portable voice model {model} is absent (run ./install.sh)")
    tts = _hear_tts(cfg)
    tts.load()
    return tts


@pytest.fixture(scope="session")
def hear_fixtures(hear_voice, tmp_path_factory):
    """name -> (wav path, text, wake expected, request expected). WAVs at the voice's own rate."""
    import numpy as np
    import soundfile as sf

    out = tmp_path_factory.mktemp("hear_fixtures")
    rng = np.random.default_rng(7)
    result = {}
    for name, (text, wake, request) in HEAR_FIXTURES.items():
        if name == "noise":
            rate = 16000
            audio = (rng.standard_normal(3 * rate) * 0.05).astype(np.float32)
        elif name == "silence":
            rate = 16000
            audio = np.zeros(3 * rate, np.float32)
        else:
            speech, rate = hear_voice.generate(text)
            pad = np.zeros(rate // 2, np.float32)
            audio = np.concatenate([pad, speech, pad, pad]).astype(np.float32)
        path = out / f"{name}.wav"
        sf.write(path, audio, rate)
        result[name] = (path, text, wake, request)
    return result


@pytest.fixture(scope="session")
def hear_asr():
    """Whisper base, loaded and warmed up once (skips when it is not installed)."""
    from fakes import CountingWhisper

    from rkvoice.config import load_config
    from rkvoice.hear.whisper_asr import FILES, whisper_dir

    cfg = load_config()
    missing = [f for f in FILES if not (whisper_dir(cfg) / f).is_file()]
    if missing:
        pytest.skip(f"Whisper base files {missing} absent in {whisper_dir(cfg)} (run ./install.sh)")
    pytest.importorskip("faster_whisper", reason="faster-whisper is not installed (requirements/portable.txt)")
    asr = CountingWhisper(cfg)  # the real engine; test_wake_latency counts its encoder runs
    asr.load()
    return asr


@pytest.fixture(scope="session")
def hearing_standins():
    """The board-hearing stand-in models, built once per builder (models/standins/hearing_cache.py);
    skips, naming the command that builds them, where they are neither built nor buildable."""
    from models.standins import hearing_cache

    try:
        return hearing_cache.ensure()
    except hearing_cache.Unavailable as err:
        pytest.skip(str(err))
