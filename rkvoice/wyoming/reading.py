"""Reading a connection's events within limits: oversized sections and malformed events are refused."""

from __future__ import annotations

import asyncio

from wyoming.event import Event, async_read_event


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

    async def event(self) -> Event | None:
        """The next event; None at the end of the stream; ``Refused`` for a malformed one."""
        try:
            event = await async_read_event(self)  # type: ignore[arg-type]
        except (AttributeError, KeyError, TypeError, RecursionError) as exc:
            raise Refused("malformed", f"malformed event header ({type(exc).__name__})") from exc
        if event is None and not self.eof:
            raise Refused("malformed", "malformed event: not one line of JSON with a type, or a line over 64 KiB")
        return event
