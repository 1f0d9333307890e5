"""The composition root: every mode's engines are built here, from the registries, and nowhere else.

Three stages (``hear``, ``answer``, ``speak``), each built unloaded (``StageSpec.build``), then
``load()``-ed and ``close()``-d, and reloaded on SIGHUP when its part of the config (``StageSpec.key``)
changed. ``Hear`` and ``Speak`` keep their engines behind priority gates (rkvoice.gate): the local
turn reaches them through ``Local`` views, a Wyoming server through ``shared()``, so the local turn
always goes first. The daemon runs ``product_plan``, the Wyoming server alone ``serving_stages``,
through a ``StageSet``; the CLI modes build the same stages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from rkvoice.answer.assistant import Assistant
from rkvoice.audio.players import PLAYERS, Player, choose_player
from rkvoice.clock import Clock
from rkvoice.config import Config, zone
from rkvoice.gate import ASR_CALLS, TTS_CALLS, Engines, Local, PriorityGate
from rkvoice.hear.ahead import TranscribeAhead
from rkvoice.hear.asr import AsrEngine, create_asr
from rkvoice.hear.cue import ack_cue
from rkvoice.hear.echo import PlayedAudio, ReferenceTap
from rkvoice.hear.session import HearSession
from rkvoice.hear.sources import AudioSource, microphone
from rkvoice.hear.vad import Segmenter
from rkvoice.hear.wake import PHRASE_SILENCE_S, WakeEngine
from rkvoice.hear.wake_registry import create_wake
from rkvoice.speaker import Speaker
from rkvoice.tts.base import TtsEngine
from rkvoice.tts.registry import CHINESE, TTS, VoiceSpec, create_tts

log = logging.getLogger(__name__)


def default_voice(cfg: Config, name: str | None = None, text: str = CHINESE) -> TtsEngine:
    """The voice for ``text`` (default: answers, in Chinese): ``name``, else the registry's choice
    for the text (unloaded)."""
    return create_tts(cfg, name or None, text)


def installed_voice(cfg: Config, spec: VoiceSpec) -> TtsEngine:
    """An installed voice a Wyoming client names (rkvoice.tts.registry.installed_voices), loaded."""
    engine: TtsEngine = TTS.create(spec.engine, cfg, **dict(spec.kwargs))
    engine.load()
    return engine


def assistant(cfg: Config, clock: Clock | None = None, time_zone: str | None = None, **kwargs: Any) -> Assistant:
    """The assistant (unloaded), answering on the clock of ``time_zone`` (default ``wyoming.time_zone``;
    empty = the system's): the server and its clients may not share one."""
    name = cfg.wyoming.time_zone if time_zone is None else time_zone
    tz = zone(name) if name else None
    return Assistant(cfg, clock, now=lambda: datetime.now(tz).astimezone(tz), **kwargs)  # tz None: the system's zone


def wake_factory(cfg: Config) -> Callable[[Any], Any]:
    """A maker of loaded wake engines for detect streams (asr-match transcribes through ``asr``)."""
    def build(asr: Any) -> Any:
        engine = create_wake(cfg, asr)
        engine.load()
        return engine

    return build


class Hear:
    """ASR + wake + VAD, loaded once (opening the microphone is not part of loading); ``asr_only``:
    the ASR alone."""

    def __init__(self, cfg: Config, asr_only: bool = False) -> None:
        self.cfg = cfg
        self.asr_only = asr_only
        self.asr: AsrEngine | None = None
        self.wake: WakeEngine | None = None
        self.segmenter: Segmenter | None = None
        self.heard: Any = None  # the ASR as the wake and the session call it (gated, maybe ahead)
        self.gate = PriorityGate("asr")

    def load(self) -> None:
        self.asr = create_asr(self.cfg)
        self.asr.load()
        if self.asr_only:
            return
        local = Local(self.asr, self.gate, ASR_CALLS)
        ahead = self.cfg.hear.transcribe_ahead
        self.heard = TranscribeAhead(local) if ahead else local
        self.wake = wake_factory(self.cfg)(self.heard)
        self.segmenter = Segmenter(self.cfg, early_silence_s=PHRASE_SILENCE_S if ahead else 0.0)
        self.segmenter.load()

    def session(self) -> HearSession:
        assert self.asr is not None and self.wake is not None and self.segmenter is not None, "load() first"
        return HearSession(self.cfg, self.heard, self.wake, self.segmenter)

    def close(self) -> None:
        if isinstance(self.heard, TranscribeAhead):
            self.heard.close()
        for engine in (self.wake, self.asr):
            getattr(engine, "close", lambda: None)()


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
        log.info("loaded %s in %.0f ms", getattr(self.tts, "name", "tts"), (time.monotonic() - t0) * 1000)
        if self._player_factory is None:
            return
        self.player = ReferenceTap(self._player_factory(self.cfg), self.played, self._clock)
        self.speaker = Speaker(Local(self.tts, self.gate, TTS_CALLS), self.player, self.cfg, self._clock)
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


def shared(cfg: Config, hear: Hear, answer: Assistant, speak: Speak,
           answer_gate: PriorityGate | None = None) -> Engines:
    """The loaded stages for remote (Wyoming) callers: the same engines behind the same gates."""
    assert hear.asr is not None and speak.tts is not None, "load() first"
    return Engines(asr=hear.asr, tts=speak.tts, assistant=answer, wake_factory=wake_factory(cfg),
                   asr_gate=hear.gate, tts_gate=speak.gate, answer_gate=answer_gate or PriorityGate("answer"))


def hear_key(cfg: Config) -> object:
    return (cfg.hear, cfg.models)


def answer_key(cfg: Config) -> object:
    return (cfg.llm, cfg.models, cfg.state, cfg.wyoming.time_zone)


def speak_key(cfg: Config) -> object:
    a = cfg.audio
    return (cfg.tts, cfg.models, cfg.hear.ack, cfg.hear.ack_text, a.player, a.device, a.output_rate,
            a.block_ms, a.crossfade_ms)


@dataclass(frozen=True)
class StageSpec:
    """One resident stage: which config it depends on and how to build it (unloaded)."""

    name: str
    key: Callable[[Config], Any]
    """The part of the config the stage depends on; a change reloads it on SIGHUP."""
    build: Callable[[Config], Any]
    """Returns the stage, not yet loaded (``load()`` does the heavy work)."""


@dataclass(frozen=True)
class Plan:
    """Everything the daemon runs: the "hear", "answer" and "speak" stages and the audio source."""

    stages: tuple[StageSpec, ...]
    source: Callable[[Config], AudioSource]
    """Opens the microphone (or a scripted stand-in); raises RkvoiceError("audio", "device-...")."""


def product_plan(cfg: Config, source: Callable[[Config], AudioSource] | None = None,
                 player: Callable[[Config], Player] | None = None) -> Plan:
    """The daemon's real stages; ``source``/``player`` replace the microphone/player (the soak)."""
    return Plan(
        stages=(
            StageSpec("hear", hear_key, Hear),
            StageSpec("answer", answer_key, assistant),
            StageSpec("speak", speak_key, lambda c: Speak(c, player or daemon_player)),
        ),
        source=source or microphone,
    )


def serving_stages(time_zone: str) -> tuple[StageSpec, ...]:
    """The Wyoming server's stages when it runs alone: the ASR, the assistant answering in
    ``time_zone``, the default voice."""
    return (
        StageSpec("hear", hear_key, lambda c: Hear(c, asr_only=True)),
        StageSpec("answer", answer_key, lambda c: assistant(c, time_zone=time_zone)),
        StageSpec("speak", speak_key, Speak),
    )


class StageSet:
    """Holds one loaded stage per StageSpec, with the config key it was loaded for."""

    def __init__(self, specs: tuple[StageSpec, ...], on_progress: Callable[[str], None] | None = None):
        self.specs = specs
        self.engines: dict[str, Any] = {}
        self._keys: dict[str, Any] = {}
        self._progress = on_progress or (lambda _msg: None)

    def _load(self, spec: StageSpec, cfg: Config) -> Any:
        self._progress(f"loading {spec.name}")
        t0 = time.monotonic()
        engine = spec.build(cfg)
        engine.load()
        log.info("loaded %s (%s) in %.2f s", spec.name, type(engine).__name__, time.monotonic() - t0)
        return engine

    def load_all(self, cfg: Config) -> None:
        for spec in self.specs:
            self.engines[spec.name] = self._load(spec, cfg)
            self._keys[spec.name] = spec.key(cfg)

    def reload(self, old_cfg: Config, new_cfg: Config) -> list[str]:
        """Reload the stages whose config key changed; returns their names. The old stage is closed before
        the new one loads (the board has no RAM for two LLMs); if that fails, the old config is loaded
        back and the error re-raised (fatal to the process if even that fails)."""
        changed = [s for s in self.specs if s.key(new_cfg) != self._keys.get(s.name)]
        for spec in changed:
            _close(spec.name, self.engines.pop(spec.name, None))
            try:
                self.engines[spec.name] = self._load(spec, new_cfg)
            except Exception as exc:
                log.error("reloading %s failed (%s); restoring the previous config", spec.name, exc)
                try:
                    self.engines[spec.name] = self._load(spec, old_cfg)
                except Exception as again:
                    log.critical("restoring %s failed too: %s", spec.name, again)
                raise
            self._keys[spec.name] = spec.key(new_cfg)
        return [s.name for s in changed]

    def close_all(self) -> None:
        for spec in reversed(self.specs):
            _close(spec.name, self.engines.pop(spec.name, None))


def _close(name: str, engine: Any) -> None:
    try:
        getattr(engine, "close", lambda: None)()  # None (never loaded) has no close either
    except Exception as exc:
        log.error("closing %s failed: %s", name, exc)
