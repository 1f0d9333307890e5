"""The daemon's listener: the product's one turn loop (rkvoice.turn_loop.TurnLoop) on the microphone.

It reaches the engines through the stages' priority gates (rkvoice.gate) at local priority, so beside
a Wyoming server on the same stages the local turn waits at most for one transcription or synthesised
piece, and a Wyoming answer holding the LLM is stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from rkvoice.answer.assistant import Assistant
from rkvoice.answer.respond import Answerer
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.gate import LocalAssistant, PriorityGate
from rkvoice.hear.echo import EchoCancelledSource, echo_filter
from rkvoice.hear.sources import AudioSource, microphone
from rkvoice.speaker import Speaker
from rkvoice.stages import Hear, Speak, Stages
from rkvoice.turn import Turn
from rkvoice.turn_loop import TurnLoop, player_cue

log = logging.getLogger(__name__)


class Listener:
    """The turn loop on the microphone, over loaded stages. The supervisor's ``report`` gets each turn
    that is over (the handle) or hearing failure (the exception); ``busy(what)`` marks work that must
    finish (stuck in it for ``daemon.stall_s``: no watchdog pings). ``clock`` places the microphone's
    frames on the played audio's timeline (the speak stage's clock) and times the turns."""

    def __init__(self, stages: Stages, cfg: Config, report: Callable[[Turn | BaseException], None],
                 busy: Callable[[str], AbstractContextManager[None]],
                 source: Callable[[Config], AudioSource] = microphone, clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self.hear: Hear = stages.hear
        self.assistant: Assistant = stages.answer
        self.speak: Speak = stages.speak
        assert self.speak.speaker is not None and self.speak.player is not None, "speak stage not loaded"
        self.speaker: Speaker = self.speak.speaker
        self.source = source
        self.answer_gate = PriorityGate("answer")
        self.answerer = Answerer(LocalAssistant(self.assistant, self.answer_gate), self.speaker, cfg)
        self.assistant.scheduler.on_due = self._remind
        self.turn_loop = TurnLoop(self.hear.session(), self.answerer, cue=self.speak.cue,
                                  cue_out=player_cue(self.speak.player), clock=self.clock, on_turn=report,
                                  on_error=report, busy=busy)
        self.echo = echo_filter(cfg, self.speak.played)  # lives as long as the listener: the room stays learnt

    def _remind(self, text: str) -> None:
        """A reminder that is due, spoken as a turn of its own (the scheduler logs it)."""
        self.speaker.speak(text)

    def run(self) -> None:
        """Listen and answer until ``interrupt()`` (or the source ends)."""
        source = self.source(self.cfg)
        if self.echo is not None and not getattr(source, "markers", False):  # sound, not a test's marker frames
            source = EchoCancelledSource(source, self.echo, self.clock)
        log.info("listening (wake phrase %r)", self.cfg.hear.wake_phrase)
        self.turn_loop.run_live(source)

    def interrupt(self, reason: str) -> None:
        """Shutdown or reload: stop speaking now and make ``run`` return."""
        self.turn_loop.interrupt(reason)
        self.speaker.cancel_all(reason)

    def apologise(self, text: str, wait_s: float = 0.0) -> None:
        """Say ``text`` as a turn of its own; with ``wait_s``, until it has played (at most that long)."""
        try:
            turn = self.speaker.speak(text)
            if wait_s > 0:
                self.speaker.wait(turn, wait_s)
        except Exception as exc:
            log.error("could not speak the apology: %s", exc)
