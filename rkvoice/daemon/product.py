"""The product's plan: the real engines (hear, answer, speak) and the hear helper's live loop.

Three resident engines, each reloaded on SIGHUP only when its part of the config changed:

- ``hear``: ASR, wake engine, VAD segmenter and the wake cue (rkvoice.hear);
- ``answer``: rkvoice.answer.assistant.Assistant (tools, LLM, state, reminders);
- ``speak``: TTS engine + player + rkvoice.speaker.Speaker.

The turn loop is rkvoice.hear.loop.TurnLoop in live mode (barge-in, follow-up), run by
``LiveHost.run_once`` until stop. The daemon's additions sit at its seams: a responder that
puts a deadline on the answer stream and turns a failed synthesis into a failed turn, a
session whose work is marked busy for the watchdog, and per-turn reports for the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rkvoice.clock import Clock
from rkvoice.config import Config

from .stages import Host, Plan, StageSpec, TurnReport
from .turn import deadline_deltas

log = logging.getLogger(__name__)


class HearEngines:
    """ASR + wake + VAD + cue, loaded once. Opening the microphone is not part of loading."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.asr: Any = None
        self.wake: Any = None
        self.segmenter: Any = None
        self.cue: Any = None

    def load(self) -> None:
        from rkvoice.hear.asr import create_asr
        from rkvoice.hear.cue import AckCue
        from rkvoice.hear.vad import Segmenter
        from rkvoice.hear.wake import create_wake

        self.asr = create_asr(self.cfg)
        self.asr.load()
        self.wake = create_wake(self.cfg, self.asr)
        self.wake.load()
        self.segmenter = Segmenter(self.cfg)
        self.segmenter.load()
        self.cue = AckCue(self.cfg)
        self.cue.load()

    def close(self) -> None:
        for engine in (self.wake, self.asr):
            close = getattr(engine, "close", None)
            if close is not None:
                close()


class SpeakEngines:
    """TTS engine + opened player + the pipelined speaker."""

    def __init__(self, cfg: Config, player_factory: Callable[[Config], Any] | None = None) -> None:
        self.cfg = cfg
        self._player_factory = player_factory or daemon_player
        self.tts: Any = None
        self.player: Any = None
        self.speaker: Any = None

    def load(self) -> None:
        from rkvoice.speaker import Speaker
        from rkvoice.tts.registry import create_tts

        self.tts = create_tts(self.cfg, None, "你好")  # the daemon speaks Chinese first
        self.tts.load()
        self.player = self._player_factory(self.cfg)
        self.player.open()
        self.speaker = Speaker(self.tts, self.player, self.cfg)

    def close(self) -> None:
        if self.speaker is not None:
            self.speaker.cancel()
            self.speaker.close(timeout=0.5)  # its threads are daemon threads: exit stays < 2 s
        if self.player is not None:
            self.player.close()


def daemon_player(cfg: Config) -> Any:
    """The configured player; with ``auto`` and no sound device, a real-time null sink (a daemon
    must not grow a WAV file for weeks)."""
    from rkvoice.audio.players import create_player, has_sound_device

    name = cfg.audio.player
    if name == "auto":
        name = has_sound_device() or "null"
        if name == "null":
            log.warning("no sound device: answers are synthesised but not played (audio.player=null)")
    return create_player(name, cfg)


def build_assistant(cfg: Config) -> Any:
    from rkvoice.answer.assistant import Assistant

    return Assistant(cfg)


def hear_key(cfg: Config) -> object:
    return (cfg.hear, cfg.models)


def answer_key(cfg: Config) -> object:
    return (cfg.llm, cfg.models, cfg.state)


def speak_key(cfg: Config) -> object:
    a = cfg.audio
    return (cfg.tts, cfg.models, a.player, a.device, a.output_rate, a.block_ms, a.crossfade_ms)


def _microphone(cfg: Config) -> Any:
    from rkvoice.hear.sources import microphone

    return microphone(cfg.audio.input, cfg.audio.input_device)


@dataclass
class _Outcome:
    route: str = ""
    error: BaseException | None = None


class GuardedResponder:
    """The hear loop's Responder over the Assistant and the Speaker, with the daemon's guards:
    a deadline on the answer stream, a failed synthesis raised as a failed turn, "stop" obeyed.

    The answer goes through rkvoice.answer.turn.Answerer, which cuts the LLM's token deltas into
    speakable pieces (a short first piece, clauses after) instead of one synthesis per token.
    ``clock`` must be the clock of the turns' timelines (the hear loop's; monotonic by default).
    """

    def __init__(self, assistant: Any, speaker: Any, cfg: Config, host: Host,
                 clock: Clock | None = None) -> None:
        from rkvoice.answer.turn import Answerer

        self.assistant = assistant
        self.speaker = speaker
        self.cfg = cfg
        self.host = host
        self.answerer = Answerer(assistant, speaker, cfg, clock)
        self.outcomes: dict[int, _Outcome] = {}

    def respond(self, text: str, timeline: Any, cancel: threading.Event) -> str:
        from rkvoice.speaker import raise_if_failed

        outcome = self.outcomes[id(timeline)] = _Outcome()
        d = self.cfg.daemon
        parts: list[str] = []

        def guarded(deltas: Iterator[str]) -> Iterator[str]:
            for delta in deadline_deltas(deltas, cancel, d.answer_first_timeout_s, d.answer_gap_timeout_s):
                if delta:
                    parts.append(delta)
                    log.debug("answer delta %r", delta)
                yield delta

        with self.host.busy("turn"):
            try:
                answered = self.answerer.ask(text, timeline, cancel, wait=False, wrap=guarded)
                outcome.route = answered.route
                if answered.turn_id is not None and not cancel.is_set():
                    raise_if_failed(self.speaker.wait_done(answered.turn_id, timeout=d.stall_s))
            except BaseException as exc:
                outcome.error = exc
                self.assistant.abort()
                raise
        return "".join(parts)

    def cancel(self) -> None:
        self.speaker.cancel()
        self.assistant.abort()


def _tracked_session(base: type, host: Host) -> type:
    class TrackedSession(base):  # type: ignore[misc, valid-type]
        """The hear session with each frame's work (VAD, wake, ASR) marked busy for the watchdog."""

        def accept(self, frame: Any) -> Any:
            with host.busy("hear"):
                return super().accept(frame)

    return TrackedSession


class LiveHost:
    """A TurnLoop for the supervisor: runs the live hear loop until stop (or until it fails)."""

    def __init__(
        self,
        engines: dict[str, Any],
        cfg: Config,
        host: Host,
        source_factory: Callable[[Config], Any] | None = None,
    ) -> None:
        self.cfg = cfg
        self.host = host
        self.hear: HearEngines = engines["hear"]
        self.assistant = engines["answer"]
        self.speak: SpeakEngines = engines["speak"]
        self.source_factory = source_factory or _microphone
        self.responder = GuardedResponder(self.assistant, self.speak.speaker, cfg, host)
        self.assistant.set_reminder_callback(self._remind)
        self.loop: Any = None

    def _remind(self, text: str) -> None:
        log.info("reminder due: %r", text)
        self.speak.speaker.speak(text)

    def run_once(self, stop: threading.Event) -> TurnReport | None:
        from rkvoice.hear.loop import TurnLoop, player_cue
        from rkvoice.hear.session import HearSession

        session = _tracked_session(HearSession, self.host)(
            self.cfg, self.hear.asr, self.hear.wake, self.hear.segmenter)
        self.loop = TurnLoop(session, self.responder, cue=self.hear.cue.samples,
                             cue_out=player_cue(self.speak.player), on_turn=self._on_turn)
        source = self.source_factory(self.cfg)
        log.info("listening (wake phrase %r)", self.cfg.hear.wake_phrase)
        self.loop.run_live(source, stop)
        return None

    def _on_turn(self, record: Any) -> None:
        outcome = self.responder.outcomes.pop(id(record.timeline), _Outcome())
        if outcome.error is not None:
            self.host.report(outcome.error)
            return
        summary = record.summary()
        latency = {k: float(summary[k]) for k in ("asr_ms", "end_to_first_audio_ms")
                   if isinstance(summary.get(k), (int, float))}
        self.host.report(TurnReport(transcript=record.transcript, route=outcome.route,
                                    answer_chars=len(record.answer), latency_ms=latency,
                                    cancelled=record.cancelled))

    def stop_speaking(self) -> None:
        self.responder.cancel()

    def apologise(self, text: str) -> None:
        try:
            self.speak.speaker.speak(text)
        except Exception as exc:
            log.error("could not speak the apology: %s", exc)


def product_plan(cfg: Config, source_factory: Callable[[Config], Any] | None = None,
                 player_factory: Callable[[Config], Any] | None = None) -> Plan:
    """The real engines; ``source_factory``/``player_factory`` replace the microphone/player (soak)."""

    def make_loop(engines: dict[str, Any], c: Config, host: Host) -> LiveHost:
        return LiveHost(engines, c, host, source_factory)

    return Plan(
        stages=(
            StageSpec("hear", hear_key, HearEngines),
            StageSpec("answer", answer_key, build_assistant),
            StageSpec("speak", speak_key, lambda c: SpeakEngines(c, player_factory)),
        ),
        make_loop=make_loop,
    )
