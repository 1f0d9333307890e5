"""The daemon's listeners: what it supervises on the microphone, behind one ``Listener`` interface.

``LocalListener`` is the product's one turn loop (rkvoice.turn_loop.TurnLoop). It reaches the engines
through the stages' priority gates (rkvoice.gate) at local priority, so beside a Wyoming server on the
same stages the local turn waits at most for one transcription or synthesised piece, and a Wyoming
answer holding the LLM is stopped. With ``satellite.uri`` the listener is the satellite's
(rkvoice.satellite.run.SatelliteListener), built and watched the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

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

Report = Callable[[Turn | BaseException], None]
"""The supervisor's ``report``: each turn that is over (the handle), or a failure (the exception)."""
Busy = Callable[[str], AbstractContextManager[None]]
"""The supervisor's ``busy(what)``: work that must finish (stuck in it for ``daemon.stall_s``: no
watchdog pings, so systemd restarts the service)."""


class Listener(Protocol):
    """What the daemon supervises, built from the loaded stages with its ``report`` and ``busy``
    (``ListenerFactory``). ``run`` listens until ``interrupt``; ``close`` lets go of what it holds."""

    @property
    def answer_gate(self) -> PriorityGate:
        """The gate its answers hold (a Wyoming server beside it shares it)."""

    def run(self) -> None: ...

    def interrupt(self, reason: str) -> None: ...

    def apologise(self, text: str, wait_s: float = 0.0) -> None: ...

    def close(self) -> None: ...


class ListenerFactory(Protocol):
    def __call__(self, stages: Stages, cfg: Config, report: Report, busy: Busy,
                 source: Callable[[Config], AudioSource], clock: Clock | None) -> Listener: ...


class LocalListener:
    """The turn loop on the microphone, over loaded stages. The supervisor's ``report`` gets each turn
    that is over (the handle) or hearing failure (the exception); ``busy(what)`` marks work that must
    finish (stuck in it for ``daemon.stall_s``: no watchdog pings). ``clock`` places the microphone's
    frames on the played audio's timeline (the speak stage's clock) and times the turns."""

    def __init__(self, stages: Stages, cfg: Config, report: Report, busy: Busy,
                 source: Callable[[Config], AudioSource] = microphone, clock: Clock | None = None,
                 answer_gate: PriorityGate | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self.hear: Hear = stages.hear
        self.assistant: Assistant = stages.answer
        self.speak: Speak = stages.speak
        assert self.speak.speaker is not None and self.speak.player is not None, "speak stage not loaded"
        self.speaker: Speaker = self.speak.speaker
        self.source = source
        self.answer_gate = answer_gate or PriorityGate("answer")
        """The gate its answers hold (given: another listener's, whose microphone it takes over)."""
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

    def close(self) -> None:
        """Nothing of its own to let go: the stages are the daemon's."""

    def apologise(self, text: str, wait_s: float = 0.0) -> None:
        """Say ``text`` as a turn of its own; with ``wait_s``, until it has played (at most that long)."""
        try:
            turn = self.speaker.speak(text)
            if wait_s > 0:
                self.speaker.wait(turn, wait_s)
        except Exception as exc:
            log.error("could not speak the apology: %s", exc)
