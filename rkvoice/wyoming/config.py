"""Settings of the Wyoming server: a frozen dataclass with defaults and a reader for ``cfg.wyoming``.

The main config may carry a ``wyoming`` section (uri, zeroconf, max_audio_s, idle_timeout_s,
max_event_bytes, max_text_chars); ``from_cfg`` reads it when present and falls back to the defaults
here when it is not. Every value is range-checked; a bad one is an RkvoiceError naming the key.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import urlparse

from rkvoice.errors import RkvoiceError

DEFAULT_PORT = 10700


@dataclass(frozen=True)
class WyomingConfig:
    uri: str = ""
    """tcp://HOST:PORT or unix:///path; empty = no server."""
    zeroconf: bool = False
    """Announce the TCP server as _wyoming._tcp on the local network (mDNS)."""
    max_audio_s: float = 60.0
    """Longest audio stream one request may send (transcribe or detect)."""
    idle_timeout_s: float = 30.0
    """A connection that sends nothing for this long is closed."""
    max_event_bytes: int = 1 << 20
    """Largest data or payload section of one event."""
    max_text_chars: int = 4000
    """Longest text of one synthesize (or one streamed synthesis in total) or one transcript to handle."""
    max_clients: int = 32
    """Connections served at once; more are answered with an error and closed."""
    max_wake_streams: int = 4
    """Detect streams served at once (each has its own wake engine); more wait for one to end."""

    def __post_init__(self) -> None:
        checks = [
            ("max_audio_s", 0 < self.max_audio_s <= 3600, "a number of seconds in (0, 3600]"),
            ("idle_timeout_s", 0 < self.idle_timeout_s <= 86400, "a number of seconds in (0, 86400]"),
            ("max_event_bytes", 1024 <= self.max_event_bytes <= 64 << 20, "bytes in [1024, 67108864]"),
            ("max_text_chars", 1 <= self.max_text_chars <= 100_000, "characters in [1, 100000]"),
            ("max_clients", 1 <= self.max_clients <= 1024, "a count in [1, 1024]"),
            ("max_wake_streams", 1 <= self.max_wake_streams <= 64, "a count in [1, 64]"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise RkvoiceError(
                    "wyoming", "bad-config", f"wyoming.{name}: {getattr(self, name)!r} is out of range; use {want}"
                )
        if self.uri:
            parse_uri(self.uri)


def from_cfg(cfg: Any, **overrides: Any) -> WyomingConfig:
    """The ``wyoming`` section of ``cfg`` (a WyomingConfig, a mapping or absent; or ``cfg`` itself when it
    is a WyomingConfig), then the ``overrides`` that are not None."""
    section = cfg if isinstance(cfg, WyomingConfig) else getattr(cfg, "wyoming", None)
    known = {f.name for f in fields(WyomingConfig)}
    if section is None:
        base = WyomingConfig()
    elif isinstance(section, WyomingConfig):
        base = section
    else:
        values = dict(section) if isinstance(section, dict) else {
            name: getattr(section, name) for name in known if hasattr(section, name)
        }
        unknown = sorted(set(values) - known)
        if unknown:
            raise RkvoiceError(
                "wyoming", "bad-config",
                f"unknown wyoming key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
            )
        base = WyomingConfig(**values)
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **given) if given else base


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    """"tcp" or "unix"."""
    host: str = ""
    port: int = 0
    path: str = ""

    @property
    def loopback(self) -> bool:
        """True for a unix socket or a TCP address only this machine can reach."""
        if self.scheme == "unix":
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve to anything
            return False


def parse_uri(uri: str) -> Endpoint:
    """tcp://HOST:PORT or unix:///path -> Endpoint; anything else is an RkvoiceError showing the forms."""
    forms = f"use tcp://127.0.0.1:{DEFAULT_PORT} or unix:///run/rkvoice/wyoming.sock"
    parsed = urlparse(uri)
    if parsed.scheme == "unix":
        path = parsed.path or parsed.netloc
        if not path:
            raise RkvoiceError("wyoming", "bad-uri", f"wyoming uri {uri!r} names no socket path; {forms}")
        return Endpoint("unix", path=path)
    if parsed.scheme == "tcp":
        try:
            port = parsed.port
        except ValueError:
            port = None
        if not parsed.hostname or port is None:
            raise RkvoiceError("wyoming", "bad-uri", f"wyoming uri {uri!r} needs a host and a port; {forms}")
        return Endpoint("tcp", host=parsed.hostname, port=port)
    raise RkvoiceError("wyoming", "bad-uri", f"wyoming uri {uri!r}: only tcp:// and unix:// are served; {forms}")
