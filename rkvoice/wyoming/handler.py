"""One Wyoming connection: read events within limits (reading.py), dispatch them (audio in: listen.py,
speech out: synthesis.py, answers: answer.py; each request a turn: context.py), answer errors.

A malformed or oversized event, audio beyond ``max_audio_s``, or ``idle_timeout_s`` without an event
(in every state) gets an ``error`` event and the connection is closed; a request the server cannot
serve (an unknown event, voice or program, a bad audio format or field) gets an ``error`` and the
connection stays open; a fault of the server's own code while serving an event gets an ``error`` with
code ``internal`` (its traceback logged once) and the connection stays open too. Events are read by
a task of their own, so a client that leaves is noticed (and its turn cancelled) while its request is
worked on. Over ``max_clients`` a connection closes the
one idle longest; when none is idle, a first ``describe`` is still answered (Home Assistant gives it
one second), anything else is ``busy``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart
from wyoming.wake import Detect

from rkvoice.errors import Code, RkvoiceError, Stage

from .answer import answer
from .context import Context, Requests
from .listen import Listening
from .reading import LimitedReader, Refused, check_fields
from .synthesis import Synthesis

log = logging.getLogger(__name__)

INBOX_EVENTS = 64
"""Events read ahead of the one being handled (back-pressure on a client that sends faster)."""
OVER_LIMIT_WAIT_S = 2.0
"""How long a connection over max_clients may take to send its describe."""
EVICT_IDLE_S = 1.0
"""A connection waiting this long with no request in progress is closed ("evicted") when a new one
arrives over max_clients: held idle sockets cannot keep Home Assistant's requests out."""
LINGER_S = 1.0
"""After an error that ends the connection: how long what the client still sends is read and dropped.
Closed with unread input, a socket sends a reset, which can destroy the error before the client
reads it (an oversized line: tests/test_wyoming); half-closed first, the client reads the error, then
the end of the stream."""


class BadEvent(Exception):
    """An event whose data does not make its request (a missing or ill-typed field)."""


@dataclass(frozen=True)
class Route:
    """How one event type is served: ``parse`` reads the client's event into the request (what it
    raises is the client's fault: ``bad-event``), ``serve`` serves it (what it raises beyond an
    RkvoiceError is the server's: ``internal``)."""

    parse: Callable[[Event], Any]
    serve: Callable[[Any], object]

    def read(self, event: Event) -> Any:
        try:
            return self.parse(event)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BadEvent(f"event {event.type!r} has missing or bad fields ({type(exc).__name__}: {exc})") from exc


def _no_data(event: Event) -> None:
    """An event served without reading its data (still checked by check_fields)."""


class WyomingHandler(AsyncEventHandler):
    def __init__(self, ctx: Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.ctx = ctx
        self.limits = ctx.wcfg
        self._reader = LimitedReader(reader, ctx.wcfg.max_event_bytes)
        self._inbox: asyncio.Queue[Event | BaseException | None] = asyncio.Queue(INBOX_EVENTS)
        self._gone = asyncio.Event()
        """Set when the client has left (end of stream or a broken connection)."""
        self.peer = str(writer.get_extra_info("peername") or "unix socket")
        self.requests = Requests(self.peer, ctx.clock)
        host = writer.get_extra_info("peername")
        self.listening = Listening(ctx, self.requests, self.write_event,
                                   str(host[0]) if isinstance(host, tuple) and host else self.peer)
        self.synthesis = Synthesis(ctx, self.requests, self.write_event)
        self._routes: dict[str, Route] = {
            "audio-chunk": Route(AudioChunk.from_event, self.listening.chunk),
            "audio-start": Route(AudioStart.from_event, self.listening.start),
            "audio-stop": Route(_no_data, lambda _: self.listening.stop()),
            "describe": Route(_no_data, lambda _: self.write_event(self.ctx.info.event())),
            "transcribe": Route(Transcribe.from_event, self.listening.request),
            "detect": Route(Detect.from_event, self.listening.request),
            "transcript": Route(lambda e: Transcript.from_event(e).text, self._answer),
            "synthesize": Route(Synthesize.from_event, self.synthesis.synthesize),
            "synthesize-start": Route(SynthesizeStart.from_event, self.synthesis.start),
            "synthesize-chunk": Route(lambda e: SynthesizeChunk.from_event(e).text, self.synthesis.chunk),
            "synthesize-stop": Route(_no_data, lambda _: self.synthesis.stop()),
            "select-program": Route(lambda e: SelectProgram.from_event(e).name, self._select),
            "ping": Route(lambda e: Pong(text=Ping.from_event(e).text).event(), self.write_event),
        }

    async def run(self) -> None:
        """Read and handle events until the peer leaves, breaks a limit or stays idle too long."""
        self.ctx.clients += 1
        reading = asyncio.create_task(self._read_events(), name="wyoming reader")
        refused = False
        try:
            if self.ctx.clients > self.limits.max_clients and not self.ctx.evict_oldest_idle(EVICT_IDLE_S):
                await self._over_limit()
                return
            while True:
                event = await self._next_event()
                if event is None or not await self._handle_unless_gone(event):
                    break
        except Refused as exc:  # an idle client is ordinary; a broken limit is worth a warning
            log.log(logging.INFO if exc.code == "idle" else logging.WARNING, "wyoming %s: %s", self.peer, exc.message)
            self.requests.cancel(exc.code)  # a streamed synthesis in progress ends with its connection
            await self._try_send(Error(text=exc.message, code=exc.code).event())
            refused = True
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("wyoming %s left mid-stream (%s)", self.peer, type(exc).__name__)
        except Exception as exc:  # a fault of this server: this connection ends, the others go on
            log.exception("wyoming %s: request failed", self.peer)
            await self._try_send(Error(text=f"the server failed on this request: {exc}", code="internal").event())
            refused = True
        finally:
            self.ctx.clients -= 1
            self.ctx.idle_since.pop(self, None)
            reading.cancel()
            await self.disconnect()
            if refused:
                await self._linger(reading)
            self.writer.close()

    async def _linger(self, reading: asyncio.Task[None]) -> None:
        """Half-close, then drop what the client still sends until it closes or ``LINGER_S`` pass
        (once the cancelled ``reading`` task has let go of the stream)."""
        await asyncio.gather(reading, return_exceptions=True)
        with suppress(Exception):
            if self.writer.can_write_eof():
                self.writer.write_eof()
            async with asyncio.timeout(LINGER_S):
                while await self.reader.read(1 << 16):
                    pass

    async def _read_events(self) -> None:
        """Events into the inbox until the end of the stream (None), a broken connection or a broken
        limit (the exception, raised when the handler reaches it)."""
        try:
            while True:
                event = await self._reader.event()
                if event is not None:
                    self.listening.tape(event)
                await self._inbox.put(event)
                if event is None:
                    self._gone.set()
                    return
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            self._gone.set()
            await self._inbox.put(exc)
        except Exception as exc:  # a broken limit (Refused) or a fault of this server: raised where handled
            await self._inbox.put(exc)

    def evict(self) -> None:
        """Make way for a new connection: this idle one gets an ``evicted`` error and is closed."""
        with suppress(asyncio.QueueFull):
            self._inbox.put_nowait(Refused("evicted", f"closed to make way for a new connection: this one was "
                                                      f"idle and the server serves {self.limits.max_clients} at "
                                                      "most (wyoming.max_clients)"))

    async def _next_event(self) -> Event | None:
        """The next event from the inbox; ``Refused("idle")`` when none comes within the idle limit."""
        if self.listening.listener is None and self.synthesis.stream is None:  # nothing in progress: may be evicted
            self.ctx.idle_since[self] = asyncio.get_running_loop().time()
        try:
            item = await asyncio.wait_for(self._inbox.get(), self.limits.idle_timeout_s)
        except TimeoutError:
            what = " inside a streamed synthesis" if self.synthesis.stream is not None else ""
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
        self.requests.cancel("client gone")  # the turn's handle stops its engines' work
        work.cancel()
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
        with suppress(ConnectionError, RuntimeError):
            await self.write_event(event)

    async def disconnect(self) -> None:
        self.requests.cancel("client gone")
        self.synthesis.close(self.peer)
        self.listening.close()

    async def handle_event(self, event: Event) -> bool:
        """Read ``event`` into its request and serve it. What the client got wrong (an unknown event, a
        missing or ill-typed field, a request the server refuses) is an ``error`` with its code; a fault
        of this server's own code is an ``error`` with code ``internal``, logged with its traceback,
        and the connection goes on. False: the connection ends (audio beyond max_audio_s)."""
        try:
            check_fields(str(event.type), event.data)
            route = self._routes.get(event.type)
            if route is None:
                raise RkvoiceError(Stage.WYOMING, "unknown-event",
                                   f"unknown event type {event.type!r}; served: {', '.join(self._routes)}")
            request = route.read(event)
            if inspect.isawaitable(done := route.serve(request)):
                await done
        except RkvoiceError as exc:
            log.info("wyoming %s: %s", self.peer, exc)
            await self.write_event(Error(text=exc.message, code=exc.code).event())
            return exc.code != Code.AUDIO_TOO_LONG
        except BadEvent as exc:
            await self.write_event(Error(text=str(exc), code="bad-event").event())
        except Exception as exc:  # a fault of this server, not of the client's event
            log.exception("wyoming %s: serving %s failed", self.peer, event.type)
            await self.write_event(Error(text=f"the server failed on this {event.type}: {type(exc).__name__}: {exc}",
                                         code="internal").event())
        return True

    async def _answer(self, text: str) -> None:
        with self.requests.turn("answer", text) as turn:
            await answer(self.ctx.engines, turn, self.write_event, self.limits.max_text_chars)

    def _select(self, name: str) -> None:
        info = self.ctx.info
        names = [p.name for p in (*info.asr, *info.tts, *info.wake, *info.handle)]
        if name not in names:
            raise RkvoiceError(Stage.WYOMING, "unknown-program", f"unknown program {name!r}; programs: {', '.join(names)}")
