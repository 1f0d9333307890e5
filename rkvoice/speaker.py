"""The pipelined speaker: text pieces of a turn -> TTS worker thread -> post-processing -> player thread.

A turn (rkvoice.turn.Turn) is spoken as a stream of text pieces (a whole text, or an LLM answer as it comes):

    speaker.start(turn)
    speaker.say(turn, "今天天气不错，")      # any number of pieces, as they arrive
    speaker.say(turn, "我们出去走走吧。")
    speaker.end(turn)
    speaker.wait(turn)                     # until it has played, was cancelled or failed

Each piece takes the one speech path (``rkvoice.pieces``) on the TTS worker while the previous chunk
plays. ``turn.cancel()`` drops the turn's queued pieces and audio, clears the player at once and
stops synthesis before the next chunk; once it returns, the turn neither writes to nor clears the player
(a wake cue written right after a barge-in plays whole). A synthesis or player failure fails the turn.
Turns are spoken in the order they were started (a reminder started during an answer waits for its
end); every started turn must be ended or cancelled.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from rkvoice.audio.players import Player
from rkvoice.audio.post import prepare_piece
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.pieces import Pieces
from rkvoice.text import words
from rkvoice.text.normalize import speakable
from rkvoice.timeline import Ev, Timeline
from rkvoice.tts.base import TtsEngine
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

WRITE_WAIT_S = 1.0
"""Longest a cancel waits for the player to hand back the block it was writing (a clear() wakes it at once)."""


@dataclass
class _Queue:
    """The speaker's own bookkeeping for one turn it speaks."""

    turn: Turn
    pieces: Pieces
    inbox: deque[str] = field(default_factory=deque)
    """Text pieces waiting for the TTS worker (its end follows them once ``ended``)."""
    played: threading.Event = field(default_factory=threading.Event)
    text_seen: bool = False
    ended: bool = False
    synth_done: bool = False  # the worker has passed this turn's end (or its failure)
    in_flight: int = 0  # pieces taken by the worker and not yet queued for the player
    queued_s: float = 0.0  # audio synthesised and queued for the player thread, not yet handed to it
    dry_at: float | None = None  # clock time the player runs out of this turn's audio (None: none played yet)


@dataclass(frozen=True)
class _Audio:
    """A piece's audio for the player thread."""

    q: _Queue
    index: int
    blocks: np.ndarray


@dataclass(frozen=True)
class _End:
    """A turn's end for the player thread: played out once its audio has, or failed with ``error``."""

    q: _Queue
    error: RkvoiceError | None = None


@dataclass(frozen=True)
class _Closed:
    """The speaker is closed and every started turn was served: the player thread ends."""


@dataclass(frozen=True)
class Backlog:
    """What the speaker still has to do, at one moment."""

    text: int
    """Text pieces said and waiting for the TTS worker (turns not cancelled)."""
    synthesising: int
    """Pieces the TTS worker has taken and not yet queued for the player (turns not cancelled)."""
    audio: int
    """Audio and turn ends queued for the player thread that it has not finished handing on."""
    synthesis_due: bool
    """Whether the TTS worker has something to do now (a piece, a turn's end, a turn to pass by),
    rather than waiting for text."""


class Speaker:
    """Speaks turns through ``engine`` (a loaded TtsEngine) into ``player`` (opened). The caller loads/opens
    and closes both; the speaker owns its two threads, started by ``load()`` and stopped by ``close()``."""

    def __init__(self, engine: TtsEngine, player: Player, cfg: Config, clock: Clock | None = None) -> None:
        self.engine = engine
        self.player = player
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self.block = max(1, player.rate * cfg.audio.block_ms // 1000)
        self._cond = threading.Condition()
        self._order: deque[_Queue] = deque()  # started turns not yet passed by the worker, in order
        self._queues: dict[int, _Queue] = {}
        self._audio_q: queue.Queue[_Audio | _End | _Closed] = queue.Queue()
        self._audio_unhanded = 0  # items put on _audio_q that the player thread has not finished with
        self._closed = False
        self._synth_thread: threading.Thread | None = None
        self._player_thread: threading.Thread | None = None
        self._writing: tuple[_Queue, threading.Event] | None = None  # the player thread's block in player.write

    # -- lifecycle -----------------------------------------------------------------------

    def load(self) -> None:
        """Warm up (lazy imports, resampler) and start the TTS worker and the player thread."""
        if self._synth_thread is not None:
            return
        speakable("今天是1月2日。")
        words.warm()
        rate = getattr(self.engine, "sample_rate", self.player.rate)
        tone = (0.3 * np.sin(np.arange(rate // 2, dtype=np.float32) * 0.1)).astype(np.float32)
        prepare_piece(tone, rate, self.player.rate, self.block, fade_ms=self.cfg.audio.crossfade_ms)
        self._synth_thread = threading.Thread(target=self._synth_loop, name="rkvoice-tts", daemon=True)
        self._player_thread = threading.Thread(target=self._play_loop, name="rkvoice-player", daemon=True)
        self._synth_thread.start()
        self._player_thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Let started turns finish, then stop both threads (cancel the turns first to stop at once)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        for t in (self._synth_thread, self._player_thread):
            if t is not None:
                t.join(timeout)

    # -- the caller's side -------------------------------------------------------------

    def start(self, turn: Turn) -> None:
        """Queue ``turn`` for speaking (after every turn started before it)."""
        if self._synth_thread is None:
            raise RkvoiceError(Stage.SPEAK, "not-loaded", "the speaker was not loaded (call load() first)")
        q = _Queue(turn, self._pieces(turn))
        with self._cond:
            if self._closed:
                raise RkvoiceError(Stage.SPEAK, "closed", "the speaker was closed")
            self._queues[turn.id] = q
            self._order.append(q)
        turn.on_cancel(self._dropped)

    def say(self, turn: Turn, text: str) -> None:
        """Queue one text piece of the turn. Pieces of a cancelled turn are dropped."""
        q = self._queue(turn)
        if turn.cancelled:
            log.debug("dropping piece of cancelled turn %d: %r", turn.id, text)
            return
        if q.ended:
            raise RkvoiceError(Stage.SPEAK, "turn-ended", f"turn {turn.id} was already ended; start a new turn")
        if not q.text_seen and text.strip():
            q.text_seen = True
            turn.timeline.mark(Ev.TEXT_READY, turn=turn.id)
        with self._cond:
            q.inbox.append(text)
            self._cond.notify_all()

    def end(self, turn: Turn) -> None:
        """No more pieces for this turn: it has played once everything queued has played."""
        q = self._queue(turn)
        with self._cond:
            if q.ended:
                return
            q.ended = True
            self._cond.notify_all()

    def speak(self, text: str, timeline: Timeline | None = None) -> Turn:
        """Speak a whole text as a turn of its own; ``wait(turn)`` blocks until it has played."""
        turn = Turn(timeline or Timeline(self.clock), text=text)
        self.start(turn)
        self.say(turn, text)
        self.end(turn)
        return turn

    def wait(self, turn: Turn, timeout: float | None = None) -> bool:
        """Block until the turn has played out, was cancelled or failed; False on timeout."""
        return self.clock.wait(self._queue(turn).played, timeout)

    def audio_ahead_s(self, turn: Turn) -> float | None:
        """Seconds until the player runs out of this turn's audio (held and queued for it); None while
        a piece of the turn waits for or is in synthesis (more is on its way) or before any played."""
        q = self._queue(turn)
        with self._cond:
            if q.inbox or q.in_flight or q.dry_at is None:
                return None
            return max(0.0, q.dry_at - self.clock.now()) + q.queued_s

    @property
    def backlog(self) -> Backlog:
        """What is still to synthesise and to hand to the player now."""
        with self._cond:
            live = [q for q in self._order if not q.turn.cancelled]
            head = self._order[0] if self._order else None
            due = head is not None and bool(head.turn.cancelled or head.synth_done or head.ended or head.inbox
                                            or head.in_flight)
            return Backlog(sum(len(q.inbox) for q in live), sum(q.in_flight for q in live),
                           self._audio_unhanded, due)

    def cancel_all(self, reason: str = "stop") -> None:
        """Cancel every turn started so far (the user said "stop"; shutdown)."""
        with self._cond:
            turns = [q.turn for q in self._queues.values() if not q.played.is_set()]
        for turn in turns:
            turn.cancel(reason)

    # -- internals -----------------------------------------------------------------------

    def _pieces(self, turn: Turn) -> Pieces:
        return Pieces(self.engine, self.cfg, turn, out_rate=self.player.rate, clock=self.clock)

    def _queue(self, turn: Turn) -> _Queue:
        try:
            return self._queues[turn.id]
        except KeyError:
            raise RkvoiceError(Stage.SPEAK, "unknown-turn", f"turn {turn.id} was never started (call start)") from None

    def _dropped(self, turn: Turn) -> None:
        """turn.cancel() callback: drop its queued pieces and audio, silence the player now."""
        q = self._queues.get(turn.id)
        if q is None:
            return
        with self._cond:
            q.inbox.clear()
            self._cond.notify_all()  # the worker moves past the cancelled turn
        if not q.played.is_set() and (q.dry_at is not None or q.in_flight or q.queued_s):
            with self._cond:  # the player thread's write of this turn now (later ones see the cancel)
                writing = self._writing if self._writing and self._writing[0] is q else None
            self.player.clear()  # only while its audio may be playing: a played turn leaves the next alone
            if writing is not None and threading.current_thread() is not self._player_thread:
                self._clear_late_block(q, writing[1])
        q.played.set()

    def _clear_late_block(self, q: _Queue, written: threading.Event) -> None:
        """The block the player thread was writing may go in after the cancel's clear() (aplay starts
        anew): wait for that write to return (the clear woke it) and clear again, here, so nothing the
        cancelling thread writes next (the wake cue) is cleared by this turn later."""
        if not self.clock.wait(written, WRITE_WAIT_S):
            log.warning("turn %d: the player still holds its last block after %.1f s", q.turn.id, WRITE_WAIT_S)
        self.player.clear()

    def _played(self, q: _Queue) -> None:
        q.played.set()
        with self._cond:  # keep the last turns for late wait()/audio_ahead_s() calls; forget older ones
            done = [tid for tid, other in self._queues.items() if other.played.is_set()]
            for tid in done[:-64]:
                del self._queues[tid]

    def _next_item(self) -> tuple[_Queue, str | None, bool] | None:
        """The oldest turn's next piece (and whether queued pieces were merged into it) or its end (None),
        moving past finished turns; None once the speaker is closed and every started turn was served."""
        with self._cond:
            while True:
                if not self._order:
                    if self._closed:
                        return None
                    self._cond.wait()
                    continue
                q = self._order[0]
                if q.turn.cancelled or q.synth_done:
                    self._order.popleft()
                    continue
                if q.inbox:
                    text = joined = q.inbox.popleft()
                    q.in_flight += 1
                    room = self.cfg.tts.coalesce_chars if q.pieces.count else 0  # never the turn's first piece
                    while room > 0 and q.inbox and len(joined) + len(q.inbox[0]) <= room:
                        joined += q.inbox.popleft()  # queued up while the worker was busy: one synthesis call
                    return q, joined, joined != text
                if q.ended:
                    q.synth_done = True
                    return q, None, False
                self._cond.wait()

    def _hand(self, item: _Audio | _End) -> None:
        """Queue ``item`` for the player thread."""
        with self._cond:
            self._audio_unhanded += 1
        self._audio_q.put(item)

    def _synth_loop(self) -> None:
        while True:
            work = self._next_item()
            if work is None:
                self._audio_q.put(_Closed())
                return
            q, text, merged = work
            if text is None:
                self._hand(_End(q))
                continue
            limit = max(q.pieces.later, self.cfg.tts.coalesce_chars) if merged else None
            try:
                for piece in q.pieces.pieces(text, limit):
                    if len(piece.blocks):
                        with self._cond:
                            q.queued_s += piece.audio_s
                        self._hand(_Audio(q, piece.index, piece.blocks))
            except Exception as exc:  # an engine failure fails this turn, never the thread
                name = getattr(self.engine, "name", "tts")
                err = _failed(q.turn, exc, RkvoiceError(Stage.TTS, "synthesis-failed", f"{name} failed: {exc}"))
                with self._cond:
                    q.synth_done = True
                self._hand(_End(q, err))
            finally:
                with self._cond:
                    q.in_flight -= 1
                    self._cond.notify_all()

    def _play_loop(self) -> None:
        while True:
            item = self._audio_q.get()
            if isinstance(item, _Closed):
                return
            q = item.q
            try:
                if q.turn.cancelled:
                    continue
                if isinstance(item, _Audio):
                    self._play_chunk(q, item.index, item.blocks)
                elif item.error is not None:  # the turn's synthesis failed
                    q.turn.fail(item.error)
                else:
                    self.player.drain()
                    if not q.turn.cancelled:
                        q.turn.timeline.mark(Ev.PLAY_END, turn=q.turn.id)
                        self._played(q)
            except Exception as exc:  # a broken player fails the turn, never the thread
                q.turn.fail(_failed(q.turn, exc, RkvoiceError(Stage.PLAYER, "failed", str(exc))))
            finally:
                with self._cond:
                    self._audio_unhanded -= 1
                    self._cond.notify_all()

    def _play_chunk(self, q: _Queue, index: int, blocks: np.ndarray) -> None:
        audio_s = blocks.size / self.player.rate
        turn = q.turn
        if q.dry_at is None:
            turn.timeline.mark(Ev.AUDIO_FIRST, turn=turn.id)
        turn.timeline.mark(Ev.PLAY_CHUNK, turn=turn.id, index=index, audio_s=round(audio_s, 4))
        with self._cond:
            now = self.clock.now()
            q.dry_at = max(now, q.dry_at or now) + audio_s
            q.queued_s = max(0.0, q.queued_s - audio_s)
        for block in blocks:
            with self._cond:  # a cancel from now on waits for this write (_clear_late_block)
                if turn.cancelled:
                    return
                self._writing = (q, written := threading.Event())
            try:
                self.player.write(block)
            finally:
                with self._cond:
                    self._writing = None
                written.set()


def _failed(turn: Turn, exc: Exception, wrapped: RkvoiceError) -> RkvoiceError:
    """The turn's error for ``exc`` (``wrapped`` for an unexpected one), logged and marked on its timeline."""
    err = exc if isinstance(exc, RkvoiceError) else wrapped
    log.error("turn %d: %s", turn.id, err, exc_info=err is not exc)
    turn.timeline.mark(Ev.ERROR, turn=turn.id, message=str(err))
    return err
