"""The JSON types of the fields the server reads, checked before an event is used.

The ``wyoming`` package builds its dataclasses from whatever JSON arrives (``"voice": "abc"`` becomes
no voice, ``"names": "abc"`` a string searched by substring), so each served event's data is
checked here first: a field of the wrong type is a ``bad-event`` error naming the field and the type
it needs, never a silently ignored value or a traceback. Fields not listed are not read.
"""

from __future__ import annotations

from typing import Any

from rkvoice.errors import RkvoiceError, Stage

_AUDIO: dict[str, type] = {"rate": int, "width": int, "channels": int, "timestamp": int}
_VOICE: dict[str, type] = {"name": str, "language": str, "speaker": str}
FIELDS: dict[str, dict[str, type]] = {
    "audio-start": _AUDIO,
    "audio-chunk": _AUDIO,
    "audio-stop": {"timestamp": int},
    "transcribe": {"name": str, "language": str, "context": dict},
    "transcript": {"text": str, "language": str, "context": dict},
    "synthesize": {"text": str, "voice": dict, "text_format": str, "context": dict},
    "synthesize-start": {"voice": dict, "text_format": str, "context": dict},
    "synthesize-chunk": {"text": str},
    "detect": {"names": list, "context": dict},
    "select-program": {"name": str},
    "ping": {"text": str},
}
"""Event type -> the fields the server reads and their JSON type (null is always allowed: absent)."""
ITEMS = {("detect", "names"): str}
"""List fields -> the type of their items."""
NESTED = {"voice": _VOICE}
"""Object fields -> the types of their own fields."""
_JSON_NAME = {int: "an integer", str: "a string", dict: "an object", list: "a list"}


def _is(value: Any, kind: type) -> bool:
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def _bad(event_type: str, name: str, kind: type, value: Any) -> RkvoiceError:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return RkvoiceError(Stage.WYOMING, "bad-event",
                        f"event {event_type!r}: field {name!r} must be {_JSON_NAME[kind]}, got {shown}")


def check_fields(event_type: str, data: Any) -> None:
    """Raise a ``bad-event`` RkvoiceError when ``data`` is not an object or a field it has for
    ``event_type`` is of the wrong JSON type."""
    if not isinstance(data, dict):
        raise RkvoiceError(Stage.WYOMING, "bad-event",
                           f"event {event_type!r}: its data must be a JSON object, got {type(data).__name__}")
    for name, kind in FIELDS.get(event_type, {}).items():
        value = data.get(name)
        if value is None:
            continue
        if not _is(value, kind):
            raise _bad(event_type, name, kind, value)
        item_kind = ITEMS.get((event_type, name))
        if item_kind is not None:
            for item in value:
                if not _is(item, item_kind):
                    raise _bad(event_type, f"{name}[]", item_kind, item)
        for sub, sub_kind in NESTED.get(name, {}).items():
            if value.get(sub) is not None and not _is(value[sub], sub_kind):
                raise _bad(event_type, f"{name}.{sub}", sub_kind, value[sub])
