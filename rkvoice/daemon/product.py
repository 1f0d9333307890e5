"""The product's stages (hear, answer, speak) and the live host that runs the turn loop over them.

Three resident engines, each reloaded on SIGHUP only when its part of the config changed:

- ``hear``: ASR, wake engine and VAD segmenter (rkvoice.hear);
- ``answer``: rkvoice.answer.assistant.Assistant (tools, LLM, state, reminders);
- ``speak``: TTS engine + player + rkvoice.speaker.Speaker, and the wake cue (made with the same
  voice: a 4 GB board has no room for a second one).

The loop reaches the ASR, the voice and the assistant through priority gates
(rkvoice.gate) at local priority, so a Wyoming server on the same engines (``wyoming.uri``)
always lets the local turn go first: it waits at most for one transcription or one synthesised
piece, and a Wyoming answer holding the LLM is stopped.

``LiveHost.run`` runs rkvoice.hear.loop.TurnLoop on the microphone until ``interrupt()``; the
supervisor's additions are the loop's hooks: ``busy`` marks work for the watchdog, ``on_turn`` and
``on_error`` report turns and hearing failures to be counted and apologised for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.respond import Answerer
from rkvoice.audio.players import Player, choose_player, create_player
from rkvoice.config import Config
from rkvoice.gate import Engines, LocalAsr, LocalAssistant, LocalTts, PriorityGate
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.loop import TurnLoop, player_cue
from rkvoice.hear.session import HearSession
from rkvoice.hear.sources import AudioSource
from rkvoice.hear.vad import Segmenter
from rkvoice.hear.wake import WakeEngine
from rkvoice.speaker import Speaker
from rkvoice.tts.base import TtsEngine
from rkvoice.turn import Turn

from .stages import Plan, StageSpec

log = logging.getLogger(__name__)


class Host(Protocol):
    """What the supervisor offers the loop it hosts."""

    def report(self, result: Turn | BaseException) -> None:
        """A turn is over (the handle), or hearing failed (the exception): logged, counted,
        apologised for when it failed."""

    def busy(self, what: str) -> AbstractContextManager[None]:
        """Marks work that must finish: stuck in it for ``daemon.stall_s`` -> no watchdog pings."""


class HearEngines:
    """ASR + wake + VAD, loaded once. Opening the microphone is not part of loading."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.asr: AsrEngine | None = None
        self.wake: WakeEngine | None = None
        self.segmenter: Segmenter | None = None
        self.gate = PriorityGate("asr")

    def load(self) -> None:
        from rkvoice.hear.asr import create_asr
        from rkvoice.hear.wake_registry import create_wake

        self.asr = create_asr(self.cfg)
        self.asr.load()
        self.wake = create_wake(self.cfg, LocalAsr(self.asr, self.gate))
        self.wake.load()
        self.segmenter = Segmenter(self.cfg)
        self.segmenter.load()

    def session(self) -> HearSession:
        assert self.asr is not None and self.wake is not None and self.segmenter is not None, "load() first"
        return HearSession(self.cfg, LocalAsr(self.asr, self.gate), self.wake, self.segmenter)

    def close(self) -> None:
        for engine in (self.wake, self.asr):
            getattr(engine, "close", lambda: None)()


class SpeakEngines:
    """TTS engine + opened player + the pipelined speaker + the wake cue."""

    def __init__(self, cfg: Config, player: Callable[[Config], Player] | None = None,
                 tts: Callable[[Config], TtsEngine] | None = None) -> None:
        self.cfg = cfg
        self._player_factory = player or daemon_player
        self._tts_factory = tts or _daemon_voice
        self.tts: TtsEngine | None = None
        self.player: Player | None = None
        self.speaker: Speaker | None = None
        self.cue = np.zeros(0, dtype=np.float32)
        self.gate = PriorityGate("tts")

    def load(self) -> None:
        from rkvoice.hear.cue import AckCue

        self.tts = self._tts_factory(self.cfg)
        self.tts.load()
        self.player = self._player_factory(self.cfg)
        self.player.open()
        self.speaker = Speaker(LocalTts(self.tts, self.gate), self.player, self.cfg)
        self.speaker.load()
        cue = AckCue(self.cfg, voice=self.tts, rate=self.player.rate)
        cue.load()
        self.cue = cue.samples

    def close(self) -> None:
        if self.speaker is not None:
            self.speaker.cancel_all("shutdown")
            self.speaker.close(timeout=0.5)  # its threads are daemon threads: exit stays < 2 s
        if self.player is not None:
            self.player.close()


def _daemon_voice(cfg: Config) -> TtsEngine:
    from rkvoice.tts.registry import create_tts

    return create_tts(cfg, None, "你好")  # the daemon speaks Chinese first


def daemon_player(cfg: Config) -> Player:
    """The configured player; with ``auto`` and no sound device, a real-time null sink (a daemon
    must not grow a WAV file for weeks)."""
    return create_player(choose_player(cfg, daemon=True), cfg)


def _microphone(cfg: Config) -> AudioSource:
    from rkvoice.hear.sources import microphone

    return microphone(cfg.audio.input, cfg.audio.input_device)


class LiveHost:
    """The turn loop on the microphone, over loaded engines, for the supervisor."""

    def __init__(self, engines: dict[str, Any], cfg: Config, host: Host,
                 source: Callable[[Config], AudioSource] = _microphone) -> None:
        self.cfg = cfg
        self.host = host
        self.hear: HearEngines = engines["hear"]
        self.assistant: Assistant = engines["answer"]
        self.speak: SpeakEngines = engines["speak"]
        assert self.speak.speaker is not None and self.speak.player is not None, "speak stage not loaded"
        self.speaker: Speaker = self.speak.speaker
        self.source = source
        self.answer_gate = PriorityGate("answer")
        self.answerer = Answerer(LocalAssistant(self.assistant, self.answer_gate), self.speaker, cfg)
        self.assistant.set_reminder_callback(self._remind)
        self.loop = TurnLoop(self.hear.session(), self.answerer, cue=self.speak.cue,
                             cue_out=player_cue(self.speak.player), on_turn=host.report,
                             on_error=host.report, busy=host.busy)

    def shared(self) -> Engines:
        """The loaded engines for a Wyoming server beside this loop, behind the loop's own gates."""
        from rkvoice.wyoming.server import wake_factory

        assert self.hear.asr is not None and self.speak.tts is not None
        return Engines(asr=self.hear.asr, tts=self.speak.tts, assistant=self.assistant,
                       wake_factory=wake_factory(self.cfg), asr_gate=self.hear.gate,
                       tts_gate=self.speak.gate, answer_gate=self.answer_gate)

    def _remind(self, text: str) -> None:
        log.info("reminder due: %r", text)
        self.speaker.speak(text)

    def run(self) -> None:
        """Listen and answer until ``interrupt()`` (or the source ends)."""
        source = self.source(self.cfg)
        log.info("listening (wake phrase %r)", self.cfg.hear.wake_phrase)
        self.loop.run_live(source)

    def interrupt(self, reason: str) -> None:
        """Shutdown or reload: stop speaking now and make ``run`` return."""
        self.loop.interrupt(reason)
        self.speaker.cancel_all(reason)

    def apologise(self, text: str, wait_s: float = 0.0) -> None:
        """Say ``text`` as a turn of its own; with ``wait_s``, until it has played (at most that long)."""
        try:
            turn = self.speaker.speak(text)
            if wait_s > 0:
                self.speaker.wait(turn, wait_s)
        except Exception as exc:
            log.error("could not speak the apology: %s", exc)


def hear_key(cfg: Config) -> object:
    return (cfg.hear, cfg.models)


def answer_key(cfg: Config) -> object:
    return (cfg.llm, cfg.models, cfg.state)


def speak_key(cfg: Config) -> object:
    a = cfg.audio
    return (cfg.tts, cfg.models, cfg.hear.ack, cfg.hear.ack_text, a.player, a.device, a.output_rate,
            a.block_ms, a.crossfade_ms)


def product_plan(cfg: Config, source: Callable[[Config], AudioSource] | None = None,
                 player: Callable[[Config], Player] | None = None) -> Plan:
    """The real engines; ``source``/``player`` replace the microphone/player (the soak)."""
    return Plan(
        stages=(
            StageSpec("hear", hear_key, HearEngines),
            StageSpec("answer", answer_key, Assistant),
            StageSpec("speak", speak_key, lambda c: SpeakEngines(c, player)),
        ),
        source=source or _microphone,
    )
