"""Reading config YAML into the frozen section dataclasses.

The YAML tree is walked against the dataclass fields, so an unknown key or a value of the wrong
type is an error naming its path (``tts.threads: expected int, got 'two' (allowed: 1 to 64)``);
the sections then check their own declared ranges (``rkvoice.config_fields``).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from rkvoice.config_fields import allowed, type_name
from rkvoice.errors import RkvoiceError


def _type_error(path: str, tp: Any, value: Any, rule: str) -> RkvoiceError:
    tail = f" (allowed: {rule})" if rule else ""
    return RkvoiceError("config", "bad-type", f"{path}: expected {type_name(tp)}, got {value!r}{tail}")


def _convert(value: Any, tp: Any, path: str, rule: str = "") -> Any:
    """Check (and lightly coerce) one YAML value against a dataclass field type."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RkvoiceError("config", "bad-type", f"{path}: expected a mapping, got {value!r}")
        return build(tp, value, path)
    if origin is Literal:
        if isinstance(value, str) and value in typing.get_args(tp):
            return value
        raise _type_error(path, tp, value, rule)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path)
            except RkvoiceError:
                continue
        raise _type_error(path, tp, value, rule)
    if origin in (list, tuple):
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise RkvoiceError("config", "bad-type", f"{path}: expected a list, got {value!r}")
        items = [_convert(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    elif isinstance(value, tp):
        return value
    raise _type_error(path, tp, value, rule)


def build(cls: Any, data: dict[str, Any], path: str = "") -> Any:
    """Make dataclass ``cls`` from a YAML mapping; unknown keys and wrong types are refused by path."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in fields:
            raise RkvoiceError(
                "config",
                "unknown-key",
                f"unknown config key {key_path!r}; known keys here: {', '.join(sorted(fields))}",
            )
        kwargs[key] = _convert(value, hints[key], key_path, allowed(hints[key], fields[key].metadata))
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
    """SafeLoader without YAML 1.1's underscore digit groups and sexagesimal numbers.

    Plain YAML reads ``0_1`` (an NPU core mask) as the integer 1 and ``22:05`` as 1325;
    here both stay strings, so a str field gets what the user wrote.
    """


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
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RkvoiceError("config", "unreadable", f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = yaml_load(text)
    except yaml.YAMLError as exc:
        raise RkvoiceError("config", "bad-yaml", f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RkvoiceError("config", "bad-yaml", f"{path} must hold a mapping at the top level")
    return data
