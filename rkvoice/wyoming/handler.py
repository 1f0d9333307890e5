"""One Wyoming connection: read events within limits, dispatch them to the services, answer errors.

Events are framed and parsed by the ``wyoming`` package; the reader it reads from refuses a data
or payload section above ``max_event_bytes`` before reading it. A malformed event (bad JSON, a
header that is not an event, a line over the stream limit), an oversized section, audio beyond
``max_audio_s`` or ``idle_timeout_s`` without an event gets an ``error`` event and the connection is
closed; a request the server cannot serve (an unknown event, an unknown voice, a bad audio format,
a field of the wrong JSON type) gets an ``error`` event and the connection stays open. Nothing here
touches another connection.

Events are read by a task of their own into a short queue and handled one at a time from it, so a
client that leaves is noticed while its request is still being worked on: the request is cancelled
(a transcription or synthesis still queued for its engine never runs, an LLM answer stops). The idle
limit counts while the server waits for the client's next event, in every state (also inside a
streamed synthesis). A connection over ``max_clients`` closes the one idle longest (no request in
progress for EVICT_IDLE_S) and is served; when none is idle it is still answered if its first event is
``describe`` (Home Assistant gives ``describe`` one second), then closed; anything else is ``busy``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_read_event
from wyoming.info import Describe, Info, SelectProgram
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped
from wyoming.wake import Detect

from rkvoice.answer.respond import _cut_early
from rkvoice.config import WyomingConfig
from rkvoice.errors import RkvoiceError
from rkvoice.gate import Engines

from .audio import AudioIn
from .fields import check_fields
from .languages import primary
from .services import AsrRequest, WakeStream, answer
from .tts import QUIET_S, SpeechOut, Voices, chunker, cut

log = logging.getLogger(__name__)

OpenVoice = Callable[[str], Awaitable[tuple[SpeechOut, Any]]]
"""Opens the stream's voice for its first text: (its SpeechOut, its engine)."""

INBOX_EVENTS = 64
"""Events read ahead of the one being handled (back-pressure on a client that sends faster)."""
OVER_LIMIT_WAIT_S = 2.0
"""How long a connection over max_clients may take to send its describe."""
EVICT_IDLE_S = 1.0
"""A connection waiting this long with no request in progress is closed ("evicted") when a new one
arrives over max_clients: held idle sockets cannot keep Home Assistant's requests out."""
SERVED = ("describe, transcribe, audio-start/-chunk/-stop, synthesize, synthesize-start/-chunk/-stop, "
          "detect, transcript, select-program, ping")


class Refused(Exception):
    """The peer broke a limit; the message goes to it as an error event before the connection closes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LimitedReader:
    """The connection's StreamReader as the wyoming package reads it, refusing oversized sections."""

    def __init__(self, reader: asyncio.StreamReader, max_bytes: int) -> None:
        self._reader = reader
        self.max_bytes = max_bytes
        self.eof = False

    async def readline(self) -> bytes:
        line = await self._reader.readline()
        if not line:
            self.eof = True
        return line

    async def readexactly(self, n: int) -> bytes:
        if n > self.max_bytes:
            raise Refused("too-large", f"an event section of {n} bytes is over the {self.max_bytes}-byte limit "
                                       "(wyoming.max_event_bytes); send audio in smaller chunks")
        return await self._reader.readexactly(n)


class Context:
    """What every connection shares: settings, engines, voices, the info answer, the client count."""

    def __init__(self, cfg: Any, wcfg: WyomingConfig, engines: Engines, voices: Voices,
                 info: Info, wake_name: str) -> None:
        self.cfg = cfg
        self.wcfg = wcfg
        self.engines = engines
        self.voices = voices
        self.info = info
        self.wake_name = wake_name
        self.clients = 0
        self.wake_slots = asyncio.Semaphore(wcfg.max_wake_streams)
        self.idle_since: dict[WyomingHandler, float] = {}
        """Connections waiting for their next event with no request in progress -> since when (loop time)."""

    def evict_oldest_idle(self, now: float) -> bool:
        """Close the connection idle longest, if one has been idle EVICT_IDLE_S; True if one was."""
        if not self.idle_since:
            return False
        handler, since = min(self.idle_since.items(), key=lambda item: item[1])
        if now - since < EVICT_IDLE_S:
            return False
        del self.idle_since[handler]
        handler.evict()
        return True


class _SpeechStream:
    """A streamed synthesis on a task of its own: text arrives by ``feed``, is cut by the StreamChunker
    and synthesised piece by piece, in order.

    With no voice named, the voice is chosen from the first text that arrives (``synthesize-start``
    carries none). A piece that waits for more text (a clause with no sentence end yet) is spoken once
    the text has been quiet for ``quiet_s``: the local answerer's rule for a starving speaker
    (``_cut_early``), since the client may be waiting for it.
    """

    def __init__(self, ctx: Context, open_voice: OpenVoice, quiet_s: float) -> None:
        self.ctx = ctx
        self.open_voice = open_voice
        self.quiet_s = quiet_s
        self.chars = 0
        self.texts: asyncio.Queue[str | None] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(), name="wyoming synthesis")

    async def _run(self) -> None:
        first = ""
        item: str | None = ""
        while item is not None and not first.strip():  # the voice follows the first text
            item = await self.texts.get()
            first += item or ""
        out, engine = await self.open_voice(first)
        cutter = chunker(self.ctx.cfg, engine)
        ready = cutter.feed(first) if item is not None else []
        ended, armed = item is None, True
        while True:
            for piece in ready:
                await out.piece(piece)
            if ended:
                break
            wait = self.quiet_s if armed and cutter.pending.strip() else None
            try:
                item = await asyncio.wait_for(self.texts.get(), wait)
            except TimeoutError:  # the text has gone quiet: what is complete of it goes now
                ready, armed = _cut_early(cutter), False
                continue
            armed = True
            ended = item is None
            ready = cutter.flush() if item is None else cutter.feed(item)
        await out.finish()

    def feed(self, text: str) -> None:
        self.texts.put_nowait(text)

    async def stop(self) -> None:
        self.texts.put_nowait(None)
        await self.task


class WyomingHandler(AsyncEventHandler):
    def __init__(self, ctx: Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.ctx = ctx
        self.limits = ctx.wcfg
        self._reader = LimitedReader(reader, ctx.wcfg.max_event_bytes)
        self._inbox: asyncio.Queue[Event | BaseException | None] = asyncio.Queue(INBOX_EVENTS)
        self._gone = asyncio.Event()
        """Set when the client has left (end of stream or a broken connection)."""
        self._listener: AsrRequest | WakeStream | None = None
        self._wake: WakeStream | None = None
        self._audio: AudioIn | None = None
        self._discard_audio = False
        self._refused = False
        """The last transcribe or detect was refused: its audio stream is dropped up to audio-stop."""
        self._speech: _SpeechStream | None = None
        self.peer = str(writer.get_extra_info("peername") or "unix socket")

    async def run(self) -> None:
        """Read and handle events until the peer leaves, breaks a limit or stays idle too long."""
        self.ctx.clients += 1
        reading = asyncio.create_task(self._read_events(), name="wyoming reader")
        try:
            if self.ctx.clients > self.limits.max_clients and not self.ctx.evict_oldest_idle(self._loop_time()):
                await self._over_limit()
                return
            while True:
                event = await self._next_event()
                if event is None or not await self._handle_unless_gone(event):
                    break
        except Refused as exc:  # an idle client is ordinary; a broken limit is worth a warning
            log.log(logging.INFO if exc.code == "idle" else logging.WARNING, "wyoming %s: %s", self.peer, exc.message)
            await self._try_send(Error(text=exc.message, code=exc.code).event())
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("wyoming %s left mid-stream (%s)", self.peer, type(exc).__name__)
        except Exception as exc:  # a fault of this server: this connection ends, the others go on
            log.exception("wyoming %s: request failed", self.peer)
            await self._try_send(Error(text=f"the server failed on this request: {exc}", code="internal").event())
        finally:
            self.ctx.clients -= 1
            self.ctx.idle_since.pop(self, None)
            reading.cancel()
            await self.disconnect()
            self.writer.close()

    async def _read_events(self) -> None:
        """Events into the inbox until the end of the stream (None), a broken connection or a broken
        limit (the exception, raised when the handler reaches it)."""
        try:
            while True:
                event = await self._read_one()
                await self._inbox.put(event)
                if event is None:
                    self._gone.set()
                    return
        except Refused as exc:
            await self._inbox.put(exc)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            self._gone.set()
            await self._inbox.put(exc)
        except Exception as exc:  # a fault of this server: raised where the handler reaches it
            await self._inbox.put(exc)

    async def _read_one(self) -> Event | None:
        try:
            event = await async_read_event(self._reader)  # type: ignore[arg-type]
        except (AttributeError, KeyError, TypeError, RecursionError) as exc:
            raise Refused("malformed", f"malformed event header ({type(exc).__name__})") from exc
        if event is None and not self._reader.eof:
            raise Refused("malformed", "malformed event: not one line of JSON with a type, or a line over 64 KiB")
        return event

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    def evict(self) -> None:
        """Make way for a new connection: this idle one gets an ``evicted`` error and is closed."""
        with suppress(asyncio.QueueFull):
            self._inbox.put_nowait(Refused("evicted", f"closed to make way for a new connection: this one was "
                                                      f"idle and the server serves {self.limits.max_clients} at "
                                                      "most (wyoming.max_clients)"))

    async def _next_event(self) -> Event | None:
        """The next event from the inbox; ``Refused("idle")`` when none comes within the idle limit."""
        if self._listener is None and self._speech is None:  # nothing in progress: may be evicted
            self.ctx.idle_since[self] = self._loop_time()
        try:
            item = await asyncio.wait_for(self._inbox.get(), self.limits.idle_timeout_s)
        except TimeoutError:
            what = " inside a streamed synthesis" if self._speech is not None else ""
            raise Refused("idle", f"no event for {self.limits.idle_timeout_s:g} s{what} "
                                  "(wyoming.idle_timeout_s); closing the connection") from None
        finally:
            self.ctx.idle_since.pop(self, None)
        if isinstance(item, BaseException):
            raise item
        return item

    async def _handle_unless_gone(self, event: Event) -> bool:
        """Handle ``event``; if the client leaves meanwhile, cancel the work and return False. A client
        already gone (it sent its request and closed at once) has nothing started for it."""
        if self._gone.is_set():
            log.info("wyoming %s left; its %s request is dropped", self.peer, event.type)
            return False
        work = asyncio.ensure_future(self.handle_event(event))
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if work.done():
            return work.result()
        work.cancel()  # also cancels what it has queued for an engine (asyncio.wrap_future)
        with suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
            await work
        log.info("wyoming %s left; its %s request is cancelled", self.peer, event.type)
        return False

    async def _over_limit(self) -> None:
        """A connection past max_clients: a describe is answered (clients check the server with it),
        anything else, or nothing within OVER_LIMIT_WAIT_S, is ``busy``; then it is closed."""
        busy = Refused("busy", f"the server already serves {self.limits.max_clients} connections "
                               "(wyoming.max_clients); try again later")
        if self.ctx.clients > 2 * self.limits.max_clients:
            raise busy
        try:
            item = await asyncio.wait_for(self._inbox.get(), min(OVER_LIMIT_WAIT_S, self.limits.idle_timeout_s))
        except TimeoutError:
            raise busy from None
        if not isinstance(item, Event) or not Describe.is_type(item.type):
            raise busy
        await self.write_event(self.ctx.info.event())

    async def _try_send(self, event: Event) -> None:
        try:
            await self.write_event(event)
        except (ConnectionError, RuntimeError):
            pass

    async def disconnect(self) -> None:
        speech, self._speech = self._speech, None
        if speech is not None:
            if not speech.task.done():
                speech.task.cancel()
            elif not speech.task.cancelled() and speech.task.exception() is not None:
                log.info("wyoming %s: a streamed synthesis ended in %s", self.peer, speech.task.exception())
        if self._wake is not None:
            self._wake.close()
            self._wake = None

    async def handle_event(self, event: Event) -> bool:
        try:
            check_fields(str(event.type), event.data)
            await self._dispatch(event)
        except RkvoiceError as exc:
            log.info("wyoming %s: %s", self.peer, exc)
            await self.write_event(Error(text=exc.message, code=exc.code).event())
            return exc.code != "audio-too-long"
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            message = f"event {event.type!r} has missing or bad fields ({type(exc).__name__}: {exc})"
            await self.write_event(Error(text=message, code="bad-event").event())
        return True

    async def _dispatch(self, event: Event) -> None:
        kind = event.type
        if AudioChunk.is_type(kind):
            await self._audio_chunk(AudioChunk.from_event(event))
        elif AudioStart.is_type(kind):
            if self._refused:
                return
            self._start_audio(AudioStart.from_event(event))
            if isinstance(self._listener, WakeStream):
                await self._listener.begin(self._audio)  # type: ignore[arg-type]
        elif AudioStop.is_type(kind):
            await self._audio_stop()
        elif Describe.is_type(kind):
            await self.write_event(self.ctx.info.event())
        elif Transcribe.is_type(kind) or Detect.is_type(kind):
            self._listener, self._refused = None, True  # a refused request's audio is not transcribed
            if Transcribe.is_type(kind):
                self._listener = AsrRequest(self.ctx.engines, self._asr_language(Transcribe.from_event(event)))
            else:
                self._listener = self._wake_stream(Detect.from_event(event))
            self._refused = False
        elif Transcript.is_type(kind):
            await answer(self.ctx.engines, Transcript.from_event(event).text, self.write_event,
                         self.limits.max_text_chars)
        elif Synthesize.is_type(kind):
            if self._speech is None:  # while streaming, synthesize repeats the streamed text: skipped
                await self._synthesize(Synthesize.from_event(event))
        elif SynthesizeStart.is_type(kind):
            await self._speech_start(SynthesizeStart.from_event(event))
        elif SynthesizeChunk.is_type(kind):
            self._speech_chunk(SynthesizeChunk.from_event(event).text)
        elif SynthesizeStop.is_type(kind):
            await self._speech_stop()
        elif SelectProgram.is_type(kind):
            self._select(SelectProgram.from_event(event).name)
        elif Ping.is_type(kind):
            await self.write_event(Pong(text=Ping.from_event(event).text).event())
        else:
            raise RkvoiceError("wyoming", "unknown-event", f"unknown event type {kind!r}; served: {SERVED}")

    # -- audio in ------------------------------------------------------------------------------

    def _start_audio(self, fmt: AudioStart | AudioChunk) -> None:
        self._audio = None
        self._discard_audio = True  # until the format is known to be good
        if self._listener is None:  # audio without a request is a transcription, as in ASR servers
            self._listener = AsrRequest(self.ctx.engines, "zh")
        audio = AudioIn(fmt.rate, fmt.width, fmt.channels, self.limits.max_audio_s)
        self._audio = audio
        self._discard_audio = False
        if isinstance(self._listener, AsrRequest):
            self._listener.begin(audio)

    async def _audio_chunk(self, chunk: AudioChunk) -> None:
        if self._discard_audio or self._refused:
            return
        if self._audio is None:
            self._start_audio(chunk)
            if isinstance(self._listener, WakeStream):
                await self._listener.begin(self._audio)  # type: ignore[arg-type]
        assert self._audio is not None
        if not self._audio.same_format(chunk.rate, chunk.width, chunk.channels):
            self._discard_audio = True
            raise RkvoiceError(
                "wyoming", "bad-audio-format",
                f"audio-chunk format {chunk.rate} Hz/{chunk.width} B/{chunk.channels} ch differs from the stream's "
                f"{self._audio.rate} Hz/{self._audio.width} B/{self._audio.channels} ch; the stream is dropped",
            )
        if isinstance(self._listener, WakeStream):
            await self._listener.feed(chunk.audio, self.write_event)
        elif isinstance(self._listener, AsrRequest):
            await self._listener.feed(chunk.audio)

    async def _audio_stop(self) -> None:
        listener, audio, discarded = self._listener, self._audio, self._discard_audio or self._refused
        self._listener, self._audio, self._discard_audio, self._refused = None, None, False, False
        if listener is None or discarded:
            return
        if audio is None:
            raise RkvoiceError("wyoming", "no-audio", "audio-stop came before any audio; send audio-start and chunks")
        await listener.end(self.write_event)

    def _asr_language(self, request: Transcribe) -> str:
        """The language the transcript is labelled with: the request's own code (any region or
        script variant of a served language), else the engine's first."""
        from .info import asr_languages

        served = asr_languages(self.ctx.engines.asr)
        if not request.language:
            return served[0]
        if primary(request.language) not in served:
            raise RkvoiceError("wyoming", "unknown-language",
                               f"transcription in {request.language!r} is not served; languages: {', '.join(served)} "
                               "(with any region or script, e.g. zh-CN)")
        return request.language

    def _wake_stream(self, request: Detect) -> WakeStream:
        if request.names and self.ctx.wake_name not in request.names:
            raise RkvoiceError("wyoming", "unknown-wake-word",
                               f"wake word(s) {', '.join(request.names)} not served; the wake word is "
                               f"{self.ctx.wake_name} ({self.ctx.cfg.hear.wake_phrase})")
        if self._wake is None:
            self._wake = WakeStream(self.ctx.engines, self.ctx.wake_name, self.ctx.wake_slots)
        return self._wake

    def _select(self, name: str) -> None:
        info = self.ctx.info
        names = [p.name for p in (*info.asr, *info.tts, *info.wake, *info.handle)]
        if name not in names:
            raise RkvoiceError("wyoming", "unknown-program", f"unknown program {name!r}; programs: {', '.join(names)}")

    # -- speech out ----------------------------------------------------------------------------

    async def _open_voice(self, voice: Any, text: str) -> tuple[SpeechOut, Any]:
        voices = self.ctx.voices
        name = voices.choose(getattr(voice, "name", None), getattr(voice, "language", None), text)
        engine = await asyncio.to_thread(voices.engine, name)
        sid = voices.sid(engine, getattr(voice, "speaker", None))
        return SpeechOut(self.ctx.engines, engine, sid, self.ctx.cfg.tts.speed, self.write_event), engine

    async def _synthesize(self, request: Synthesize) -> None:
        if len(request.text) > self.limits.max_text_chars:
            raise RkvoiceError("wyoming", "text-too-long",
                               f"the text has {len(request.text)} characters; at most {self.limits.max_text_chars} "
                               "are synthesised at once (wyoming.max_text_chars)")
        out, engine = await self._open_voice(request.voice, request.text)
        for piece in cut(self.ctx.cfg, engine, request.text):
            await out.piece(piece)
        await out.finish()

    async def _speech_start(self, request: SynthesizeStart) -> None:
        if self._speech is not None:
            raise RkvoiceError("wyoming", "already-streaming",
                               "synthesize-start during a streamed synthesis; send synthesize-stop first")
        voice = request.voice
        if voice is not None and (voice.name or voice.language):  # named: checked (and loaded) now
            opened = await self._open_voice(voice, "")

            async def open_voice(text: str) -> tuple[SpeechOut, Any]:
                return opened
        else:  # none named: the first text decides

            async def open_voice(text: str) -> tuple[SpeechOut, Any]:
                return await self._open_voice(voice, text)

        self._speech = _SpeechStream(self.ctx, open_voice, QUIET_S)

    def _speech_chunk(self, text: str) -> None:
        speech = self._speech
        if speech is None:
            raise RkvoiceError("wyoming", "not-streaming", "synthesize-chunk without synthesize-start")
        if speech.task.done():  # the synthesis failed: its error is reported at synthesize-stop
            return
        speech.chars += len(text)
        if speech.chars > self.limits.max_text_chars:
            speech.task.cancel()
            self._speech = None
            raise RkvoiceError("wyoming", "text-too-long",
                               f"the streamed text passed {self.limits.max_text_chars} characters "
                               "(wyoming.max_text_chars); the synthesis is dropped")
        speech.feed(text)

    async def _speech_stop(self) -> None:
        speech, self._speech = self._speech, None
        if speech is None:
            raise RkvoiceError("wyoming", "not-streaming", "synthesize-stop without synthesize-start")
        await speech.stop()
        await self.write_event(SynthesizeStopped().event())
