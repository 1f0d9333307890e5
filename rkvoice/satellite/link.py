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
on the network. A malformed event or audio HA never announced gets one warning line and is ignored;
a fault of our own while handling an event (playback, timers) is logged with its traceback.

HA's events carry no run id: they belong to the pipeline HA runs now, and HA starts its pipelines in
the order they were asked (each with ``transcribe``). So the runs asked wait in a queue; ``transcribe``
makes the oldest one HA's current run, and its ``transcript``, ``error`` and reply go to that run only
(a late transcript is never credited to a run asked after it). The run bookkeeping is kept under one
lock: the microphone thread begins runs while the event loop ends them, in any order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
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
    _ending: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def finish(self, why: str) -> bool:
        """End the run (from any thread; the first reason stays); False if it was over already."""
        with self._ending:
            if self.over.is_set():
                return False
            self.ended = why
            self.over.set()
            return True


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
        self.runs: list[Run] = []
        """The last runs, oldest first."""
        self._run_ids = 1
        self._lock = threading.Lock()  # the run bookkeeping below, ``running`` with it, and each run's fields
        self._asked: deque[Run] = deque()  # runs asked whose pipeline HA has not started (no ``transcribe`` yet)
        self._ha_run: Run | None = None  # the run of the pipeline HA runs now: its events go to it
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
                self._end_runs("disconnected", stop_running=True)
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
        with self._lock:
            self.running.set()
        log.info("satellite: Home Assistant runs the satellite")

    def _pause(self, _event: Event) -> None:
        self._end_runs("paused", stop_running=True)
        log.info("satellite: paused by Home Assistant (muted): not streaming")

    def _describe(self, _event: Event) -> None:
        self.send(self.info.event())

    def _ping(self, ping: Ping) -> None:
        self.send(Pong(text=ping.text).event())

    def _transcribe(self, _event: Event) -> None:
        """HA started the pipeline of the oldest run asked: its events go to that run from now on."""
        with self._lock:
            run = self._asked.popleft() if self._asked else None
            self._ha_run = run
            if run is not None:
                run.transcribing = True
        if run is None:
            log.warning("satellite: Home Assistant started a pipeline the satellite did not ask for; its events "
                        "are ignored")

    def _voice_stopped(self, _event: Event) -> None:
        with self._lock:
            run = self._ha_run
            if run is not None and run.speech_end_at is None:
                run.speech_end_at = self.clock.now()

    def _pipeline_run(self) -> Run | None:
        """The run HA's ``transcript`` or ``error`` is of: HA's current run, else (HA failed before it
        started its speech-to-text) the oldest asked; under the lock."""
        if self._ha_run is None and self._asked:
            self._ha_run = self._asked.popleft()
        return self._ha_run

    def _transcript(self, transcript: Transcript) -> None:
        text = transcript.text
        with self._lock:
            run = self._pipeline_run()
            late = run is not None and run.over.is_set()
            if run is not None and run.transcript is None:
                run.transcript, run.transcribing, run.heard_at = text, True, self.clock.now()
        if run is None:
            log.warning("satellite: Home Assistant heard %r for no run the satellite asked; ignored", text)
        elif late:
            log.info("satellite: Home Assistant heard %r for run %d, which had ended (%s); credited to it alone",
                     text, run.id, run.ended)
        else:
            log.info("satellite: Home Assistant heard %r", text)
            run.finish("transcript")

    def _error(self, err: Error) -> None:
        log.warning("satellite: Home Assistant's pipeline failed: %s (%s)", err.text, err.code)
        with self._lock:
            run = self._pipeline_run()
            if run is not None and run.error is None:
                run.error = f"{err.text} ({err.code})"
        if run is not None:
            run.finish("error")

    def _synthesize(self, synthesize: Synthesize) -> None:
        log.info("satellite: Home Assistant answers %r", synthesize.text)
        with self._lock:
            run = self._ha_run
            self._reply_due = run is None or run.reply is None  # else it names the answer already streaming

    def _audio_start(self, start: AudioStart) -> None:
        if self._stream is not None:  # a new stream without the old one's stop: end the old one
            self.playback.end(self._stream)
        with self._lock:
            run = self._ha_run
            answering = run is not None and run.transcribing and run.error is None and run.reply is None
            # a synthesize came, or HA streams its answer before saying what it synthesises (an agent that
            # streams its text): the run's reply; audio with neither is an announcement (or a timer's sound)
            kind = StreamKind.REPLY if self._reply_due or answering else StreamKind.ANNOUNCE
            self._reply_due = False
        self._stream = self.playback.begin(start.rate, start.width, start.channels, kind)
        self._stray = self._stream is None  # an unplayable stream: its chunks are ignored without more lines
        if self._stream is not None and kind is StreamKind.REPLY and run is not None:
            with self._lock:
                if run.reply is None:
                    run.reply = self._stream

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
        self.playback.say(self.timers.finished(t.id))

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

    def _played(self, stream: Stream) -> None:
        """Playback's callback (its thread): the stream has played out."""
        self.send(Played().event())

    def _end_runs(self, why: str, stop_running: bool = False) -> None:
        """Every run not over ends (HA paused or left: its pipelines are gone); with ``stop_running`` HA no
        longer runs the satellite, in the same step (a run begun meanwhile is refused or ended, never
        left streaming)."""
        with self._lock:
            if stop_running:
                self.running.clear()
            ending = [run for run in self.runs if not run.over.is_set()]
            self._asked.clear()
            self._ha_run = None
        for run in ending:
            run.finish(why)

    # -- the microphone side (any thread) ----------------------------------------------------------

    def begin_run(self, head: np.ndarray) -> Run | None:
        """After a wake on the board: ``detection``, ``run-pipeline`` (asr -> tts), ``audio-start`` and
        ``head`` (16 kHz float32 heard since the wake phrase). None (with a warning) when HA is not
        running the satellite."""
        with self._lock:
            running, connected = self.running.is_set(), self.connected.is_set()
            if running:
                run = Run(self._run_ids, self.clock.now())
                self._run_ids += 1
                replaced = [old for old in self.runs if not old.over.is_set()]
                self.runs.append(run)
                del self.runs[:-KEEP_RUNS]
                self._asked.append(run)
        if not running:
            log.warning("satellite: heard the wake phrase, but Home Assistant is %s; request dropped",
                        "not connected" if not connected else "not running the satellite (paused)")
            return None
        for old in replaced:
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
        with self._lock:
            at = run.sent_s
            run.sent_s += len(samples) / RATE
        self.send(AudioChunk(rate=RATE, width=2, channels=1, audio=pcm, timestamp=round(at * 1000)).event())

    def stop_audio(self, run: Run) -> None:
        """The request's audio is complete: ``audio-stop`` (HA's speech-to-text ends)."""
        with self._lock:
            if run.audio_stopped:
                return
            run.audio_stopped = True
            if run.speech_end_at is None:
                run.speech_end_at = self.clock.now()
        self.send(AudioStop().event())
