"""Frames from the microphone thread to the hear thread, and what was heard back to the core's loop.

The microphone thread only posts frames (``post_frame``); hearing them (the wake engine, the board's
VAD: blocking inference) runs on one hear thread, one batch at a time, for the ``Job`` the core decides
on its loop, and each frame heard goes back to the core on the loop (``on_heard``). Other threads
(playback) reach the loop with ``post``. Without a loop (tests that drive the core on one thread) every
call runs inline."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from .state import Heard, Hearing, Job

log = logging.getLogger(__name__)

MAX_BATCH = 64
"""Most frames heard in one hand-off to the hear thread (2 s of audio)."""


def loop_event(stop: threading.Event, name: str) -> asyncio.Event:
    """On a running loop: an asyncio.Event set once ``stop`` (a thread's event) is set (a daemon thread
    ``name`` waits for it), so a protocol's loop can await its end."""
    loop, done = asyncio.get_running_loop(), asyncio.Event()

    def wait_stop() -> None:
        stop.wait()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(done.set)

    threading.Thread(target=wait_stop, name=name, daemon=True).start()
    return done


class FeedTarget(Protocol):
    """What the feed tells, on the loop (rkvoice.satellite.core.SatelliteCore)."""

    def job(self) -> Job: ...

    def on_heard(self, heard: Heard) -> None: ...

    def hearing_failed(self) -> None: ...

    def source_ended(self) -> None: ...


class FrameFeed:
    """The core's loop, its frame queue and its hear thread. ``hearing`` hears, ``busy(what)`` marks the
    hearing (stuck in it: no watchdog pings), ``on_error`` is told of a frame that could not be heard (a
    model failure; the next frame is heard); without it the failure is logged with its traceback."""

    def __init__(self, target: FeedTarget) -> None:
        self.target = target
        self.hearing: Hearing | None = None
        self.busy: Callable[[str], AbstractContextManager[None]] = lambda _what: contextlib.nullcontext()
        self.on_error: Callable[[BaseException], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._frames: asyncio.Queue[np.ndarray | None] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._drained = threading.Event()

    def attach(self, loop: asyncio.AbstractEventLoop) -> asyncio.Task[None]:
        """Run on ``loop`` from now on: the task that hears the posted frames, one at a time."""
        self._loop = loop
        self._frames = asyncio.Queue()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rkvoice-satellite-hear")
        return loop.create_task(self._hear_frames(), name="satellite hearing")

    def detach(self) -> None:
        self._loop = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._drained.set()

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """From any thread: ``fn(*args)`` on the loop (inline without one)."""
        loop = self._loop
        if loop is None:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    def post_frame(self, frame: np.ndarray | None) -> bool:
        """From the microphone thread: a frame to hear (None: the source ended). False without a loop."""
        loop, frames = self._loop, self._frames
        if loop is None or frames is None:
            return False
        if frame is None:
            self._drained.clear()
        try:
            loop.call_soon_threadsafe(frames.put_nowait, frame)
        except RuntimeError:
            return False
        return True

    def wait_drained(self, timeout_s: float) -> bool:
        """After ``post_frame(None)``: every frame before it has been heard."""
        return self._drained.wait(timeout_s)

    async def _hear_frames(self) -> None:
        """Hear the posted frames in order. Frames that queued up (behind a wake decision's ASR) are heard
        in one batch on the hear thread, up to the first that changes what the next must be heard for
        (a wake, the end of the request's speech): one hand-off per batch, not per frame, so a backlog
        drains at once instead of at the pace of thread switches."""
        assert self._frames is not None
        loop = asyncio.get_running_loop()
        pending: deque[np.ndarray | None] = deque()
        while True:
            if not pending:
                pending.append(await self._frames.get())
            while not self._frames.empty():
                pending.append(self._frames.get_nowait())
            if pending[0] is None:
                pending.popleft()
                self.target.source_ended()
                self._drained.set()
                continue
            batch: list[np.ndarray] = []
            for frame in pending:
                if frame is None or len(batch) == MAX_BATCH:
                    break
                batch.append(frame)
            hearing, pool = self.hearing, self._pool
            if hearing is None or pool is None:
                for _ in batch:
                    pending.popleft()
                continue
            job = self.target.job()
            try:
                heards = await loop.run_in_executor(pool, self._hear_batch, hearing, batch, job)
            except Exception as exc:  # a model failure: reported, the frames after it are heard
                for _ in batch:
                    pending.popleft()
                if self.on_error is not None:
                    self.on_error(exc)
                else:
                    log.exception("satellite: hearing a frame failed")
                self.target.hearing_failed()
                continue
            for heard in heards:
                pending.popleft()
                try:
                    self.target.on_heard(heard)
                except Exception:  # a fault of ours acting on it: logged, the next frame is heard
                    log.exception("satellite: acting on a frame heard failed")

    def _hear_batch(self, hearing: Hearing, frames: list[np.ndarray], job: Job) -> list[Heard]:
        """On the hear thread: ``frames`` heard for ``job`` (its restarts with the first), up to and with the
        first that woke, heard a stop phrase or ended the request's speech."""
        out: list[Heard] = []
        with self.busy("hear"):
            for frame in frames:
                heard = hearing.hear(frame, job)
                out.append(heard)
                if heard.hit is not None or heard.speech_end_s is not None or heard.stop is not None:
                    break
                job = Job(wake=job.wake, stop_word=job.stop_word)
        return out
