"""Speech for Wyoming clients: the installed voices by name, and text -> audio events piece by piece.

Text is cut like the local speaker cuts it (``split_for_tts`` with the engine's first/later piece
lengths, the first piece short), each piece made speakable and synthesised on its own, and its
audio sent as soon as it is ready: the client hears the first piece while the rest is synthesised.
A streamed text (``synthesize-start``/``-chunk``/``-stop``) goes through the same ``StreamChunker``
the local turn uses, so the first audio goes out before the client's text has ended.
Every engine call takes the shared TTS gate at Wyoming priority, one piece at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from rkvoice.audio.post import prepare_piece
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.gate import Engines
from rkvoice.speaker import piece_chars
from rkvoice.text.normalize import speakable
from rkvoice.text.split import split_for_tts
from rkvoice.text.stream_chunker import StreamChunker
from rkvoice.tts.registry import TTS, engine_languages, text_language

from .languages import primary

log = logging.getLogger(__name__)

CHUNK_S = 0.1  # audio per audio-chunk event
QUIET_S = 0.3
"""A streamed text quiet this long has its complete clauses spoken without waiting for more."""
Send = Callable[[Event], Awaitable[None]]


@dataclass(frozen=True)
class VoiceSpec:
    name: str
    engine: str
    kwargs: tuple[tuple[str, str], ...]
    languages: tuple[str, ...]


def installed_voices(cfg: Config) -> dict[str, VoiceSpec]:
    """Every installed voice by name: one per engine, and one per installed VITS voice."""
    from rkvoice.needs import installed
    from rkvoice.tts.vits import VOICES

    out: dict[str, VoiceSpec] = {}
    for engine, langs in engine_languages(cfg).items():
        if engine == "vits":
            for v in VOICES.values():
                if installed(TTS.needs("vits", cfg, voice=v.name)):
                    out[v.name] = VoiceSpec(v.name, "vits", (("voice", v.name),), v.languages)
        else:
            out[engine] = VoiceSpec(engine, engine, (), langs)
    return out


def voice_name(engine: Any) -> str:
    """The voice name of a loaded engine (a VITS engine is named by its voice)."""
    voice = getattr(engine, "voice", None)
    return str(getattr(voice, "name", None) or engine.name)


def speaker_count(engine: Any) -> int:
    """How many speakers a loaded engine has (1 when it does not say)."""
    for attr in ("num_speakers", "_speakers", "_num_speakers"):
        n = getattr(engine, attr, None)
        if isinstance(n, int) and n > 0:
            return n
    return 1


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
                    "wyoming", "unknown-voice",
                    f"unknown voice {name!r}; installed voices: {', '.join(sorted(self.specs))}",
                )
            return name
        lang = primary(language or text_language(text) if (language or text) else "zh")
        default_spec = self.specs.get(self.default)
        if default_spec is None or lang in default_spec.languages:
            return self.default
        for spec in self.specs.values():
            if lang in spec.languages:
                return spec.name
        return self.default

    def engine(self, name: str) -> Any:
        """The loaded engine of voice ``name`` (blocking: loads it the first time)."""
        with self.engines.voices_lock:
            engine = self.engines.voices.get(name)
            if engine is None:
                spec = self.specs[name]
                log.info("loading voice %s for Wyoming clients", name)
                engine = TTS.create(spec.engine, self.cfg, **dict(spec.kwargs))
                engine.load()
                self.engines.voices[name] = engine
            return engine

    def sid(self, engine: Any, speaker: str | None) -> int:
        if speaker is None or speaker == "":
            return self.cfg.tts.sid if self.cfg.tts.sid < speaker_count(engine) else 0
        count = speaker_count(engine)
        if not speaker.isdigit() or int(speaker) >= count:
            raise RkvoiceError(
                "wyoming", "unknown-speaker",
                f"voice {voice_name(engine)} has speakers 0-{count - 1}; got speaker {speaker!r}",
            )
        return int(speaker)


class SpeechOut:
    """One synthesis answer: audio-start on the first piece, audio-chunks per piece, audio-stop."""

    def __init__(self, engines: Engines, engine: Any, sid: int, speed: float, send: Send) -> None:
        self.engines = engines
        self.engine = engine
        self.sid = sid
        self.speed = speed
        self.send = send
        self.rate = 0
        self.started = False
        self.pieces = 0

    async def piece(self, text: str) -> None:
        """Synthesise one piece (on the TTS worker, off the event loop) and send its audio."""
        said = speakable(text)
        if not said.strip():
            return
        samples, self.rate = await asyncio.wrap_future(self.engines.synthesize(self.engine, said, self.sid, self.speed))
        block = max(1, int(self.rate * CHUNK_S))
        blocks = prepare_piece(samples, self.rate, self.rate, block, fade_ms=10.0)
        self.pieces += 1
        if not self.started:
            await self.send(AudioStart(rate=self.rate, width=2, channels=1).event())
            self.started = True
        for block in blocks:
            await self.send(AudioChunk(rate=self.rate, width=2, channels=1, audio=block.tobytes()).event())

    async def finish(self) -> None:
        if not self.started:  # nothing speakable: an empty stream at the voice's rate
            self.rate = int(self.engine.sample_rate)
            await self.send(AudioStart(rate=self.rate, width=2, channels=1).event())
        await self.send(AudioStop().event())


def cut(cfg: Config, engine: Any, text: str) -> list[str]:
    first, later = piece_chars(cfg, engine)
    return split_for_tts(text, first=first, chunk=later)


def chunker(cfg: Config, engine: Any) -> StreamChunker:
    first, later = piece_chars(cfg, engine)
    return StreamChunker(first=first, chunk=later)
