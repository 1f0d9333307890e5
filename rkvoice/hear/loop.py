"""The turn loop: frames -> HearSession -> (cue, answer, speak), for ``--file`` replay and the live mic.

Each turn gets its own Timeline with ``speech_end`` (marked when the VAD closed the request,
before ASR), ``wake``, ``cue``, ``asr_done`` (``text``) and then the speaker's marks
(``audio_first`` ...). ``hear_summary`` adds ``transcript`` and ``end_to_first_audio_ms``.

Live mode runs three kinds of threads: the source thread (frames into a queue), the hear thread
(this loop: VAD, wake, ASR) and one worker per turn (answer + speak). While a turn runs the
session only listens for the wake phrase; a wake then cancels the turn (barge-in) at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.hear.session import HearEvent, HearSession, ListenTimeout, Mode, Request, Wake
from rkvoice.hear.sources import AudioSource
from rkvoice.hear.vad import Segment
from rkvoice.speaker import raise_if_failed
from rkvoice.timeline import Timeline, summarize

log = logging.getLogger(__name__)

KEEP = 64  # turns and wakes remembered (a daemon runs for weeks)


class Responder(Protocol):
    def respond(self, text: str, timeline: Timeline, cancel: threading.Event) -> str:
        """Answer ``text`` and speak it; block until it has played or ``cancel`` is set.
        Returns the answer text (what was handed to the speaker)."""

    def cancel(self) -> None:
        """Stop synthesis and playback now."""


class SpeakerResponder:
    """Adapts ``answer(text, cancel) -> text deltas`` and an rkvoice.speaker.Speaker."""

    def __init__(self, answer: Callable[[str, threading.Event], Iterable[str]], speaker: Any) -> None:
        self.answer = answer
        self.speaker = speaker

    def respond(self, text: str, timeline: Timeline, cancel: threading.Event) -> str:
        turn = self.speaker.start_turn(timeline)
        parts: list[str] = []
        try:
            for delta in self.answer(text, cancel):
                if cancel.is_set():
                    break
                if delta:
                    if not parts:
                        timeline.mark("answer_first_text")
                    parts.append(delta)
                    self.speaker.say(delta, turn)
        finally:
            self.speaker.end_turn(turn)
        if not cancel.is_set():
            raise_if_failed(self.speaker.wait_done(turn))
        return "".join(parts)

    def cancel(self) -> None:
        self.speaker.cancel()


def player_cue(player: Any, block_ms: int = 20) -> Callable[[np.ndarray], None]:
    """Play a float32 cue (at ``player.rate``) through an opened Player, on a short thread.

    Players take int16 blocks; the cue is cut into ``block_ms`` blocks so a clear() stops it
    as quickly as speech.
    """
    from rkvoice.audio.post import to_blocks, to_pcm16

    block = max(1, player.rate * block_ms // 1000)

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


@dataclass
class TurnRecord:
    timeline: Timeline
    transcript: str
    woke: bool
    answer: str = ""
    cancelled: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def summary(self) -> dict[str, Any]:
        events = self.timeline.events
        return {**summarize(events), **hear_summary(events)}


def hear_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """``transcript``, ``end_to_first_audio_ms`` (speech_end -> audio_first), ``asr_ms``, ``woke``."""
    out: dict[str, Any] = {}
    asr = next((e for e in events if e["name"] == "asr_done"), None)
    if asr is None:
        return out
    out["transcript"] = asr.get("text", "")
    out["asr_ms"] = asr.get("asr_ms")
    out["woke"] = bool(asr.get("woke")) or any(e["name"] == "wake" for e in events)
    ends = [e for e in events if e["name"] == "speech_end" and e["t_ms"] <= asr["t_ms"]]
    first = next((e for e in events if e["name"] == "audio_first"), None)
    if ends:
        out["vad_silence_ms"] = ends[-1].get("silence_ms")
        if first is not None:
            out["end_to_first_audio_ms"] = round(first["t_ms"] - ends[-1]["t_ms"], 3)
    return out


class TurnLoop:
    """Drives a HearSession from an AudioSource and runs a turn for each request."""

    def __init__(
        self,
        session: HearSession,
        responder: Responder,
        cue: np.ndarray | None = None,
        cue_out: Callable[[np.ndarray], None] | None = None,
        clock: Clock | None = None,
        on_turn: Callable[[TurnRecord], None] | None = None,
    ) -> None:
        self.session = session
        self.responder = responder
        self.cue = cue if cue is not None else np.zeros(0, dtype=np.float32)
        self.cue_out = cue_out
        self.clock = clock or MonotonicClock()
        self.on_turn = on_turn
        self.turns: deque[TurnRecord] = deque(maxlen=KEEP)
        self.wakes: deque[Wake] = deque(maxlen=KEEP)
        self._pending: Timeline | None = None
        self._current: TurnRecord | None = None
        self._cancel = threading.Event()
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        session.on_speech_end = self._speech_end

    # -- shared event handling ------------------------------------------------------------

    def _timeline(self) -> Timeline:
        tl = Timeline(self.clock)
        tl.start()
        return tl

    def _speech_end(self, seg: Segment, mode: Mode) -> None:
        if mode is not Mode.LISTENING or self._pending is None:  # listening: the wake is already marked
            self._pending = self._timeline()
        silence_ms = round((seg.decided_s - seg.end_s) * 1000.0, 1)
        self._pending.mark("speech_end", audio_s=round(seg.end_s, 3), silence_ms=silence_ms,
                           truncated=seg.truncated)

    def _on_wake(self, ev: Wake) -> None:
        self.wakes.append(ev)
        if ev.barge_in:
            self._barge_in()
        if not ev.hit.request or self._pending is None:
            self._pending = self._timeline()
        self._pending.mark("wake", text=ev.hit.text, barge_in=ev.barge_in, audio_s=round(ev.hit.at_s, 3))
        if len(self.cue) and self.cue_out is not None:
            t0 = self.clock.now()
            self.cue_out(self.cue)
            self._pending.mark("cue", delay_ms=round((self.clock.now() - t0) * 1000.0, 3))

    def _barge_in(self) -> None:
        turn = self._current
        t0 = self.clock.now()
        self._cancel.set()
        self.responder.cancel()
        cancel_ms = round((self.clock.now() - t0) * 1000.0, 3)
        self._current = None
        if turn is not None:
            turn.cancelled = True
            turn.timeline.mark("barge_in", cancel_ms=cancel_ms)
        log.info("barge-in: turn cancelled in %.1f ms", cancel_ms)

    def _start_turn(self, ev: Request) -> TurnRecord:
        tl = self._pending or self._timeline()
        self._pending = None
        tl.mark("asr_done", text=ev.text, heard=ev.heard, asr_ms=round(ev.asr_ms, 1), woke=ev.woke)
        log.info("request: %r", ev.text)
        self._cancel = threading.Event()
        record = TurnRecord(tl, ev.text, ev.woke)
        self.turns.append(record)
        self._current = record
        return record

    def _run_turn(self, record: TurnRecord, cancel: threading.Event) -> None:
        try:
            record.answer = self.responder.respond(record.transcript, record.timeline, cancel)
        except Exception as exc:
            log.error("turn failed: %s", exc, exc_info=not hasattr(exc, "stage"))
            if not any(e.get("message") == str(exc) for e in record.timeline.find("error")):
                record.timeline.mark("error", message=str(exc))  # the speaker may have marked it
            record.cancelled = True
        finally:
            if cancel.is_set():
                record.cancelled = True
            record.done.set()
            if self.on_turn is not None:
                self.on_turn(record)

    def _handle(self, events: list[HearEvent], sync: bool) -> None:
        for ev in events:
            if isinstance(ev, Wake):
                self._on_wake(ev)
            elif isinstance(ev, Request):
                record = self._start_turn(ev)
                cancel = self._cancel
                if sync:
                    self._run_turn(record, cancel)
                    self._finished(record)
                else:
                    threading.Thread(
                        target=self._worker, args=(record, cancel), name="rkvoice-turn", daemon=True
                    ).start()
            elif isinstance(ev, ListenTimeout):
                self._pending = None

    def _worker(self, record: TurnRecord, cancel: threading.Event) -> None:
        self._run_turn(record, cancel)
        self._inbox.put(("done", record))

    def _finished(self, record: TurnRecord) -> None:
        if record is not self._current:
            return  # an old, barged-in turn
        self._current = None
        if record.cancelled:
            self.session.turn_cancelled()
        else:
            self.session.turn_done()

    # -- drivers ----------------------------------------------------------------------------

    def run_file(self, source: AudioSource, require_wake: bool = False) -> list[TurnRecord]:
        """Replay a recording as fast as it can be read; each turn runs to its end before more audio."""
        self.session.start(Mode.IDLE if require_wake else Mode.FOLLOW_UP, None)
        for frame in source.frames():
            self._handle(self.session.accept(frame), sync=True)
        self._handle(self.session.flush(), sync=True)
        return list(self.turns)

    def run_live(self, source: AudioSource, stop: threading.Event | None = None) -> list[TurnRecord]:
        """Microphone loop: runs until ``stop`` is set or the source ends (then the last turn finishes)."""
        stop = stop or threading.Event()
        self.session.start(Mode.IDLE)

        def pump() -> None:
            try:
                for frame in source.frames():
                    if stop.is_set():
                        break
                    self._inbox.put(("frame", frame))
            finally:
                self._inbox.put(("end", None))

        reader = threading.Thread(target=pump, name="rkvoice-mic", daemon=True)
        reader.start()
        ended = False
        try:
            while not stop.is_set():
                try:
                    kind, item = self._inbox.get(timeout=0.25)  # stay responsive to stop without a mic
                except queue.Empty:
                    continue
                if kind == "frame":
                    self._handle(self.session.accept(item), sync=False)
                elif kind == "done":
                    self._finished(item)
                elif kind == "end":
                    ended = True
                    self._handle(self.session.flush(), sync=False)
                if ended and (self._current is None or self._current.done.is_set()):
                    # drain pending "done" messages so the session state is final
                    while not self._inbox.empty():
                        kind, item = self._inbox.get_nowait()
                        if kind == "done":
                            self._finished(item)
                    if self._current is None:
                        break
        finally:
            source.close()
            if stop.is_set() and self._current is not None:
                self._cancel.set()
                self.responder.cancel()
        return list(self.turns)
