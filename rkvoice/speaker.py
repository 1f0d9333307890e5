"""The pipelined speaker: text pieces of a turn -> TTS worker thread -> post-processing -> player thread.

A turn is a stream of text pieces (a whole text, or an LLM answer arriving piece by piece):

    turn = speaker.start_turn()
    speaker.say("今天天气不错，", turn)      # any number of pieces, as they arrive
    speaker.say("我们出去走走吧。", turn)
    speaker.end_turn(turn)
    result = speaker.wait_done(turn, timeout=30)

Each piece is cut for synthesis (the turn's first chunk short, later ones longer) and made
speakable, synthesised on the TTS worker while the previous chunk plays, post-processed and
played in order by the player thread. ``cancel()`` (barge-in, "stop") ends every turn
started so far: queued pieces and audio are dropped, the player is cleared at once and
synthesis stops before the next chunk. Turn ids are a generation counter: anything carrying
an id at or below the last cancelled one is stale and dropped wherever it is found.

Turns are spoken in the order they were started (a reminder started during an answer waits
for the answer's end); every started turn must be ended or cancelled. With
``tts.coalesce_chars`` > 0, pieces of one turn that queued up while the worker was busy are
synthesised in one call (never the turn's first piece, never across turns).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rkvoice.audio.post import prepare_piece
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.timeline import Timeline

log = logging.getLogger(__name__)

_STOP = object()


@dataclass
class TurnResult:
    """How a turn ended: ``status`` is "done", "cancelled" or "error" (then ``error`` says why)."""

    turn_id: int
    status: str
    timeline: Timeline
    error: RkvoiceError | None = None
    chunks: int = 0
    audio_s: float = 0.0


def raise_if_failed(result: TurnResult | None) -> None:
    """Raise the turn's error when it ended in "error" (a synthesis or player failure mid-answer),
    so callers report a failed turn instead of a finished one."""
    if result is not None and result.status == "error" and result.error is not None:
        raise result.error


@dataclass
class _Turn:
    id: int
    timeline: Timeline
    done: threading.Event = field(default_factory=threading.Event)
    result: TurnResult | None = None
    text_seen: bool = False
    ended: bool = False
    failed: bool = False
    chunks: int = 0  # cut so far (worker thread)
    first_cut: bool = True
    audio_started: bool = False  # player thread
    audio_s: float = 0.0
    inbox: deque[tuple[str, str]] = field(default_factory=deque)
    """("piece", text) and ("end", "") items waiting for the TTS worker."""
    synth_done: bool = False  # the worker has passed this turn's end (or its failure)


def piece_chars(cfg: Config, engine: Any) -> tuple[int, int]:
    """(first, later) piece lengths in characters: the engine's own when it has them (the Matcha
    voice: tts.matcha.first_chars / chunk_chars, 24 / 40), else tts.first_chars / tts.chunk_chars."""
    own = getattr(engine, "piece_chars", None)
    if isinstance(own, tuple) and len(own) == 2 and all(isinstance(n, int) and n > 0 for n in own):
        return own
    return cfg.tts.first_chars, cfg.tts.chunk_chars


def _default_normalize(text: str) -> str:
    from rkvoice.text.normalize import speakable

    return speakable(text)


def _default_split(text: str, first: int, chunk: int) -> list[str]:
    from rkvoice.text.split import split_for_tts

    return split_for_tts(text, first=first, chunk=chunk)


class Speaker:
    """Speaks turns of text pieces through ``engine`` (a loaded TtsEngine) into ``player`` (opened).

    The caller owns the engine and the player (loads/opens and closes them); the speaker
    owns its two threads, started here and stopped by ``close()``.
    """

    def __init__(
        self,
        engine: Any,
        player: Any,
        cfg: Config,
        clock: Clock | None = None,
        timeline: Timeline | None = None,
        normalize: Callable[[str], str] | None = None,
        split: Callable[[str, int, int], list[str]] | None = None,
    ) -> None:
        self.engine = engine
        self.player = player
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self._default_timeline = timeline
        self._normalize = normalize or _default_normalize
        self._split = split or _default_split
        self.block = max(1, player.rate * cfg.audio.block_ms // 1000)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._active = 1  # the turn the TTS worker serves; turns are synthesised in id order
        self._last_turn = 0
        self._cancelled_upto = 0
        self._turns: dict[int, _Turn] = {}
        self._audio_q: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._warm_up()
        self._worker = threading.Thread(target=self._synth_loop, name="rkvoice-tts", daemon=True)
        self._playback = threading.Thread(target=self._play_loop, name="rkvoice-player", daemon=True)
        self._worker.start()
        self._playback.start()

    # -- the caller's side -------------------------------------------------------------

    def start_turn(self, timeline: Timeline | None = None) -> int:
        """Open a new turn and return its id. Its marks go to ``timeline`` (or the speaker's, or a new one)."""
        with self._lock:
            if self._closed:
                raise RkvoiceError("speak", "closed", "the speaker was closed")
            self._last_turn += 1
            turn_id = self._last_turn
            tl = timeline or self._default_timeline or Timeline(self.clock)
            self._turns[turn_id] = _Turn(turn_id, tl)
            for old in [t for t in self._turns if t < turn_id - 64 and self._turns[t].done.is_set()]:
                del self._turns[old]
        return turn_id

    def say(self, text: str, turn_id: int) -> None:
        """Queue one text piece of the turn. Pieces of a cancelled turn are dropped."""
        turn = self._turn(turn_id)
        if self._stale(turn_id) or turn.failed:
            log.debug("dropping piece of stale turn %d: %r", turn_id, text)
            return
        if turn.ended:
            raise RkvoiceError("speak", "turn-ended", f"turn {turn_id} was already ended; start a new turn")
        if not turn.text_seen and text.strip():
            turn.text_seen = True
            turn.timeline.mark("text_ready", turn=turn_id)
        with self._cond:
            turn.inbox.append(("piece", text))
            self._cond.notify_all()

    def end_turn(self, turn_id: int) -> None:
        """No more pieces for this turn: it is done once everything queued has played."""
        turn = self._turn(turn_id)
        if turn.ended:
            return
        turn.ended = True
        with self._cond:
            turn.inbox.append(("end", ""))
            self._cond.notify_all()

    def speak(self, text: str, timeline: Timeline | None = None) -> int:
        """Speak a whole text as one turn; returns the turn id (see ``wait_done``)."""
        turn_id = self.start_turn(timeline)
        self.say(text, turn_id)
        self.end_turn(turn_id)
        return turn_id

    def wait_done(self, turn_id: int, timeout: float | None = None) -> TurnResult | None:
        """Block until the turn has played out, was cancelled or failed; None on timeout."""
        turn = self._turn(turn_id)
        if not turn.done.wait(timeout):
            return None
        return turn.result

    def cancel(self) -> None:
        """Stop every turn started so far: the player falls silent now, synthesis stops before the next chunk."""
        with self._cond:
            upto = self._last_turn
            self._cancelled_upto = upto
            victims = [t for t in self._turns.values() if t.id <= upto and not t.done.is_set()]
            for t in victims:
                t.inbox.clear()
            self._cond.notify_all()  # the worker moves past the cancelled turns
        self.player.clear()
        for turn in victims:
            turn.timeline.mark("cancelled", turn=turn.id)
            self._finish(turn, "cancelled")

    def close(self, timeout: float = 5.0) -> None:
        """Let started turns finish, then stop both threads (``cancel()`` first to stop at once).

        Every started turn must be ended (``end_turn``) or cancelled: turns are spoken in the
        order they were started, so an open turn holds back the ones after it."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._worker.join(timeout)
        self._playback.join(timeout)

    def wait_handed(self) -> None:
        """Block until every chunk queued so far has been handed to the player.

        Scripted engines on a controlled clock call this before "taking time", so the player
        thread's marks happen at the clock time they would have in real life.
        """
        self._audio_q.join()

    @property
    def current_turn(self) -> int:
        return self._last_turn

    # -- internals -----------------------------------------------------------------------

    def _warm_up(self) -> None:
        """Run normalisation and post-processing once so the first turn doesn't pay for lazy imports."""
        self._normalize("今天是1月2日。")
        rate = getattr(self.engine, "sample_rate", self.player.rate)
        tone = (0.3 * np.sin(np.arange(rate // 2, dtype=np.float32) * 0.1)).astype(np.float32)
        prepare_piece(tone, rate, self.player.rate, self.block, fade_ms=self.cfg.audio.crossfade_ms)

    def _turn(self, turn_id: int) -> _Turn:
        try:
            return self._turns[turn_id]
        except KeyError:
            raise RkvoiceError("speak", "unknown-turn", f"turn {turn_id} was never started (call start_turn)") from None

    def _stale(self, turn_id: int) -> bool:
        return turn_id <= self._cancelled_upto

    def _finish(self, turn: _Turn, status: str, error: RkvoiceError | None = None) -> None:
        with self._lock:
            if turn.done.is_set():
                return
            turn.result = TurnResult(turn.id, status, turn.timeline, error, turn.chunks, round(turn.audio_s, 4))
            turn.done.set()

    def _pieces(self, turn: _Turn, text: str, limit: int) -> list[str]:
        """Cut the written text (where numbers and words are still visible, so no cut lands
        inside them), then make each chunk speakable; chunks with nothing to say are dropped."""
        if not text.strip():
            return []
        first = piece_chars(self.cfg, self.engine)[0] if turn.first_cut else limit
        chunks = [self._normalize(c) for c in self._split(text, first, limit)]
        chunks = [c for c in chunks if c.strip()]
        if chunks:
            turn.first_cut = False
        return chunks

    def _next_item(self) -> tuple[_Turn, str, str, bool] | None:
        """Wait for work of the active turn, moving past turns that ended or were cancelled.

        None once the speaker is closed and every started turn has been served."""
        with self._cond:
            while True:
                turn = self._turns.get(self._active)
                if turn is None:
                    if self._active <= self._last_turn:  # pruned long ago
                        self._active += 1
                        continue
                    if self._closed:
                        return None
                elif self._stale(turn.id) or turn.synth_done:
                    self._active += 1
                    continue
                elif turn.inbox:
                    kind, text = turn.inbox.popleft()
                    merged = False
                    if kind == "piece" and not turn.first_cut and self.cfg.tts.coalesce_chars > 0:
                        merged_text = self._coalesce(turn, text)
                        merged, text = merged_text != text, merged_text
                    return turn, kind, text, merged
                self._cond.wait()

    def _coalesce(self, turn: _Turn, text: str) -> str:
        """Pieces of the turn that queued up while the worker was busy join this one (one synthesis call)."""
        budget = self.cfg.tts.coalesce_chars - len(text)
        while turn.inbox and turn.inbox[0][0] == "piece" and len(turn.inbox[0][1]) <= budget:
            more = turn.inbox.popleft()[1]
            text += more
            budget -= len(more)
        return text

    def _synth_loop(self) -> None:
        while True:
            work = self._next_item()
            if work is None:
                self._audio_q.put(_STOP)
                return
            turn, kind, text, merged = work
            if self._stale(turn.id):
                continue
            if kind == "end":
                turn.synth_done = True
                self._audio_q.put((turn.id, "end", None))
                continue
            chunk_chars = piece_chars(self.cfg, self.engine)[1]
            limit = max(chunk_chars, self.cfg.tts.coalesce_chars) if merged else chunk_chars
            try:
                for chunk in self._pieces(turn, text, limit):
                    if self._stale(turn.id):
                        break
                    self._synth_one(turn, chunk)
            except Exception as exc:  # an engine failure ends this turn, never the thread
                err = exc if isinstance(exc, RkvoiceError) else RkvoiceError(
                    "tts", "synthesis-failed", f"{getattr(self.engine, 'name', 'tts')} failed: {exc}"
                )
                log.error("turn %d: %s", turn.id, err, exc_info=not isinstance(exc, RkvoiceError))
                with self._cond:
                    turn.failed = True
                    turn.synth_done = True
                    turn.inbox.clear()
                turn.timeline.mark("error", turn=turn.id, message=str(err))
                self._audio_q.put((turn.id, "end", err))

    def _synth_one(self, turn: _Turn, chunk: str) -> None:
        index = turn.chunks
        turn.chunks += 1
        tl = turn.timeline
        tl.mark("chunk", turn=turn.id, index=index, text=chunk)
        t0 = self.clock.now()
        tl.mark("synth_start", turn=turn.id, index=index)
        samples, rate = self.engine.generate(chunk, sid=self.cfg.tts.sid, speed=self.cfg.tts.speed)
        synth_ms = (self.clock.now() - t0) * 1000.0
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        tl.mark(
            "synth_end", turn=turn.id, index=index, synth_ms=round(synth_ms, 3), audio_s=round(len(samples) / rate, 4)
        )
        if self._stale(turn.id):
            return
        blocks = prepare_piece(samples, rate, self.player.rate, self.block, fade_ms=self.cfg.audio.crossfade_ms)
        if len(blocks):
            self._audio_q.put((turn.id, "audio", (index, blocks)))

    def _play_loop(self) -> None:
        while True:
            item = self._audio_q.get()
            turn: _Turn | None = None
            try:
                if item is _STOP:
                    return
                turn_id, kind, payload = item
                turn = self._turns.get(turn_id)
                if turn is None or self._stale(turn_id):
                    continue
                if kind == "audio":
                    self._play_chunk(turn, *payload)
                else:
                    self._end_playback(turn, payload)
            except Exception as exc:  # a broken player ends the turn, never the thread
                err = exc if isinstance(exc, RkvoiceError) else RkvoiceError("player", "failed", str(exc))
                log.error("player: %s", err, exc_info=not isinstance(exc, RkvoiceError))
                if turn is not None:
                    turn.timeline.mark("error", turn=turn.id, message=str(err))
                    turn.failed = True
                    self._finish(turn, "error", err)
            finally:
                self._audio_q.task_done()

    def _play_chunk(self, turn: _Turn, index: int, blocks: np.ndarray) -> None:
        if turn.failed:
            return
        audio_s = blocks.size / self.player.rate
        if not turn.audio_started:
            turn.audio_started = True
            turn.timeline.mark("audio_first", turn=turn.id)
        turn.timeline.mark("play_chunk", turn=turn.id, index=index, audio_s=round(audio_s, 4))
        turn.audio_s += audio_s
        for block in blocks:
            if self._stale(turn.id):
                return
            self.player.write(block)
            if self._stale(turn.id):  # cancel() cleared the player while this block went in
                self.player.clear()
                return

    def _end_playback(self, turn: _Turn, error: RkvoiceError | None) -> None:
        self.player.drain()
        if self._stale(turn.id) or turn.done.is_set():
            return
        turn.timeline.mark("play_end", turn=turn.id)
        self._finish(turn, "error" if error else "done", error)
