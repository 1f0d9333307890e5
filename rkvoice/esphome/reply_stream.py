"""Home Assistant's audio by URL played as it arrives: a reply's TTS, an announcement and its chime.

The body is decoded as it comes in (rkvoice.satellite.http_audio: libsndfile, or PyAV for the FLAC Home
Assistant writes to a pipe) on the link's fetch thread, at the player's rate, and each piece goes to the
satellite's playback at once: a long answer starts playing while Home Assistant is still sending it,
where a fetch of the whole file waited for its last byte. A URL that fails or is not audio is one log
line (its stream ends with what played); at most ``MAX_AUDIO_S`` is played; a stream cut by a barge-in
or the stop word stops its download.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np

from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.http_audio import HttpBody, MediaError, decoded, reason
from rkvoice.satellite.playback import Playback, Stream

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 15.0
"""How long the server may stall (connecting, or between bytes) before the URL counts as failed."""
MAX_AUDIO_S = 600.0
"""Most of one URL played (a longer one, e.g. a stream that never ends, is cut there)."""

PIECE_MS = 100
"""Audio decoded (and handed to the playback) at a time."""


def pcm16(x: np.ndarray) -> bytes:
    return np.clip(np.round(np.asarray(x, np.float32) * 32767.0), -32768, 32767).astype("<i2").tobytes()


class ReplyStreamer:
    """Plays URLs for the link (its loop, its one fetch thread, its core and playback)."""

    def __init__(self, pool: Executor, core: SatelliteCore, playback: Playback) -> None:
        self.pool = pool
        self.core = core
        self.playback = playback
        self.rate = playback.player.rate

    async def play(self, urls: list[str], before_last_end: Callable[[Stream], None]) -> bool:
        """Play ``urls`` in order as they arrive. ``before_last_end(stream)`` is called for the last URL's
        stream before it is ended (so what follows it is known before it can have played). False when the
        last URL gave no audio."""
        last = False
        for i, url in enumerate(urls):
            last = await self.play_url(url, before_last_end if i == len(urls) - 1 else None)
        return last

    async def play_url(self, url: str, before_end: Callable[[Stream], None] | None = None) -> bool:
        """One URL: True when some of it played (its stream began)."""
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[np.ndarray | BaseException | None] = asyncio.Queue()
        stopped = threading.Event()
        bodies: list[HttpBody] = []

        def put(item: np.ndarray | BaseException | None) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, item)

        def produce() -> None:
            """On the fetch thread: the body's pieces, then None (or the error that ended it)."""
            try:
                body = HttpBody(url, FETCH_TIMEOUT_S)
                bodies.append(body)
                if stopped.is_set():
                    body.abort()
                try:
                    total = 0
                    for x in decoded(body, self.rate, PIECE_MS, stopped):
                        total += len(x)
                        if total > MAX_AUDIO_S * self.rate:
                            raise MediaError(f"lasts over {MAX_AUDIO_S:.0f} s")
                        put(x)
                    if body.error is not None and not stopped.is_set():
                        raise body.error
                finally:
                    body.close()
                put(None)
            except BaseException as exc:  # a network or decoder failure: the log's one line
                put(exc)

        loop.run_in_executor(self.pool, produce)
        stream: Stream | None = None
        try:
            while (item := await pieces.get()) is not None:
                if isinstance(item, BaseException):
                    if not stopped.is_set():
                        log.warning("esphome: Home Assistant's audio %s: %s; %s", url[:200], reason(item),
                                    "the rest not played" if stream is not None else "not played")
                    break
                if stream is None:
                    stream = self.core.stream_start(self.rate, 2, 1)
                    if stream is None:
                        break
                if stream.cut:
                    break
                if len(item):
                    self.playback.chunk(stream, pcm16(item))
        finally:
            stopped.set()
            for body in bodies:
                body.abort()
            if stream is not None:
                if before_end is not None:
                    before_end(stream)
                self.playback.end(stream)
        return stream is not None
