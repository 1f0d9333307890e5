"""Wyoming server addresses: ``tcp://HOST:PORT`` or ``unix:///path`` (checked when the config loads)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlparse

from rkvoice.errors import RkvoiceError, Stage


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
        if self.scheme == "unix" or self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve to anything
            return False


def parse_uri(uri: str) -> Endpoint:
    """tcp://HOST:PORT or unix:///path -> Endpoint; anything else is an RkvoiceError showing the forms."""
    forms = "use e.g. tcp://0.0.0.0:10300 or unix:///run/rkvoice/wyoming.sock"
    parsed = urlparse(uri)
    if parsed.scheme == "unix":
        path = parsed.path or parsed.netloc
        if not path:
            raise RkvoiceError(Stage.WYOMING, "bad-uri", f"wyoming uri {uri!r} names no socket path; {forms}")
        return Endpoint("unix", path=path)
    if parsed.scheme == "tcp":
        try:
            port = parsed.port
        except ValueError:
            port = None
        if not parsed.hostname or port is None:
            raise RkvoiceError(Stage.WYOMING, "bad-uri", f"wyoming uri {uri!r} needs a host and a port; {forms}")
        return Endpoint("tcp", host=parsed.hostname, port=port)
    raise RkvoiceError(Stage.WYOMING, "bad-uri", f"wyoming uri {uri!r}: only tcp:// and unix:// are served; {forms}")
