"""The voices Wyoming clients can ask for: every installed voice by name, each loaded on first use."""

from __future__ import annotations

import logging
from typing import Any

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.stages import installed_voice
from rkvoice.tts.registry import installed_voices, text_language

from .engines import Engines
from .languages import primary

log = logging.getLogger(__name__)


def voice_name(engine: Any) -> str:
    """The voice name of a loaded engine (a VITS engine is named by its voice)."""
    voice = getattr(engine, "voice", None)
    return str(getattr(voice, "name", None) or engine.name)


def speaker_count(engine: Any) -> int:
    """How many speakers a loaded engine has (1 when it does not say)."""
    counts = (getattr(engine, attr, None) for attr in ("num_speakers", "_speakers", "_num_speakers"))
    return next((n for n in counts if isinstance(n, int) and n > 0), 1)


class Voices:
    """Resolves a requested voice to a loaded engine; each voice is loaded once, on first use."""

    def __init__(self, cfg: Config, engines: Engines) -> None:
        self.cfg = cfg
        self.engines = engines
        self.specs = installed_voices(cfg)
        self.default = voice_name(engines.tts)
        engines.voices.setdefault(self.default, engines.tts)

    def choose(self, name: str | None, language: str | None, text: str) -> str:
        """The voice to use: by name, else the default voice if it speaks the language (given, or of
        the text), else the first installed voice that does, else the default voice."""
        if name:
            if name not in self.specs and name != self.default:
                raise RkvoiceError(
                    Stage.WYOMING, "unknown-voice",
                    f"unknown voice {name!r}; installed voices: {', '.join(sorted(self.specs))}",
                )
            return name
        lang = primary(language or text_language(text) if (language or text) else "zh")
        default_spec = self.specs.get(self.default)
        if default_spec is None or lang in default_spec.languages:
            return self.default
        return next((spec.name for spec in self.specs.values() if lang in spec.languages), self.default)

    def engine(self, name: str) -> Any:
        """The loaded engine of voice ``name`` (blocking: loads it the first time)."""
        with self.engines.voices_lock:
            engine = self.engines.voices.get(name)
            if engine is None:
                log.info("loading voice %s for Wyoming clients", name)
                engine = installed_voice(self.cfg, self.specs[name])
                self.engines.voices[name] = engine
            return engine

    def sid(self, engine: Any, speaker: str | None) -> int:
        count = speaker_count(engine)
        if not speaker:
            return self.cfg.tts.sid if self.cfg.tts.sid < count else 0
        if not speaker.isdigit() or int(speaker) >= count:
            raise RkvoiceError(
                Stage.WYOMING, "unknown-speaker",
                f"voice {voice_name(engine)} has speakers 0-{count - 1}; got speaker {speaker!r}",
            )
        return int(speaker)
