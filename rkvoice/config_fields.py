"""Allowed values of config fields, declared next to each field and checked in one place.

A numeric field is declared with ``num(default, lo, hi, ...)`` and a field that takes one of a few
words with ``one_of(default, ...)``; both keep the rule in the dataclass field's metadata. Every
section derives from ``Section``, whose ``__post_init__`` checks each field against its rule and its
type, so a bad value is refused wherever a section is made: reading YAML, ``--set``, a reload, or
``dataclasses.replace`` in code. The error names the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rkvoice.errors import RkvoiceError


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Range:
    """Numbers from ``lo`` to ``hi`` (each end closed unless ``*_open``), plus single ``also`` values."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    also: tuple[tuple[float, str], ...] = ()
    """Values outside lo..hi that mean something of their own, with that meaning: ((0, "off"),)."""

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        if any(value == v for v, _ in self.also):
            return True
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below  # NaN is neither

    def describe(self) -> str:
        if self.lo_open or self.hi_open:
            lo = f"above {_fmt(self.lo)}" if self.lo_open else f"from {_fmt(self.lo)}"
            hi = f"below {_fmt(self.hi)}" if self.hi_open else f"up to {_fmt(self.hi)}"
            span = f"{lo}, {hi}"
        else:
            span = f"{_fmt(self.lo)} to {_fmt(self.hi)}"
        special = [f"{_fmt(v)} ({meaning})" for v, meaning in self.also]
        return " or ".join([*special, span])


def num(default: Any, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False,
        also: tuple[tuple[float, str], ...] = ()) -> Any:
    """A numeric dataclass field whose value must lie in ``Range(lo, hi, ...)``."""
    return dataclasses.field(default=default, metadata={"range": Range(lo, hi, lo_open, hi_open, also)})


def one_of(default: str, *others: str) -> Any:
    """A str dataclass field that takes ``default`` or one of ``others``."""
    return dataclasses.field(default=default, metadata={"choices": (default, *others)})


def _literals(tp: Any) -> tuple[Any, ...]:
    """The Literal words a field type admits (``int | Literal["auto"]`` -> ("auto",))."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(a for arg in typing.get_args(tp) for a in _literals(arg))
    return ()


def _numeric_kind(tp: Any) -> type | None:
    """int or float when the field holds a number (possibly besides Literal words), else None."""
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for kind in (int, float):
        if kind in args:
            return kind
    return None


def is_numeric(tp: Any) -> bool:
    return _numeric_kind(tp) is not None


def type_name(tp: Any) -> str:
    """``int``, ``float``, ``int or 'auto'`` -- how a field's type reads in an error."""
    if typing.get_origin(tp) is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp) if a is not type(None))
    return getattr(tp, "__name__", str(tp))


def allowed(tp: Any, metadata: typing.Mapping[str, Any]) -> str:
    """What a field accepts, in words ('' when only its type limits it)."""
    words = ", ".join(str(w) for w in _literals(tp))
    rng = metadata.get("range")
    if rng is not None:
        return " or ".join(p for p in (words, rng.describe()) if p)
    if "choices" in metadata:
        return "one of: " + ", ".join(metadata["choices"])
    return words


def check_value(path: str, value: Any, tp: Any, metadata: typing.Mapping[str, Any]) -> None:
    """Refuse ``value`` for the field at ``path`` unless its type and its declared rule accept it."""
    rule = allowed(tp, metadata)
    if value in _literals(tp) and isinstance(value, str):
        return
    kind = _numeric_kind(tp)
    if kind is not None:
        ok_type = isinstance(value, int if kind is int else (int, float)) and not isinstance(value, bool)
        if not ok_type:
            raise RkvoiceError("config", "bad-type", f"{path}: expected {type_name(tp)}, got {value!r}"
                               + (f" (allowed: {rule})" if rule else ""))
    rng = metadata.get("range")
    if rng is not None and value not in rng:
        raise RkvoiceError("config", "bad-value", f"{path}: {value!r} is out of range (allowed: {rule})")
    choices = metadata.get("choices")
    if choices is not None and value not in choices:
        raise RkvoiceError("config", "bad-value", f"{path}: {value!r} is not allowed; choose {rule}")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


class Section:
    """Base of the config sections: every field is checked against its declared rule when made."""

    PATH: ClassVar[str] = ""
    """Where the section sits in the config tree ("tts.matcha"); names the keys in errors."""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check_value(f"{self.PATH}.{f.name}", getattr(self, f.name), hints[f.name], f.metadata)
