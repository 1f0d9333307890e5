"""Allowed values of config fields, checked in one place, and the reading of config YAML.

Fields declare their rule with ``num`` or ``one_of``; every section derives from ``Section``, whose
``__post_init__`` checks each field against its type and rule, so a bad value is refused wherever a
section is made (YAML, ``--set``, a reload, ``dataclasses.replace``), naming the key, the value and
what is allowed (``tts.threads: expected int, got 'two' (allowed: 1 to 64)``).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from rkvoice.errors import RkvoiceError, Stage

ROOT = Path(__file__).resolve().parent.parent
"""The install directory: relative paths in config files are under it."""


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


def _kinds(tp: Any) -> tuple[Any, ...]:
    """The members of a field type: ``int | Literal["auto"]`` -> (int, Literal["auto"])."""
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


def _words(tp: Any) -> tuple[Any, ...]:
    """The Literal words a field type admits (``int | Literal["auto"]`` -> ("auto",))."""
    return tuple(w for kind in _kinds(tp) if typing.get_origin(kind) is Literal for w in typing.get_args(kind))


def type_name(tp: Any) -> str:
    """``int``, ``float``, ``int or 'auto'`` -- how a field's type reads in an error."""
    return " or ".join([k.__name__ for k in _kinds(tp) if isinstance(k, type)] + [repr(w) for w in _words(tp)])


def allowed(tp: Any, metadata: typing.Mapping[str, Any]) -> str:
    """What a field accepts, in words ('' when only its type limits it)."""
    words = ", ".join(str(w) for w in _words(tp))
    rng = metadata.get("range")
    if rng is not None:
        return " or ".join(p for p in (words, rng.describe()) if p)
    if "choices" in metadata:
        return "one of: " + ", ".join(metadata["choices"])
    return words


_TAKES: dict[Any, tuple[type, ...]] = {float: (int, float), str: (str, int, float)}
"""What a field of these types also takes (as ``float(value)`` / ``str(value)``: YAML reads
``rkllm_abi: 1.2`` as a number). YAML's true/false is taken by bool fields only."""


def check_value(path: str, value: Any, tp: Any, metadata: typing.Mapping[str, Any]) -> Any:
    """``value`` as the field at ``path`` holds it; refused unless its type and its declared rule accept it."""
    if isinstance(value, str) and value in _words(tp):
        return value
    rule = allowed(tp, metadata)
    for kind in _kinds(tp):
        takes = _TAKES.get(kind, kind) if isinstance(kind, type) else ()  # a Literal takes only its words
        if isinstance(value, takes) and (kind is bool or not isinstance(value, bool)):
            value = kind(value) if kind in _TAKES else value
            break
    else:
        raise RkvoiceError(Stage.CONFIG, "bad-type", f"{path}: expected {type_name(tp)}, got {value!r}"
                           + (f" (allowed: {rule})" if rule else ""))
    rng = metadata.get("range")
    if rng is not None and value not in rng:
        raise RkvoiceError(Stage.CONFIG, "bad-value", f"{path}: {value!r} is out of range (allowed: {rule})")
    choices = metadata.get("choices")
    if choices is not None and value not in choices:
        raise RkvoiceError(Stage.CONFIG, "bad-value", f"{path}: {value!r} is not allowed; choose {rule}")
    return value


class Section:
    """Base of the config sections: every field is checked against its declared rule when made."""

    PATH: ClassVar[str] = ""
    """Where the section sits in the config tree ("tts.matcha"); names the keys in errors."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = check_value(f"{self.PATH}.{f.name}", getattr(self, f.name), hints[f.name], f.metadata)
            object.__setattr__(self, f.name, value)  # frozen; an int given to a float field is kept as a float


def build(cls: Any, data: dict[str, Any], path: str = "") -> Any:
    """Make dataclass ``cls`` from a YAML mapping; an unknown key is refused by path, and the
    sections check their values."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise RkvoiceError(Stage.CONFIG, "unknown-key",
                               f"unknown config key {key_path!r}; known keys here: {', '.join(sorted(names))}")
        if dataclasses.is_dataclass(hints[key]):
            if not isinstance(value, dict):
                raise RkvoiceError(Stage.CONFIG, "bad-type", f"{key_path}: expected a mapping, got {value!r}")
            value = build(hints[key], value, key_path)
        kwargs[key] = value
    return cls(**kwargs)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid over ``base``, mapping by mapping."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class _Loader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's underscore digit groups and sexagesimal numbers: plain YAML reads
    ``0_1`` (an NPU core mask) as 1 and ``22:05`` as 1325; here both stay the strings the user wrote."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*|0x[0-9a-fA-F]+|0o[0-7]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."),
)


def yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: Path) -> dict[str, Any]:
    """A config file's top-level mapping ({} for an empty file)."""
    try:
        data = yaml_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RkvoiceError(Stage.CONFIG, "unreadable", f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise RkvoiceError(Stage.CONFIG, "bad-yaml", f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict | None):
        raise RkvoiceError(Stage.CONFIG, "bad-yaml", f"{path} must hold a mapping at the top level")
    return data or {}
