"""Reading a connection's events within limits, and checking the JSON types of the fields served.

Oversized sections and malformed events are refused. The ``wyoming`` package builds its dataclasses
from whatever JSON arrives (``"voice": "abc"`` becomes no voice), so a served field of the wrong type
is a ``bad-event`` error naming the field and the type it needs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from wyoming.event import Event, async_read_event

from rkvoice.errors import RkvoiceError, Stage


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


_AUDIO: dict[str, Any] = {"rate": int, "width": int, "channels": int, "timestamp": int}
_VOICE: dict[str, Any] = {"name": str, "language": str, "speaker": str}
FIELDS: dict[str, dict[str, Any]] = {
    "audio-start": _AUDIO,
    "audio-chunk": _AUDIO,
    "audio-stop": {"timestamp": int},
    "transcribe": {"name": str, "language": str, "context": dict},
    "transcript": {"text": str, "language": str, "context": dict},
    "synthesize": {"text": str, "voice": _VOICE, "text_format": str, "context": dict},
    "synthesize-start": {"voice": _VOICE, "text_format": str, "context": dict},
    "synthesize-chunk": {"text": str},
    "detect": {"names": [str], "context": dict},
    "select-program": {"name": str},
    "ping": {"text": str},
}
"""Event type -> the fields the server reads and their JSON type (null is always allowed: absent); an
object whose own fields are checked is given as their dict, a list whose items are as ``[item type]``."""
_JSON_NAME = {int: "an integer", str: "a string", dict: "an object", list: "a list"}


def _check(event_type: str, name: str, kind: Any, value: Any) -> None:
    """``value`` (not null) of field ``name`` against ``kind`` (a FIELDS entry)."""
    json_type = type(kind) if isinstance(kind, (dict, list)) else kind
    right = isinstance(value, json_type) and not (json_type is int and isinstance(value, bool))  # JSON true is no int
    if not right:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise RkvoiceError(Stage.WYOMING, "bad-event",
                           f"event {event_type!r}: field {name!r} must be {_JSON_NAME[json_type]}, got {shown}")
    for item in value if isinstance(kind, list) else ():
        _check(event_type, f"{name}[]", kind[0], item)
    for sub, sub_kind in kind.items() if isinstance(kind, dict) else ():
        if value.get(sub) is not None:
            _check(event_type, f"{name}.{sub}", sub_kind, value[sub])


def check_fields(event_type: str, data: Any) -> None:
    """Raise a ``bad-event`` RkvoiceError when ``data`` is not an object or a field it has for
    ``event_type`` is of the wrong JSON type."""
    if not isinstance(data, dict):
        raise RkvoiceError(Stage.WYOMING, "bad-event",
                           f"event {event_type!r}: its data must be a JSON object, got {type(data).__name__}")
    for name, kind in FIELDS.get(event_type, {}).items():
        if data.get(name) is not None:
            _check(event_type, name, kind, data[name])
