"""The satellite's side of the Wyoming protocol: a TCP server Home Assistant connects to.

One HA connection at a time (a new one replaces the old: HA reconnects after 3-10 s of trouble).
HA sends ``run-satellite`` (streaming allowed), ``describe`` (answered with ``info``, whose only
program is ``satellite``, so HA adds the device as a satellite), ``ping`` every ~2 s (answered with
``pong``: HA drops a satellite after 5 s without an event) and ``pause-satellite`` (mute). A run:
the microphone side (rkvoice.satellite.mic) calls ``begin_run`` after a wake on the board, which
sends ``detection`` and ``run-pipeline`` (asr -> tts), then the request's audio, until HA's
``transcript`` or ``error`` ends it. What HA sends back (``audio-start/-chunk/-stop``) is played
(rkvoice.satellite.playback) and acknowledged with ``played``; timer events keep the timer table.

Events are written by one task per connection from an outbox, so the microphone thread never waits
on the network. A malformed event or audio HA never announced gets one warning line and is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
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

from .info import satellite_info, wake_word
from .playback import Playback, Stream, StreamKind
from .timers import TimerTable

log = logging.getLogger(__name__)

RATE = 16000
KEEP_RUNS = 64  # runs remembered (a daemon runs for weeks)


@dataclass
class Run:
    """One pipeline run the satellite asked HA for."""

    id: int
    started_at: float
    over: threading.Event = field(default_factory=threading.Event)
    """Set when HA has heard the request (``transcript``), failed it (``error``), paused or left."""
    ended: str = ""
    """Why the streaming ended: transcript, error, paused, disconnected."""
    transcript: str | None = None
    error: str | None = None
    transcribing: bool = False
    """HA's pipeline started its speech-to-text (``transcribe`` came)."""
    audio_stopped: bool = False
    sent_s: float = 0.0
    """Seconds of audio sent."""
    speech_end_at: float | None = None
    """Clock time HA's VAD said the speech ended (``voice-stopped``) or the satellite sent ``audio-stop``."""
    heard_at: float | None = None
    """Clock time the transcript came."""
    reply: Stream | None = None

    def finish(self, why: str) -> None:
        if not self.over.is_set():
            self.ended = why
            self.over.set()


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.outbox: asyncio.Queue[Event | None] = asyncio.Queue()
        self.peer = str(writer.get_extra_info("peername") or "?")

    async def write_loop(self) -> None:
        while (event := await self.outbox.get()) is not None:
            await async_write_event(event, self.writer)


class SatelliteLink:
    """The protocol side. ``serve(stop)`` runs it on the calling thread (blocking); every other public
    call is safe from any thread."""

    def __init__(self, cfg: Config, playback: Playback, timers: TimerTable, clock: Clock | None = None,
                 uri: str = "") -> None:
        self.cfg = cfg
        self.endpoint = parse_uri(uri or cfg.satellite.uri)
        self.info = satellite_info(cfg)
        self.wake_word = wake_word(cfg)
        self.playback = playback
        self.timers = timers
        self.clock = clock or MonotonicClock()
        self.port = self.endpoint.port
        self.running = threading.Event()
        """HA is connected and has sent ``run-satellite`` (not paused since)."""
        self.connected = threading.Event()
        self.connections = 0
        self.run: Run | None = None
        self.runs: list[Run] = []
        """The last runs, oldest first."""
        self._run_ids = 1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: _Connection | None = None
        self._stream: Stream | None = None  # the HA audio stream being received
        self._stray = False  # warned about audio outside a stream since the last good one
        self._reply_due = False  # a synthesize came: the next stream is the run's reply
        playback.on_played = self._played

    # -- serving ---------------------------------------------------------------------------------

    def serve(self, stop: threading.Event, ready: Callable[[SatelliteLink], None] | None = None) -> None:
        """Listen until ``stop`` is set; ``ready(link)`` once bound. A port that cannot be bound is an
        RkvoiceError naming the address."""
        asyncio.run(self._serve(stop, ready))

    async def _serve(self, stop: threading.Event, ready: Callable[[SatelliteLink], None] | None) -> None:
        self._loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def wait_stop() -> None:
            stop.wait()
            self._call(done.set)

        threading.Thread(target=wait_stop, name="satellite-stop", daemon=True).start()
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
        try:
            if ready is not None:
                ready(self)
            await done.wait()
        finally:
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
        """Queue ``event`` for HA (dropped when no HA is connected)."""
        def put() -> None:
            if self._conn is not None:
                self._conn.outbox.put_nowait(event)

        self._call(put)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer)
        old, self._conn = self._conn, conn
        if old is not None:
            log.info("satellite: Home Assistant connected again from %s; closing the old connection", conn.peer)
            old.outbox.put_nowait(None)
            old.writer.close()
        self.connections += 1
        self.connected.set()
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
                self.running.clear()
                self._end_run("disconnected")
                log.info("satellite: Home Assistant disconnected")
            conn.outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writing, 1.0)
            writer.close()

    # -- events from HA ----------------------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        handler = self._handlers.get(event.type)
        try:
            if handler is not None:
                handler(self, event)
            else:
                log.debug("satellite: ignored %s", event.type)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("satellite: a malformed %s event (%s: %s); ignored", event.type, type(exc).__name__, exc)

    def _run_satellite(self, _event: Event) -> None:
        self.running.set()
        log.info("satellite: Home Assistant runs the satellite")

    def _pause(self, _event: Event) -> None:
        self.running.clear()
        self._end_run("paused")
        log.info("satellite: paused by Home Assistant (muted): not streaming")

    def _describe(self, _event: Event) -> None:
        self.send(self.info.event())

    def _ping(self, event: Event) -> None:
        self.send(Pong(text=Ping.from_event(event).text).event())

    def _transcribe(self, _event: Event) -> None:
        if self.run is not None:
            self.run.transcribing = True

    def _voice_stopped(self, _event: Event) -> None:
        if self.run is not None and self.run.speech_end_at is None:
            self.run.speech_end_at = self.clock.now()

    def _transcript(self, event: Event) -> None:
        text = Transcript.from_event(event).text
        log.info("satellite: Home Assistant heard %r", text)
        if self.run is not None:
            self.run.transcript = text
            self.run.transcribing = True
            self.run.heard_at = self.clock.now()
        self._end_run("transcript")

    def _error(self, event: Event) -> None:
        err = Error.from_event(event)
        log.warning("satellite: Home Assistant's pipeline failed: %s (%s)", err.text, err.code)
        if self.run is not None:
            self.run.error = f"{err.text} ({err.code})"
        self._end_run("error")

    def _synthesize(self, event: Event) -> None:
        log.info("satellite: Home Assistant answers %r", Synthesize.from_event(event).text)
        last = self.runs[-1] if self.runs else None
        self._reply_due = last is None or last.reply is None  # else it names the answer already streaming

    def _audio_start(self, event: Event) -> None:
        start = AudioStart.from_event(event)
        if self._stream is not None:  # a new stream without the old one's stop: end the old one
            self.playback.end(self._stream)
        last = self.runs[-1] if self.runs else None
        answering = last is not None and last.transcribing and last.error is None and last.reply is None
        # a synthesize came, or HA streams its answer before saying what it synthesises (an agent that
        # streams its text): the run's reply; audio with neither is an announcement (or a timer's sound)
        kind = StreamKind.REPLY if self._reply_due or answering else StreamKind.ANNOUNCE
        self._reply_due = False
        self._stream = self.playback.begin(start.rate, start.width, start.channels, kind)
        self._stray = self._stream is None  # an unplayable stream: its chunks are ignored without more lines
        if self._stream is not None and kind is StreamKind.REPLY and self.runs and self.runs[-1].reply is None:
            self.runs[-1].reply = self._stream

    def _audio_chunk(self, event: Event) -> None:
        chunk = AudioChunk.from_event(event)
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

    def _timer_started(self, event: Event) -> None:
        t = TimerStarted.from_event(event)
        self.timers.started(t.id, t.total_seconds, t.name)

    def _timer_updated(self, event: Event) -> None:
        t = TimerUpdated.from_event(event)
        self.timers.updated(t.id, t.is_active, t.total_seconds)

    def _timer_cancelled(self, event: Event) -> None:
        self.timers.cancelled(TimerCancelled.from_event(event).id)

    def _timer_finished(self, event: Event) -> None:
        self.playback.say(self.timers.finished(TimerFinished.from_event(event).id))

    _handlers: dict[str, Callable[[SatelliteLink, Event], None]] = {
        "run-satellite": _run_satellite, "pause-satellite": _pause, "describe": _describe, "ping": _ping,
        "transcribe": _transcribe, "voice-stopped": _voice_stopped, "transcript": _transcript, "error": _error,
        "synthesize": _synthesize, "audio-start": _audio_start, "audio-chunk": _audio_chunk,
        "audio-stop": _audio_stop, "timer-started": _timer_started, "timer-updated": _timer_updated,
        "timer-cancelled": _timer_cancelled, "timer-finished": _timer_finished,
    }

    def _played(self, stream: Stream) -> None:
        """Playback's callback (its thread): the stream has played out."""
        self.send(Played().event())

    def _end_run(self, why: str) -> None:
        run, self.run = self.run, None
        if run is not None:
            run.finish(why)

    # -- the microphone side (any thread) ----------------------------------------------------------

    def begin_run(self, head: np.ndarray) -> Run | None:
        """After a wake on the board: ``detection``, ``run-pipeline`` (asr -> tts), ``audio-start`` and
        ``head`` (16 kHz float32 heard since the wake phrase). None (with a warning) when HA is not
        running the satellite."""
        if not self.running.is_set():
            log.warning("satellite: heard the wake phrase, but Home Assistant is %s; request dropped",
                        "not connected" if not self.connected.is_set() else "not running the satellite (paused)")
            return None
        run = Run(self._run_ids, self.clock.now())
        self._run_ids += 1
        self.runs.append(run)
        del self.runs[:-KEEP_RUNS]
        old, self.run = self.run, run
        if old is not None:
            old.finish("replaced")
        self.send(Detection(name=self.wake_word, timestamp=None).event())
        self.send(RunPipeline(start_stage=PipelineStage.ASR, end_stage=PipelineStage.TTS,
                              restart_on_end=False).event())
        self.send(AudioStart(rate=RATE, width=2, channels=1).event())
        log.info("satellite: run %d: asking Home Assistant's pipeline", run.id)
        if len(head):
            self.audio(run, head)
        return run

    def audio(self, run: Run, samples: np.ndarray) -> None:
        """Microphone audio of the run (16 kHz float32); dropped once the run is over or stopped."""
        if run.over.is_set() or run.audio_stopped or not len(samples):
            return
        pcm = np.clip(np.round(np.asarray(samples, np.float32) * 32767.0), -32768, 32767).astype("<i2").tobytes()
        self.send(AudioChunk(rate=RATE, width=2, channels=1, audio=pcm,
                             timestamp=round(run.sent_s * 1000)).event())
        run.sent_s += len(samples) / RATE

    def stop_audio(self, run: Run) -> None:
        """The request's audio is complete: ``audio-stop`` (HA's speech-to-text ends)."""
        if run.audio_stopped:
            return
        run.audio_stopped = True
        if run.speech_end_at is None:
            run.speech_end_at = self.clock.now()
        self.send(AudioStop().event())
