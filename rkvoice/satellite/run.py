"""The satellite assembled: ``Satellite`` (link + playback + timers + microphone side over the loaded
hear and speak stages), the daemon's ``SatelliteListener`` (in place of the local turn loop when
``satellite.uri`` is set). The ``--file`` mode is rkvoice.satellite.file_mode."""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.gate import PriorityGate
from rkvoice.hear.echo import EchoCancelledSource, echo_filter
from rkvoice.hear.sources import AudioSource
from rkvoice.hear.turn_end import request_end
from rkvoice.hear.vad import Segmenter
from rkvoice.stages import Hear, Speak
from rkvoice.turn import Turn

from .core import SatelliteCore
from .link import Run, SatelliteLink
from .mic import SatelliteMic
from .playback import Playback
from .stop_word import StopWordSettings, stop_word
from .timers import TimerTable

log = logging.getLogger(__name__)

LINK_DOWN = "the satellite's link to Home Assistant (stopped)"
"""What a link that stopped after binding holds busy (the daemon's watchdog stops: systemd restarts)."""

Busy = Callable[[str], AbstractContextManager[None]]


class Link(Protocol):
    """The protocol adapter over the satellite's core: SatelliteLink (Wyoming) or rkvoice.esphome's
    EsphomeLink, as ``satellite.protocol`` says (the daemon chooses: rkvoice.daemon.service)."""

    core: SatelliteCore
    port: int
    running: threading.Event

    def serve(self, stop: threading.Event, ready: Callable[[Any], None] | None = None) -> None: ...


LinkFactory = Callable[[Config, Playback, TimerTable, Clock, str], Link]
"""(cfg, playback, timers, clock, uri) -> the link."""


def no_watch(_what: str) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


class Satellite:
    """The satellite over loaded stages: ``hear`` (its wake engine) and ``speak`` (its player, wrapped
    in the echo reference tap, and its Speaker for the board's own words). ``segmenter`` (loaded; see
    ``board_vad``) ends requests on the board; without it HA's VAD alone does. ``start()`` serves the
    protocol on a thread; ``run(source)`` listens on the calling thread; ``close()`` ends both.

    ``busy(what)`` marks work that must finish (the daemon's watchdog): hearing one frame (waiting for it
    too: a microphone that delivers nothing is stuck), and, from the moment the protocol thread stops
    after binding (logged with its traceback), the link itself: ``run`` then returns and raises."""

    def __init__(self, cfg: Config, hear: Hear, speak: Speak, uri: str = "", clock: Clock | None = None,
                 on_run: Callable[[Run], None] | None = None, segmenter: Segmenter | None = None,
                 busy: Busy = no_watch, on_error: Callable[[BaseException], None] | None = None,
                 link: LinkFactory | None = None, stop_words: StopWordSettings | None = None) -> None:
        assert hear.wake is not None and speak.player is not None, "load the hear and speak stages first"
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self.speak = speak
        self.timers = TimerTable(self.clock)
        self.playback = Playback(speak.player, speak.speaker, cfg.audio.block_ms, self.clock)
        self.link = (link or SatelliteLink)(cfg, self.playback, self.timers, self.clock, uri)  # None: Wyoming
        self.busy = busy
        # the stop word (``stop_words``, default satellite.stop_words) over the hear stage's ASR; a stage
        # without one (a test's wake-only stand-in) has none
        stop = stop_word(cfg, getattr(hear, "heard", None), stop_words)
        self.mic = SatelliteMic(hear.wake, self.link, self.playback, on_run=on_run, segmenter=segmenter,
                                cue=speak.cue, busy=busy, stop=stop, sounds=cfg.satellite.sound_names)
        self.link.core.feed.on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None
        self._down = contextlib.ExitStack()  # holds LINK_DOWN busy once the link stopped

    @property
    def failed(self) -> BaseException | None:
        """Why the protocol thread stopped (a bind error, or a fault after binding), else None."""
        return self._failed

    def start(self, timeout_s: float = 10.0) -> None:
        """Listen for Home Assistant (a thread); raises the bind error here."""
        self.playback.start()
        bound = threading.Event()

        def serve() -> None:
            try:
                self.link.serve(self._stop, ready=lambda _link: bound.set())
            except BaseException as exc:
                self._failed = exc
                if not bound.is_set():  # the bind error: raised by start() as one line
                    return
                log.error("satellite: the link to Home Assistant stopped; the satellite no longer hears "
                          "Home Assistant (restart rkvoice)", exc_info=exc)
                self._down.enter_context(self.busy(LINK_DOWN))
                self.mic.interrupt()
            else:
                if not self._stop.is_set():
                    self._failed = RkvoiceError(Stage.WYOMING, "link-stopped", "satellite: the link to Home "
                                                "Assistant stopped by itself")
                    log.error("%s", self._failed)
            finally:
                bound.set()

        self._thread = threading.Thread(target=serve, name="rkvoice-satellite", daemon=True)
        self._thread.start()
        bound.wait(timeout_s)
        if self._failed is not None:
            raise self._failed

    def run(self, source: AudioSource, echo: bool = True) -> None:
        """Listen on ``source`` (through the echo filter unless ``echo`` is False) until it ends or ``interrupt()``."""
        flt = echo_filter(self.cfg, self.speak.played) if echo else None
        if flt is not None and not getattr(source, "markers", False):
            source = EchoCancelledSource(source, flt, self.clock)
        if self._failed is None:
            self.mic.run_source(source)
        else:
            source.close()
        if self._failed is not None:
            raise RkvoiceError(Stage.WYOMING, "link-failed", f"satellite: the link to Home Assistant stopped "
                               f"({type(self._failed).__name__}: {self._failed}); restart rkvoice") from self._failed

    def interrupt(self) -> None:
        self.mic.interrupt()

    def close(self) -> None:
        self.mic.interrupt()
        self._stop.set()
        self.link.core.ringer.stop("shutdown")
        self.playback.close()
        if self._thread is not None:
            self._thread.join(3.0)
        self._down.close()


def board_vad(cfg: Config, heard: object = None) -> Segmenter:
    """The board's end of the request for the satellite, loaded: the one end-of-turn decision the local
    loop uses (rkvoice.hear.turn_end.request_end: ``hear.endpoint.mode``), so the request HA receives
    ends when the board decides. ``heard``: the hear stage's ASR; when it transcribes ahead
    (``hear.transcribe_ahead``) the decision takes the words' opinion too (``hear.endpoint.words``), as
    the local loop's does: the model alone cuts off a third of the turn-end set's pauses."""
    segmenter = request_end(cfg)
    if callable(ahead := getattr(heard, "ahead", None)):
        segmenter.on_pause = ahead
    segmenter.load()
    return segmenter


class LoadedStages(Protocol):
    @property
    def hear(self) -> Hear: ...

    @property
    def speak(self) -> Speak: ...


class LocalAnswers(Protocol):
    """The daemon's local turn loop, as the satellite hands the microphone to it while HA is away."""

    def run(self) -> None: ...

    def interrupt(self, reason: str) -> None: ...


class Mode(enum.Enum):
    NONE = "none"
    SATELLITE = "satellite"
    LOCAL = "local"


class SatelliteListener:
    """The daemon's listener with ``satellite.uri`` set (a rkvoice.daemon.listener.Listener): the
    microphone's requests go to Home Assistant's pipeline instead of the local turn loop. ``report``
    gets hearing failures (a wake engine that raised), ``busy`` marks work that must finish. It serves
    from construction to ``close()``; once its link to HA has stopped (logged with its traceback),
    ``run`` reports it once and then waits to be interrupted while the link holds busy, so the
    watchdog starves.

    With ``local`` (the daemon's local turn loop, made with this listener's answer gate), while HA is
    not connected (restarting, updating, down) the microphone is the local loop's: a wake is answered
    by the local assistant (one log line each time HA goes away), and once HA connects the requests go
    to HA again. A satellite HA paused (muted) stays muted."""

    def __init__(self, stages: LoadedStages, cfg: Config, report: Callable[[Turn | BaseException], None],
                 busy: Busy, source: Callable[[Config], AudioSource], clock: Clock | None = None,
                 local: Callable[[PriorityGate], LocalAnswers] | None = None, link: LinkFactory | None = None) -> None:
        self.cfg = cfg
        self.source = source
        self.report = report
        self.answer_gate = PriorityGate("answer")
        self.local = local
        self._interrupted = threading.Event()
        self._reported = False
        self._lock = threading.Lock()  # the mode, the local loop running, and HA's connection together
        self._mode = Mode.NONE
        self._running_local: LocalAnswers | None = None
        self._handed_back = False  # the running local loop was told HA connected (it did not end on its own)
        self._away_said = False  # the log said HA is away (once per absence)
        self._ha = threading.Event()
        segmenter = board_vad(cfg, getattr(stages.hear, "heard", None))
        self.satellite = Satellite(cfg, stages.hear, stages.speak, clock=clock, segmenter=segmenter, busy=busy,
                                   on_error=report, link=link)
        self.satellite.link.core.on_connection = self._connection
        self.satellite.start()

    @property
    def mode(self) -> Mode:
        with self._lock:
            return self._mode

    def _connection(self, connected: bool) -> None:
        """On the link's loop: HA connected or left; the microphone goes to whichever answers now."""
        with self._lock:
            if connected:
                self._ha.set()
                self._away_said = False  # the next absence is said again
            else:
                self._ha.clear()
            mode, local = self._mode, self._running_local
            if connected and mode is Mode.LOCAL and local is not None:
                log.info("satellite: Home Assistant connected; requests go to Home Assistant again")
                self._handed_back = True
                local.interrupt("Home Assistant connected")
            elif not connected and mode is Mode.SATELLITE and self.local is not None:
                self.satellite.interrupt()

    def run(self) -> None:
        """Listen until ``interrupt()``: for HA while it is connected, else (with ``local``) for the local
        assistant."""
        if self.satellite.failed is not None and self._reported:
            self._interrupted.wait()  # the link is down: nothing to hear for; the watchdog decides
            return
        while not self._interrupted.is_set():
            if self.local is not None and not self._ha.is_set():
                if self._answer_locally(self.local):
                    return  # its source ended
                continue
            with self._lock:
                if self._interrupted.is_set() or (self.local is not None and not self._ha.is_set()):
                    continue
                self._mode = Mode.SATELLITE
                self.satellite.mic.resume()
            log.info("satellite: listening for %r; requests go to Home Assistant", self.cfg.hear.wake_phrase)
            try:
                self.satellite.run(self.source(self.cfg))
            except RkvoiceError as exc:
                if exc.code != "link-failed":
                    raise
                self._reported = True
                self.report(exc)
                return
            finally:
                with self._lock:
                    self._mode = Mode.NONE
            if self.local is None:
                return

    def _answer_locally(self, make: Callable[[PriorityGate], LocalAnswers]) -> bool:
        """The local loop on the microphone until HA connects or ``interrupt()``; True when it returned
        for neither (its source ended)."""
        try:
            local = make(self.answer_gate)
        except Exception:  # a hear stage without what the local loop needs: wakes wait for HA, as before
            log.exception("satellite: the local assistant cannot answer while Home Assistant is away; wakes wait "
                          "for Home Assistant")
            self.local = None
            return False
        with self._lock:
            if self._interrupted.is_set() or self._ha.is_set():
                return False
            self._mode, self._running_local, self._handed_back = Mode.LOCAL, local, False
            said, self._away_said = self._away_said, True
        if not said:
            log.warning("satellite: Home Assistant is not connected; the local assistant answers the wake phrase "
                        "until it is")
        try:
            local.run()
        finally:
            with self._lock:
                self._mode, self._running_local = Mode.NONE, None
                handed_back = self._handed_back
        # (not whether HA is connected now: it may have connected, stopped the loop and left again since,
        # as HA's own probe does; the loop then starts again, it did not end)
        return not (self._interrupted.is_set() or handed_back or self._ha.is_set())

    def interrupt(self, reason: str) -> None:
        with self._lock:
            self._interrupted.set()
            local = self._running_local
        self.satellite.interrupt()
        self.satellite.playback.clear(reason)
        if local is not None:
            local.interrupt(reason)

    def apologise(self, text: str, wait_s: float = 0.0) -> None:
        self.satellite.playback.say(text)

    def close(self) -> None:
        self.interrupt("shutdown")
        self.satellite.close()
