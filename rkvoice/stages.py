"""The composition root: every mode's engines are built here, from the registries, and nowhere else.

Three stages (``hear``, ``answer``, ``speak``), each built unloaded (``StageSpec.build``), then
``load()``-ed and ``close()``-d, and reloaded on SIGHUP when a field of a config section it reads
(``StageSpec.reads``) changed. ``Hear`` and ``Speak`` keep their engines behind priority gates
(rkvoice.gate): the local turn reaches them through gated views at local priority, a Wyoming server
(rkvoice.wyoming.engines) through the same gates at remote priority, so the local turn always goes
first. The daemon runs ``product_plan``, the Wyoming server alone ``serving_stages``, through a
``StageSet`` whose loaded ``Stages`` it hands on; the CLI modes build the same stages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Generic, Protocol, TypeVar

import numpy as np

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.llm.base import LlmEngine
from rkvoice.audio.players import PLAYERS, Player, choose_player
from rkvoice.clock import Clock
from rkvoice.config import Config
from rkvoice.config_ha import zone
from rkvoice.gate import GatedAsr, GatedTts, Local, PriorityGate, gated_asr
from rkvoice.hear.ahead import TranscribeAhead
from rkvoice.hear.asr import AsrEngine, create_asr
from rkvoice.hear.cue import ack_cue
from rkvoice.hear.echo import PlayedAudio, ReferenceTap
from rkvoice.hear.session import HearSession
from rkvoice.hear.sources import AudioSource, microphone
from rkvoice.hear.turn_end import request_end
from rkvoice.hear.vad import Segmenter
from rkvoice.hear.wake import PHRASE_SILENCE_S, WakeEngine
from rkvoice.hear.wake_registry import create_wake
from rkvoice.speaker import Speaker
from rkvoice.text import words
from rkvoice.tts.base import TtsEngine
from rkvoice.tts.registry import CHINESE, TTS, VoiceSpec, create_tts, with_other_language

log = logging.getLogger(__name__)


def default_voice(cfg: Config, name: str | None = None, text: str = CHINESE) -> TtsEngine:
    """The voice for ``text`` (default: answers, in Chinese): ``name``, else the registry's choice
    for the text (unloaded)."""
    return create_tts(cfg, name or None, text)


def installed_voice(cfg: Config, spec: VoiceSpec) -> TtsEngine:
    """An installed voice a Wyoming client names (rkvoice.tts.registry.installed_voices), loaded; the
    other language's spans go to its voice, as for ``create_tts``."""
    engine = with_other_language(cfg, TTS.create(spec.engine, cfg, **dict(spec.kwargs)))
    engine.load()
    return engine


def assistant(cfg: Config, clock: Clock | None = None, time_zone: str | None = None,
              llm: LlmEngine | None = None) -> Assistant:
    """The assistant (unloaded), answering on the clock of ``time_zone`` (default ``wyoming.time_zone``;
    empty = the system's): the server and its clients may not share one. ``llm`` replaces the
    configured model (a test's scripted one)."""
    name = cfg.wyoming.time_zone if time_zone is None else time_zone
    tz = zone(name) if name else None
    return Assistant(cfg, clock, llm=llm, now=lambda: datetime.now(tz).astimezone(tz))  # tz None: the system's zone


def wake_factory(cfg: Config) -> Callable[[AsrEngine], WakeEngine]:
    """A maker of loaded wake engines for detect streams (asr-match transcribes through ``asr``)."""
    def build(asr: AsrEngine) -> WakeEngine:
        engine = create_wake(cfg, asr)
        engine.load()
        return engine

    return build


class Hear:
    """ASR + wake + VAD with the end-of-turn decision (``rkvoice.hear.turn_end.request_end``), loaded once
    (opening the microphone is not part of loading); ``asr_only``: the ASR alone."""

    def __init__(self, cfg: Config, asr_only: bool = False) -> None:
        self.cfg = cfg
        self.asr_only = asr_only
        self.asr: AsrEngine | None = None
        self.wake: WakeEngine | None = None
        self.segmenter: Segmenter | None = None
        self.heard: GatedAsr | TranscribeAhead | None = None
        """The ASR as the wake engine and the session call it: gated, maybe transcribing ahead."""
        self.gate = PriorityGate("asr")

    def load(self) -> None:
        self.asr = create_asr(self.cfg)
        self.asr.load()
        if self.asr_only:
            return
        local = gated_asr(self.asr, Local(self.gate))
        ahead = self.cfg.hear.transcribe_ahead
        self.heard = TranscribeAhead(local) if ahead else local
        self.wake = wake_factory(self.cfg)(self.heard)
        self.segmenter = request_end(self.cfg, early_silence_s=PHRASE_SILENCE_S if ahead else 0.0)
        self.segmenter.load()

    def session(self) -> HearSession:
        assert self.asr is not None and self.wake is not None and self.segmenter is not None, "load() first"
        return HearSession(self.cfg, self.heard or self.asr, self.wake, self.segmenter)

    def close(self) -> None:
        if isinstance(self.heard, TranscribeAhead):
            self.heard.close()
        for engine in (self.wake, self.asr):
            close = getattr(engine, "close", None)  # not every engine holds something to free
            if close is not None:
                close()


class Speak:
    """The voice (``tts``, default ``default_voice``); with ``player`` (a maker of an opened Player)
    also the pipelined speaker into it and, with ``cue``, the wake cue, made with the same voice (a
    4 GB board has no room for a second one). ``clock`` (default: the real one) paces the speaker and
    stamps the played audio (the echo reference) with the time it is heard."""

    def __init__(self, cfg: Config, player: Callable[[Config], Player] | None = None,
                 tts: Callable[[Config], TtsEngine] | None = None, clock: Clock | None = None,
                 cue: bool = True) -> None:
        self.cfg = cfg
        self._player_factory = player
        self._tts_factory = tts or default_voice
        self._clock = clock
        self._cue = cue
        self.tts: TtsEngine | None = None
        self.player: Player | None = None
        self.speaker: Speaker | None = None
        self.cue = np.zeros(0, dtype=np.float32)
        self.gate = PriorityGate("tts")
        self.played = PlayedAudio()
        """Every block the player was handed, at the time it is heard: the echo canceller's reference."""

    def load(self) -> None:
        self.tts = self._tts_factory(self.cfg)
        t0 = time.monotonic()
        self.tts.load()
        words.warm()  # the piece cutter's word boundaries: loaded now, not in the first answer
        log.info("loaded %s in %.0f ms", self.tts.name, (time.monotonic() - t0) * 1000)
        if self._player_factory is None:
            return
        self.player = ReferenceTap(self._player_factory(self.cfg), self.played, self._clock)
        self.speaker = Speaker(GatedTts(self.tts, Local(self.gate)), self.player, self.cfg, self._clock)
        self.speaker.load()
        if self._cue:
            self.cue = ack_cue(self.cfg, self.tts, self.player.rate)

    def close(self) -> None:
        if self.speaker is not None:
            self.speaker.cancel_all("shutdown")
            self.speaker.close(timeout=0.5)  # its threads are daemon threads: exit stays < 2 s
        if self.player is not None:
            self.player.close()


def daemon_player(cfg: Config) -> Player:
    """The configured player, opened; with ``auto`` and no sound device, a real-time null sink (a
    daemon must not grow a WAV file for weeks)."""
    player: Player = PLAYERS.create(choose_player(cfg, daemon=True), cfg)
    player.open()
    return player


class Stage(Protocol):
    """What the composition root does with a stage: load it (the heavy work), close it."""

    def load(self) -> None: ...

    def close(self) -> None: ...


S = TypeVar("S", bound=Stage)
SECTIONS = tuple(f.name for f in fields(Config))


@dataclass(frozen=True)
class StageSpec(Generic[S]):
    """One resident stage: the config sections it reads and how to build it (unloaded)."""

    name: str
    reads: tuple[str, ...]
    """The config sections the stage reads (attributes of Config): a change in any of their fields
    reloads it on SIGHUP."""
    build: Callable[[Config], S]
    """Returns the stage, not yet loaded (``load()`` does the heavy work)."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.reads if r not in SECTIONS]
        if unknown:
            raise ValueError(f"stage {self.name} reads unknown config sections {unknown}; sections: {SECTIONS}")

    def key(self, cfg: Config) -> tuple[object, ...]:
        """The sections it reads, as they are in ``cfg`` (frozen dataclasses: equal when every field is)."""
        return tuple(getattr(cfg, section) for section in self.reads)


HEAR_READS = ("hear", "models")
ANSWER_READS = ("llm", "models", "state", "home_assistant", "hear", "wyoming")
"""The assistant's name comes from hear.wake_phrase, its clock from wyoming.time_zone."""
SPEAK_READS = ("tts", "audio", "models", "hear")
"""The wake cue is hear.ack / hear.ack_text."""


def hear_spec(build: Callable[[Config], Hear]) -> StageSpec[Hear]:
    return StageSpec("hear", HEAR_READS, build)


def answer_spec(build: Callable[[Config], Assistant]) -> StageSpec[Assistant]:
    return StageSpec("answer", ANSWER_READS, build)


def speak_spec(build: Callable[[Config], Speak]) -> StageSpec[Speak]:
    return StageSpec("speak", SPEAK_READS, build)


@dataclass(frozen=True)
class StageSpecs:
    """How to build the three stages."""

    hear: StageSpec[Hear]
    answer: StageSpec[Assistant]
    speak: StageSpec[Speak]


@dataclass(frozen=True)
class Stages:
    """The three loaded stages."""

    hear: Hear
    answer: Assistant
    speak: Speak


@dataclass(frozen=True)
class Plan:
    """Everything the daemon runs: the stages and the audio source."""

    stages: StageSpecs
    source: Callable[[Config], AudioSource]
    """Opens the microphone (or a scripted stand-in); raises RkvoiceError("audio", "device-...")."""


def product_plan(cfg: Config, source: Callable[[Config], AudioSource] | None = None,
                 player: Callable[[Config], Player] | None = None) -> Plan:
    """The daemon's real stages; ``source``/``player`` replace the microphone/player (the soak)."""
    return Plan(
        stages=StageSpecs(hear_spec(Hear), answer_spec(assistant),
                          speak_spec(lambda c: Speak(c, player or daemon_player))),
        source=source or microphone,
    )


def serving_stages(time_zone: str) -> StageSpecs:
    """The Wyoming server's stages when it runs alone: the ASR, the assistant answering in
    ``time_zone``, the default voice."""
    return StageSpecs(hear_spec(lambda c: Hear(c, asr_only=True)),
                      answer_spec(lambda c: assistant(c, time_zone=time_zone)), speak_spec(Speak))


class _Slot(Generic[S]):
    """One stage of a StageSet: its spec, the loaded stage (None while there is none) and its key."""

    def __init__(self, spec: StageSpec[S]) -> None:
        self.spec = spec
        self.stage: S | None = None
        self.key: tuple[object, ...] = ()

    def get(self) -> S:
        if self.stage is None:
            raise RuntimeError(f"the {self.spec.name} stage is not loaded")
        return self.stage

    def load(self, cfg: Config) -> None:
        t0 = time.monotonic()
        stage = self.spec.build(cfg)
        stage.load()
        log.info("loaded %s (%s) in %.2f s", self.spec.name, type(stage).__name__, time.monotonic() - t0)
        self.stage, self.key = stage, self.spec.key(cfg)

    def close(self) -> None:
        stage, self.stage = self.stage, None
        if stage is None:
            return
        try:
            stage.close()
        except Exception as exc:
            log.error("closing %s failed: %s", self.spec.name, exc)


_StageSlot = _Slot[Hear] | _Slot[Assistant] | _Slot[Speak]


class StageSet:
    """Holds the loaded stages of ``specs``, each with the config key it was loaded for."""

    def __init__(self, specs: StageSpecs, on_progress: Callable[[str], None] | None = None):
        self.specs = specs
        self._hear, self._answer, self._speak = _Slot(specs.hear), _Slot(specs.answer), _Slot(specs.speak)
        self._progress = on_progress or (lambda _msg: None)

    def _slots(self) -> tuple[_StageSlot, ...]:
        return self._hear, self._answer, self._speak

    @property
    def stages(self) -> Stages:
        """The loaded stages (RuntimeError when one is not loaded: see ``complete``)."""
        return Stages(self._hear.get(), self._answer.get(), self._speak.get())

    @property
    def complete(self) -> bool:
        """Whether every stage is loaded (a failed reload whose restore failed too leaves one out)."""
        return all(slot.stage is not None for slot in self._slots())

    @property
    def loaded(self) -> list[str]:
        """The names of the loaded stages."""
        return [slot.spec.name for slot in self._slots() if slot.stage is not None]

    def _load(self, slot: _StageSlot, cfg: Config) -> None:
        self._progress(f"loading {slot.spec.name}")
        slot.load(cfg)

    def load_all(self, cfg: Config) -> None:
        for slot in self._slots():
            self._load(slot, cfg)

    def reload(self, old_cfg: Config, new_cfg: Config) -> list[str]:
        """Reload the stages whose config key changed; returns their names. The old stage is closed before
        the new one loads (the board has no RAM for two LLMs); if that fails, the old config is loaded
        back and the error re-raised (fatal to the process if even that fails)."""
        changed = [slot for slot in self._slots() if slot.spec.key(new_cfg) != slot.key]
        for slot in changed:
            slot.close()
            try:
                self._load(slot, new_cfg)
            except Exception as exc:
                log.error("reloading %s failed (%s); restoring the previous config", slot.spec.name, exc)
                try:
                    self._load(slot, old_cfg)
                except Exception as again:
                    log.critical("restoring %s failed too: %s", slot.spec.name, again)
                raise
        return [slot.spec.name for slot in changed]

    def close_all(self) -> None:
        for slot in reversed(self._slots()):
            slot.close()
