"""The turn handle: one object per turn (a request and its spoken answer, a reminder, an apology, a
``--say`` text), made by whoever starts the turn and passed down every stage.

``cancel(reason)`` is the only way to stop a turn (barge-in, "stop", Ctrl-C, SIGTERM, the answer
deadline, a failed synthesis): the stages holding resources for it (the LLM's generation, the
speaker's queue and player) registered ``on_cancel`` callbacks, which run once, on the cancelling
thread. Nothing polls. ``id`` is the turn's generation: work queued for a cancelled turn is dropped
wherever it is found.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.timeline import Ev, Timeline

log = logging.getLogger(__name__)

_ids = itertools.count(1)


class Turn:
    """A turn's identity, cancellation, outcome and timeline (thread-safe)."""

    def __init__(self, timeline: Timeline | None = None, clock: Clock | None = None, text: str = "") -> None:
        self.id = next(_ids)
        self.timeline = timeline if timeline is not None else Timeline(clock or MonotonicClock())
        self.text = text
        """What the turn answers (the transcript) or says."""
        self.route = ""
        self.result: str | None = None
        self.exception: BaseException | None = None
        self.done = threading.Event()
        self.reason = ""
        """Why the turn was cancelled ("barge-in", "stop", "shutdown", "timeout", "error"...), else ""."""
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Turn], object]] = []

    def __repr__(self) -> str:
        state = "done" if self.done.is_set() else "open"
        return f"Turn({self.id}, {state}{', cancelled: ' + self.reason if self.reason else ''})"

    @property
    def clock(self) -> Clock:
        return self.timeline.clock

    @property
    def cancelled(self) -> bool:
        return bool(self.reason)

    def on_cancel(self, callback: Callable[[Turn], object]) -> None:
        """Run ``callback(turn)`` when the turn is cancelled (at once if it already was)."""
        with self._lock:
            if not self.reason:
                self._callbacks.append(callback)
                return
        callback(self)

    def cancel(self, reason: str = "cancelled") -> bool:
        """Stop the turn now; False if it was already cancelled or is over."""
        with self._lock:
            if self.reason or self.done.is_set():
                return False
            self.reason = reason or "cancelled"
            callbacks, self._callbacks = self._callbacks, []
        self.timeline.mark(Ev.CANCELLED, turn=self.id, reason=self.reason)
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # one stage failing to stop must not keep the others running
                log.exception("turn %d: a cancel callback failed", self.id)
        return True

    def fail(self, exc: BaseException) -> None:
        """Record the turn's failure (the first one wins) and cancel it."""
        with self._lock:
            if self.exception is None:
                self.exception = exc
        self.cancel("error")

    def finish(self, result: str | None = None) -> None:
        """The turn is over: every stage has let go of it."""
        with self._lock:
            if self.done.is_set():
                return
            self.result = result
            self._callbacks = []
        self.done.set()

    def raise_if_failed(self) -> None:
        if self.exception is not None:
            raise self.exception
