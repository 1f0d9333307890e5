"""The satellite's Wyoming adapter: a TCP server Home Assistant connects to, over the satellite's core
(rkvoice.satellite.core), which it drives on its event loop.

One HA connection at a time (a new one replaces the old: HA reconnects after 3-10 s of trouble).
HA sends ``run-satellite`` (streaming allowed), ``describe`` (answered with ``info``, whose only
program is ``satellite``, so HA adds the device as a satellite), ``ping`` every ~2 s (answered with
``pong``: HA drops a satellite after 5 s without an event) and ``pause-satellite`` (mute). A run: the
core, after a wake on the board, asks for it (``detection``, ``run-pipeline`` asr -> tts,
``audio-start``), then the request's audio, until HA's ``transcript`` or ``error`` ends it. What HA
sends back (``audio-start/-chunk/-stop``) is played (rkvoice.satellite.playback) and acknowledged with
``played``; timer events keep the timer table.

Events are written by one task per connection from an outbox. Each event is parsed first (HA's bad
input: one warning line, ignored), then acted on (a fault of our own: logged with its traceback). A
disconnect ends the audio stream being received; a writer that fails closes the connection and is
logged with its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.ping import Ping, Pong
from wyoming.pipeline import PipelineStage, RunPipeline
from wyoming.snd import Played
from wyoming.timer import TimerCancelled, TimerFinished, TimerStarted, TimerUpdated
from wyoming.tts import Synthesize
from wyoming.wake import Detection

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.endpoint import parse_uri
from rkvoice.errors import RkvoiceError, Stage

from .core import SatelliteCore
from .feed import loop_event
from .info import satellite_info, wake_word
from .playback import Playback, Stream
from .state import RATE, Run, SatelliteState
from .timers import TimerTable

__all__ = ["RATE", "Run", "SatelliteLink", "SatelliteState"]

log = logging.getLogger(__name__)


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.outbox: asyncio.Queue[Event | None] = asyncio.Queue()
        self.peer = str(writer.get_extra_info("peername") or "?")

    async def write_loop(self) -> None:
        """Writes the outbox until None; a failed write closes the connection (the reader ends) and is
        raised to whoever awaits the task."""
        try:
            while (event := await self.outbox.get()) is not None:
                await async_write_event(event, self.writer)
        except BaseException:
            self.writer.close()
            raise


class SatelliteLink:
    """The Wyoming adapter over its ``core``. ``serve(stop)`` runs the loop on the calling thread
    (blocking); ``send`` is safe from any thread."""

    def __init__(self, cfg: Config, playback: Playback, timers: TimerTable, clock: Clock | None = None,
                 uri: str = "") -> None:
        self.cfg = cfg
        self.endpoint = parse_uri(uri or cfg.satellite.uri)
        self.info = satellite_info(cfg)
        self.wake_word = wake_word(cfg)
        self.playback = playback
        self.timers = timers
        self.clock = clock or MonotonicClock()
        self.core = SatelliteCore(self, playback, self.clock)
        self.port = self.endpoint.port
        self.running = self.core.running
        """HA is connected and has sent ``run-satellite`` (not paused since)."""
        self.connected = threading.Event()
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: _Connection | None = None
        self._stream: Stream | None = None  # the HA audio stream being received
        self._stray = False  # warned about audio outside a stream since the last good one

    @property
    def runs(self) -> list[Run]:
        """The last runs, oldest first."""
        return self.core.runs

    @property
    def state(self) -> SatelliteState:
        return self.core.state

    # -- serving ---------------------------------------------------------------------------------

    def serve(self, stop: threading.Event, ready: Callable[[SatelliteLink], None] | None = None) -> None:
        """Listen until ``stop`` is set; ``ready(link)`` once bound. A port that cannot be bound is an
        RkvoiceError naming the address."""
        asyncio.run(self._serve(stop, ready))

    async def _serve(self, stop: threading.Event, ready: Callable[[SatelliteLink], None] | None) -> None:
        self._loop = asyncio.get_running_loop()
        done = loop_event(stop, "satellite-stop")
        ep = self.endpoint
        try:
            server = await asyncio.start_server(self._connected, host=ep.host, port=ep.port)
        except OSError as exc:
            raise RkvoiceError(Stage.WYOMING, "bind-failed", f"satellite: cannot listen on {self.cfg.satellite.uri or ep}: "
                               f"{exc.strerror or exc}; pick a free port for satellite.uri") from exc
        self.port = int(server.sockets[0].getsockname()[1])
        if not ep.loopback:
            log.warning("satellite: listening on %s:%d, reachable from other machines (the Wyoming protocol has no "
                        "authentication)", ep.host, self.port)
        log.info("satellite: waiting for Home Assistant on tcp://%s:%d", ep.host, self.port)
        hearing = self.core.feed.attach(self._loop)
        try:
            if ready is not None:
                ready(self)
            await done.wait()
        finally:
            self.core.feed.detach()
            hearing.cancel()
            server.close()
            if self._conn is not None:
                self._conn.writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)
            self._loop = None

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(fn, *args)

    def send(self, event: Event) -> None:
        """Queue ``event`` for HA (dropped when no HA is connected); from any thread."""
        def put() -> None:
            if self._conn is not None:
                self._conn.outbox.put_nowait(event)

        if self._loop is not None and self._loop_thread_is_current():
            put()
        else:
            self._call(put)

    def _loop_thread_is_current(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer)
        old, self._conn = self._conn, conn
        if old is not None:
            log.info("satellite: Home Assistant connected again from %s; closing the old connection", conn.peer)
            old.outbox.put_nowait(None)
            old.writer.close()
        self.connections += 1
        self.connected.set()
        self.core.connect()
        log.info("satellite: Home Assistant connected from %s", conn.peer)
        writing = asyncio.create_task(conn.write_loop(), name="satellite writer")
        try:
            while (event := await async_read_event(reader)) is not None:
                if self._conn is not conn:
                    break
                self._handle(event)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("satellite: Home Assistant left mid-stream (%s)", type(exc).__name__)
        except ValueError as exc:  # a line that is not a Wyoming event
            log.warning("satellite: %s sent something that is not a Wyoming event (%s); closing the connection",
                        conn.peer, exc)
        finally:
            if self._conn is conn:
                self._conn = None
                self.connected.clear()
                self.core.disconnect()
                self._end_stream("Home Assistant disconnected")
                log.info("satellite: Home Assistant disconnected")
            conn.outbox.put_nowait(None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait({writing}, timeout=1.0)
            if not writing.done():
                writing.cancel()
            elif not writing.cancelled() and (fault := writing.exception()) is not None:
                if isinstance(fault, ConnectionError):
                    log.info("satellite: writing to Home Assistant failed (%s); connection closed",
                             type(fault).__name__)
                else:
                    log.error("satellite: writing to Home Assistant failed; connection closed", exc_info=fault)
            writer.close()

    def _end_stream(self, why: str) -> None:
        """The HA audio stream being received ends here (a disconnect mid-announcement): it plays out."""
        stream, self._stream = self._stream, None
        self._stray = False
        if stream is not None:
            log.info("satellite: %s during %s audio %d; it ends there", why, stream.kind, stream.id)
            self.playback.end(stream)

    # -- the core's port ---------------------------------------------------------------------------

    def ask(self, run: Run) -> None:
        self.send(Detection(name=self.wake_word, timestamp=None).event())
        self.send(RunPipeline(start_stage=PipelineStage.ASR, end_stage=PipelineStage.TTS,
                              restart_on_end=False).event())
        self.send(AudioStart(rate=RATE, width=2, channels=1).event())

    def audio(self, run: Run, samples: np.ndarray, at_s: float) -> None:
        pcm = np.clip(np.round(np.asarray(samples, np.float32) * 32767.0), -32768, 32767).astype("<i2").tobytes()
        self.send(AudioChunk(rate=RATE, width=2, channels=1, audio=pcm, timestamp=round(at_s * 1000)).event())

    def stop_audio(self, run: Run) -> None:
        self.send(AudioStop().event())

    def played(self, stream: Stream) -> None:
        self.send(Played().event())

    # -- events from HA ----------------------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        """Parse ``event`` (HA's bad input: one warning line), then act on it (our own fault: a traceback)."""
        parse, act = self._handlers.get(event.type, (None, None))
        if act is None:
            log.debug("satellite: ignored %s", event.type)
            return
        try:
            parsed = parse(event) if parse is not None else event
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("satellite: a malformed %s event from Home Assistant (%s: %s); ignored", event.type,
                        type(exc).__name__, exc)
            return
        try:
            act(self, parsed)
        except Exception:
            log.exception("satellite: handling Home Assistant's %s failed (a fault of the satellite's own); "
                          "event dropped", event.type)

    def _run_satellite(self, _event: Event) -> None:
        self.core.run_satellite()
        log.info("satellite: Home Assistant runs the satellite")

    def _pause(self, _event: Event) -> None:
        self.core.pause()
        log.info("satellite: paused by Home Assistant (muted): not streaming")

    def _describe(self, _event: Event) -> None:
        self.send(self.info.event())

    def _ping(self, ping: Ping) -> None:
        self.send(Pong(text=ping.text).event())

    def _transcribe(self, _event: Event) -> None:
        self.core.pipeline_started()

    def _voice_stopped(self, _event: Event) -> None:
        self.core.speech_ended()

    def _transcript(self, transcript: Transcript) -> None:
        self.core.heard(transcript.text)

    def _error(self, err: Error) -> None:
        self.core.failed(err.text, err.code or "")

    def _synthesize(self, synthesize: Synthesize) -> None:
        self.core.answering(synthesize.text)

    def _audio_start(self, start: AudioStart) -> None:
        if self._stream is not None:  # a new stream without the old one's stop: end the old one
            self.playback.end(self._stream)
        self._stream = self.core.stream_start(start.rate, start.width, start.channels)
        self._stray = self._stream is None  # an unplayable stream: its chunks are ignored without more lines

    def _audio_chunk(self, chunk: AudioChunk) -> None:
        stream = self._stream
        if stream is None:
            if not self._stray:
                self._stray = True
                log.warning("satellite: audio-chunk outside an audio-start/audio-stop from Home Assistant (audio it "
                            "never announced, or microphone audio sent to the satellite): ignored")
            return
        if (chunk.rate, chunk.width, chunk.channels) != (stream.rate, 2, stream.channels):
            log.warning("satellite: an audio-chunk as %d Hz/%d bytes/%d channels inside a %d Hz/2/%d stream: ignored",
                        chunk.rate, chunk.width, chunk.channels, stream.rate, stream.channels)
            return
        self.playback.chunk(stream, chunk.audio)

    def _audio_stop(self, _event: Event) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            if not self._stray:
                log.warning("satellite: audio-stop without an audio-start from Home Assistant: ignored")
            self._stray = False
            return
        self._stray = False
        self.playback.end(stream)

    def _timer_started(self, t: TimerStarted) -> None:
        self.timers.started(t.id, t.total_seconds, t.name)

    def _timer_updated(self, t: TimerUpdated) -> None:
        self.timers.updated(t.id, t.is_active, t.total_seconds)

    def _timer_cancelled(self, t: TimerCancelled) -> None:
        self.timers.cancelled(t.id)

    def _timer_finished(self, t: TimerFinished) -> None:
        self.core.ring(self.timers.finished(t.id))

    _handlers: dict[str, tuple[Callable[[Event], Any] | None, Callable[[SatelliteLink, Any], None]]] = {
        "run-satellite": (None, _run_satellite), "pause-satellite": (None, _pause), "describe": (None, _describe),
        "ping": (Ping.from_event, _ping), "transcribe": (None, _transcribe), "voice-stopped": (None, _voice_stopped),
        "transcript": (Transcript.from_event, _transcript), "error": (Error.from_event, _error),
        "synthesize": (Synthesize.from_event, _synthesize), "audio-start": (AudioStart.from_event, _audio_start),
        "audio-chunk": (AudioChunk.from_event, _audio_chunk), "audio-stop": (None, _audio_stop),
        "timer-started": (TimerStarted.from_event, _timer_started),
        "timer-updated": (TimerUpdated.from_event, _timer_updated),
        "timer-cancelled": (TimerCancelled.from_event, _timer_cancelled),
        "timer-finished": (TimerFinished.from_event, _timer_finished),
    }
