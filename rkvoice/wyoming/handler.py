"""One Wyoming connection: read events within limits, dispatch them to the services, answer errors.

Events are framed and parsed by the ``wyoming`` package; the reader it reads from refuses a data
or payload section above ``max_event_bytes`` before reading it. A malformed event (bad JSON, a
header that is not an event, a line over the stream limit), an oversized section, audio beyond
``max_audio_s`` or ``idle_timeout_s`` without an event gets an ``error`` event and the connection is
closed; a request the server cannot serve (an unknown event, an unknown voice, a bad audio format)
gets an ``error`` event and the connection stays open. Nothing here touches another connection.
"""

from __future__ import annotations

import asyncio
import logging
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

from rkvoice.config import WyomingConfig
from rkvoice.errors import RkvoiceError

from .audio import AudioIn
from .gate import Engines
from .services import AsrRequest, WakeStream, answer
from .tts import SpeechOut, Voices, chunker, cut

log = logging.getLogger(__name__)

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


class _SpeechStream:
    """A streamed synthesis: text cut by the StreamChunker, pieces synthesised by a task in order."""

    def __init__(self, ctx: Context, out: SpeechOut, engine: Any) -> None:
        self.out = out
        self.chunker = chunker(ctx.cfg, engine)
        self.chars = 0
        self.pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(), name="wyoming synthesis")

    async def _run(self) -> None:
        while (piece := await self.pieces.get()) is not None:
            await self.out.piece(piece)
        await self.out.finish()

    def feed(self, text: str) -> None:
        for piece in self.chunker.feed(text):
            self.pieces.put_nowait(piece)

    async def stop(self) -> None:
        for piece in self.chunker.flush():
            self.pieces.put_nowait(piece)
        self.pieces.put_nowait(None)
        await self.task


class WyomingHandler(AsyncEventHandler):
    def __init__(self, ctx: Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.ctx = ctx
        self.limits = ctx.wcfg
        self._reader = LimitedReader(reader, ctx.wcfg.max_event_bytes)
        self._listener: AsrRequest | WakeStream | None = None
        self._wake: WakeStream | None = None
        self._audio: AudioIn | None = None
        self._discard_audio = False
        self._speech: _SpeechStream | None = None
        self.peer = str(writer.get_extra_info("peername") or "unix socket")

    async def run(self) -> None:
        """Read and handle events until the peer leaves, breaks a limit or stays idle too long."""
        self.ctx.clients += 1
        try:
            if self.ctx.clients > self.limits.max_clients:
                raise Refused("busy", f"the server already serves {self.limits.max_clients} connections "
                                      "(wyoming.max_clients); try again later")
            while True:
                event = await self._next_event()
                if event is None or not await self.handle_event(event):
                    break
        except Refused as exc:
            log.warning("wyoming %s: %s", self.peer, exc.message)
            await self._try_send(Error(text=exc.message, code=exc.code).event())
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("wyoming %s left mid-stream (%s)", self.peer, type(exc).__name__)
        except Exception as exc:  # a fault of this server: this connection ends, the others go on
            log.exception("wyoming %s: request failed", self.peer)
            await self._try_send(Error(text=f"the server failed on this request: {exc}", code="internal").event())
        finally:
            self.ctx.clients -= 1
            await self.disconnect()
            self.writer.close()

    async def _next_event(self) -> Event | None:
        read = asyncio.ensure_future(async_read_event(self._reader))  # type: ignore[arg-type]
        try:
            while True:
                done, _ = await asyncio.wait({read}, timeout=self.limits.idle_timeout_s)
                if done:
                    break
                if self._speech is None:  # a streamed synthesis in progress is not idle
                    raise Refused("idle", f"no event for {self.limits.idle_timeout_s:g} s "
                                          "(wyoming.idle_timeout_s); closing the connection")
            try:
                event = read.result()
            except (AttributeError, KeyError, TypeError) as exc:
                raise Refused("malformed", f"malformed event header ({type(exc).__name__}: {exc})") from exc
        finally:
            if not read.done():
                read.cancel()
        if event is None and not self._reader.eof:
            raise Refused("malformed", "malformed event: not one line of JSON with a type, or a line over 64 KiB")
        return event

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
            await self._dispatch(event)
        except RkvoiceError as exc:
            log.info("wyoming %s: %s", self.peer, exc)
            await self.write_event(Error(text=exc.message, code=exc.code).event())
            return exc.code != "audio-too-long"
        except (KeyError, TypeError, ValueError) as exc:
            message = f"event {event.type!r} has missing or bad fields ({type(exc).__name__}: {exc})"
            await self.write_event(Error(text=message, code="bad-event").event())
        return True

    async def _dispatch(self, event: Event) -> None:
        kind = event.type
        if AudioChunk.is_type(kind):
            await self._audio_chunk(AudioChunk.from_event(event))
        elif AudioStart.is_type(kind):
            self._start_audio(AudioStart.from_event(event))
            if isinstance(self._listener, WakeStream):
                await self._listener.begin(self._audio)  # type: ignore[arg-type]
        elif AudioStop.is_type(kind):
            await self._audio_stop()
        elif Describe.is_type(kind):
            await self.write_event(self.ctx.info.event())
        elif Transcribe.is_type(kind):
            self._listener = AsrRequest(self.ctx.engines, self._asr_language(Transcribe.from_event(event)))
        elif Detect.is_type(kind):
            self._listener = self._wake_stream(Detect.from_event(event))
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
        if self._discard_audio:
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
        listener, audio, discarded = self._listener, self._audio, self._discard_audio
        self._listener, self._audio, self._discard_audio = None, None, False
        if listener is None or discarded:
            return
        if audio is None:
            raise RkvoiceError("wyoming", "no-audio", "audio-stop came before any audio; send audio-start and chunks")
        await listener.end(self.write_event)

    def _asr_language(self, request: Transcribe) -> str:
        from .info import asr_languages

        served = asr_languages(self.ctx.engines.asr)
        lang = (request.language or served[0]).split("-")[0].split("_")[0]
        if lang not in served:
            raise RkvoiceError("wyoming", "unknown-language",
                               f"transcription in {request.language!r} is not served; languages: {', '.join(served)}")
        return lang

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
        out, engine = await self._open_voice(request.voice, "")
        self._speech = _SpeechStream(self.ctx, out, engine)

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
