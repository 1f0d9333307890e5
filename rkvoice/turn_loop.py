"""The turn loop: frames -> HearSession -> (cue, answer, speak). The one loop the product runs,
for ``--file`` replay, the live microphone and the daemon (which wraps it with its supervision). It
drives hearing, answering and speaking, so it sits above those stages, not inside rkvoice.hear.

Each request becomes a rkvoice.turn.Turn whose timeline holds ``speech_end`` (marked when the VAD or
the end-of-turn decision closed the request, before ASR; with each of the decision's judgements),
``wake``, ``cue``, ``asr_done`` and then the answer's and the speaker's marks. A wake during a turn cancels it (barge-in) through the turn handle.

Live mode runs three kinds of threads: the source thread (frames into the inbox), the hear thread
(this loop: VAD, wake, ASR) and one worker per turn (answer + speak). ``interrupt()`` (shutdown,
reload) puts a message in the same inbox, so the loop never waits with a timeout. The inbox holds
small frozen records (``Frame``, ``TurnOver``, ``SourceFailed``, ``SourceEnded``, ``Stop``); the turn in
progress (``current``) is read and written under the loop's lock, since the hear thread, the turn's
worker and ``interrupt()`` all reach it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rkvoice.audio.players import Player
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.errors import RkvoiceError, is_device_error
from rkvoice.hear.session import HearEvent, HearSession, ListenTimeout, Mode, Request, Wake
from rkvoice.hear.sources import AudioSource
from rkvoice.hear.vad import Segment
from rkvoice.timeline import Ev, Timeline
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

KEEP = 64  # turns and wakes remembered (a daemon runs for weeks)


@dataclass(frozen=True)
class Frame:
    """Audio from the source."""

    samples: np.ndarray


@dataclass(frozen=True)
class TurnOver:
    """A turn's worker is done with it."""

    turn: Turn
    heard_to: int
    """The stream sample the hear thread had reached when the answer was over (the follow-up hears
    from there: the request a user begins then is heard whole however late this message comes)."""


@dataclass(frozen=True)
class SourceFailed:
    """The source broke (a lost microphone): raised on the hear thread."""

    error: BaseException


@dataclass(frozen=True)
class SourceEnded:
    """The source has no more audio."""


@dataclass(frozen=True)
class Stop:
    """``interrupt()``: stop listening."""


Message = Frame | TurnOver | SourceFailed | SourceEnded | Stop


class Responder(Protocol):
    def respond(self, turn: Turn) -> str:
        """Answer ``turn.text`` and speak it; block until it has played or the turn is cancelled.
        Returns the answer text; raises when the turn failed."""


def player_cue(player: Player) -> Callable[[np.ndarray], None]:
    """Play a float32 cue (at ``player.rate``) through an opened Player, on a short thread, in 20 ms
    int16 blocks so a clear() stops it as quickly as speech."""
    from rkvoice.audio.post import to_blocks, to_pcm16

    block = max(1, player.rate // 50)

    def play(samples: np.ndarray) -> None:
        blocks = [to_pcm16(row) for row in to_blocks(samples, block)]

        def run() -> None:
            try:
                for row in blocks:
                    player.write(row)
            except Exception:  # a failed cue must not end the turn
                log.warning("could not play the wake cue", exc_info=True)

        threading.Thread(target=run, name="rkvoice-cue", daemon=True).start()

    return play


class TurnLoop:
    """Drives a HearSession from an AudioSource and runs a turn for each request.

    ``busy(what)`` marks work that must finish (the daemon's watchdog): "hear" one frame (or, live, one
    message of the inbox: a frame with the barge-in or turn it starts, a turn's end) handled whole,
    "turn" a turn's answer and speech; ``on_turn(turn)`` is called
    when a turn is over; ``on_error(exc)`` when hearing failed (a model error), after which the loop
    goes on listening. Without ``on_error`` such an error ends the loop.
    """

    def __init__(
        self,
        session: HearSession,
        responder: Responder,
        cue: np.ndarray | None = None,
        cue_out: Callable[[np.ndarray], None] | None = None,
        clock: Clock | None = None,
        on_turn: Callable[[Turn], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        busy: Callable[[str], AbstractContextManager[None]] = lambda _what: contextlib.nullcontext(),
    ) -> None:
        self.session = session
        self.responder = responder
        self.cue = cue if cue is not None else np.zeros(0, dtype=np.float32)
        self.cue_out = cue_out
        self.clock = clock or MonotonicClock()
        self.on_turn = on_turn
        self.on_error = on_error
        self.busy = busy
        self.turns: deque[Turn] = deque(maxlen=KEEP)
        self.wakes: deque[Wake] = deque(maxlen=KEEP)
        self._pending: Timeline | None = None
        self._current: Turn | None = None  # the turn in progress, under _lock
        self._lock = threading.Lock()
        self._inbox: queue.Queue[Message] | None = None  # the running run_live's
        self._stop_asked = False
        session.on_speech_end = self._speech_end

    @property
    def current(self) -> Turn | None:
        """The turn in progress (None between turns)."""
        with self._lock:
            return self._current

    def _set_current(self, turn: Turn | None) -> Turn | None:
        """Make ``turn`` the one in progress; returns the one that was."""
        with self._lock:
            old, self._current = self._current, turn
        return old

    def interrupt(self, reason: str = "shutdown") -> None:
        """From any thread: cancel the running turn and make ``run_live`` return."""
        with self._lock:
            turn = self._current
            self._stop_asked = True  # also stops a run_live that is only about to start
            inbox = self._inbox
        if turn is not None:
            turn.cancel(reason)
        if inbox is not None:
            inbox.put(Stop())

    # -- shared event handling ------------------------------------------------------------

    def _timeline(self) -> Timeline:
        tl = Timeline(self.clock)
        tl.start()
        return tl

    def _speech_end(self, seg: Segment, mode: Mode) -> None:
        if mode is not Mode.LISTENING or self._pending is None:  # listening: the wake is already marked
            self._pending = self._timeline()
        silence_ms = round((seg.decided_s - seg.end_s) * 1000.0, 1)
        judged = {"ended_by": str(seg.judgements[-1].verdict), "judged": [j.to_dict() for j in seg.judgements]
                  } if seg.judgements else {}
        self._pending.mark(Ev.SPEECH_END, audio_s=round(seg.end_s, 3), silence_ms=silence_ms,
                           truncated=seg.truncated, **judged)

    def _on_wake(self, ev: Wake) -> None:
        self.wakes.append(ev)
        if ev.barge_in:
            self._barge_in()
        if not ev.hit.request or self._pending is None:
            self._pending = self._timeline()
        self._pending.mark(Ev.WAKE, text=ev.hit.text, barge_in=ev.barge_in, audio_s=round(ev.hit.at_s, 3))
        if len(self.cue) and self.cue_out is not None:
            t0 = self.clock.now()
            self.cue_out(self.cue)
            self._pending.mark(Ev.CUE, delay_ms=round((self.clock.now() - t0) * 1000.0, 3))

    def _barge_in(self) -> None:
        turn = self._set_current(None)
        if turn is None:
            return
        t0 = self.clock.now()
        turn.cancel("barge-in")
        cancel_ms = round((self.clock.now() - t0) * 1000.0, 3)
        turn.timeline.mark(Ev.BARGE_IN, cancel_ms=cancel_ms)
        log.info("barge-in: turn %d cancelled in %.1f ms", turn.id, cancel_ms)

    def _start_turn(self, ev: Request) -> Turn:
        tl = self._pending or self._timeline()
        self._pending = None
        tl.mark(Ev.ASR_DONE, text=ev.text, heard=ev.heard, asr_ms=round(ev.asr_ms, 1), woke=ev.woke)
        log.info("request: %r", ev.text)
        turn = Turn(tl, text=ev.text)
        self.turns.append(turn)
        self._set_current(turn)
        return turn

    def _run_turn(self, turn: Turn) -> int:
        """Answer and speak ``turn``, then finish it (once: with the answer, or none when it failed).
        Returns the stream sample the hear thread had reached when the answer was over."""
        result: str | None = None
        try:
            with self.busy("turn"):
                result = self.responder.respond(turn)
        except Exception as exc:
            log.error("turn %d failed: %s", turn.id, exc, exc_info=not isinstance(exc, RkvoiceError))
            if not any(e.get("message") == str(exc) for e in turn.timeline.find(Ev.ERROR)):
                turn.timeline.mark(Ev.ERROR, message=str(exc))  # the speaker may have marked it
            turn.fail(exc)
        finally:
            heard_to = self.session.samples
            turn.finish(result)
            if self.on_turn is not None:
                self.on_turn(turn)
        return heard_to

    def _accept(self, frame: np.ndarray | None) -> list[HearEvent]:
        try:
            return self.session.accept(frame) if frame is not None else self.session.flush()
        except RkvoiceError as exc:
            if self.on_error is None or is_device_error(exc):
                raise
            self.session.start(Mode.IDLE)
            self.on_error(exc)
            return []

    def _handle(self, events: list[HearEvent], sync: bool) -> None:
        for ev in events:
            if isinstance(ev, Wake):
                self._on_wake(ev)
            elif isinstance(ev, Request):
                turn = self._start_turn(ev)
                if sync:
                    self._run_turn(turn)
                    self._finished(turn)
                else:
                    threading.Thread(target=self._worker, args=(turn, self._inbox), name="rkvoice-turn",
                                     daemon=True).start()
            elif isinstance(ev, ListenTimeout):
                self._pending = None

    def _worker(self, turn: Turn, inbox: queue.Queue[Message] | None) -> None:
        heard_to = self._run_turn(turn)
        if inbox is not None:
            inbox.put(TurnOver(turn, heard_to))

    def _finished(self, turn: Turn, heard_to: int | None = None) -> None:
        with self._lock:
            if turn is not self._current:
                return  # an old, barged-in turn
            self._current = None
        self._handle(self.session.turn_done(cancelled=turn.cancelled, since=heard_to), sync=heard_to is None)

    # -- drivers ----------------------------------------------------------------------------

    def run_file(self, source: AudioSource, require_wake: bool = False) -> list[Turn]:
        """Replay a recording as fast as it can be read; each turn runs to its end before more audio."""
        self.session.start(Mode.IDLE if require_wake else Mode.FOLLOW_UP, None)
        for frame in itertools.chain(source.frames(), [None]):  # None: the end, flush the session
            with self.busy("hear"):
                events = self._accept(frame)
            self._handle(events, sync=True)
        return list(self.turns)

    def run_live(self, source: AudioSource) -> list[Turn]:
        """Microphone loop: runs until ``interrupt()`` or the source ends (then the last turn finishes)."""
        inbox: queue.Queue[Message] = queue.Queue()
        with self._lock:
            if self._stop_asked:
                self._stop_asked = False
                source.close()
                return list(self.turns)
            self._inbox = inbox
        self.session.start(Mode.IDLE)

        def pump() -> None:
            try:
                for frame in source.frames():
                    inbox.put(Frame(frame))
            except BaseException as exc:  # a lost microphone: raised on the hear thread
                inbox.put(SourceFailed(exc))
            finally:
                inbox.put(SourceEnded())

        threading.Thread(target=pump, name="rkvoice-mic", daemon=True).start()
        ended = False
        try:
            while True:
                message = inbox.get()
                if isinstance(message, Stop):
                    break
                with self.busy("hear"):  # one message, handled whole (a barge-in, a turn's end too)
                    match message:
                        case Frame(samples):
                            self._handle(self._accept(samples), sync=False)
                        case TurnOver(turn, heard_to):
                            self._finished(turn, heard_to)
                        case SourceFailed(error):
                            raise error
                        case SourceEnded():
                            ended = True
                            self._handle(self._accept(None), sync=False)
                if ended and self.current is None:
                    break
        finally:
            with self._lock:
                self._inbox = None
                self._stop_asked = False
            source.close()
            last = self._set_current(None)
            if last is not None and not last.done.is_set():
                last.cancel("shutdown")
        return list(self.turns)
