"""The ``info`` answer to ``describe``: one program per service (asr, tts with every installed voice,
wake, handle), each with the languages its engines declare and their variants (languages.py)."""

from __future__ import annotations

from typing import Any

from wyoming.info import (
    AsrModel,
    AsrProgram,
    Attribution,
    HandleModel,
    HandleProgram,
    Info,
    TtsProgram,
    TtsVoice,
    TtsVoiceSpeaker,
    WakeModel,
    WakeProgram,
)

from rkvoice import __version__
from rkvoice.config import Config
from rkvoice.hear.wake_registry import WAKE, wake_name

from .languages import announced
from .tts import Voices, speaker_count

OURS: dict[str, Any] = {"attribution": Attribution(name="rkvoice", url=""), "installed": True, "version": __version__}
"""What every program and model here says of itself."""
HANDLE_LANGUAGES = ["zh"]
"""The assistant's: its prompts and tools are Chinese. The engines declare their own languages."""


def build_info(cfg: Config, asr: Any, voices: Voices, llm_name: str) -> Info:
    from pypinyin import lazy_pinyin

    asr_name = str(getattr(asr, "name", "asr"))
    tts_voices = []
    for spec in voices.specs.values():
        loaded = voices.engines.voices.get(spec.name)
        count = speaker_count(loaded) if loaded is not None else 1
        tts_voices.append(TtsVoice(
            name=spec.name, description=f"{spec.engine} voice" + (" (default)" if spec.name == voices.default else ""),
            languages=announced(spec.languages), speakers=[TtsVoiceSpeaker(name=str(i)) for i in range(count)]
            if count > 1 else None, **OURS,
        ))
    phrase = cfg.hear.wake_phrase
    wake_word = "".join(lazy_pinyin(phrase)) or "wake"  # its name here and in detection: pinyin, no spaces or tones
    return Info(
        asr=[AsrProgram(
            name="rkvoice-asr", description=f"rkvoice speech recognition ({asr_name})", **OURS,
            supports_transcript_streaming=False,
            models=[AsrModel(name=asr_name, description=asr_name, languages=announced(asr.languages), **OURS)],
        )],
        tts=[TtsProgram(name="rkvoice-tts", description="rkvoice speech synthesis", voices=tts_voices,
                        supports_synthesize_streaming=True, **OURS)],
        wake=[WakeProgram(
            name="rkvoice-wake", description=f"rkvoice wake word ({cfg.hear.wake})", **OURS,
            models=[WakeModel(name=wake_word, description=phrase, phrase=phrase,
                              languages=announced(WAKE.target(wake_name(cfg)).languages), **OURS)],
        )],
        handle=[HandleProgram(
            name="rkvoice-handle", description="rkvoice answers: local tools first, else the LLM", **OURS,
            supports_handled_streaming=True,
            models=[HandleModel(name=f"tools+{llm_name}", description="local tools, then the LLM",
                                languages=announced(HANDLE_LANGUAGES), **OURS)],
        )],
    )
