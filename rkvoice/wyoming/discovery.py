"""Announcing the server on the local network as ``_wyoming._tcp`` (mDNS, the ``zeroconf`` package),
so Home Assistant discovers it (the ESPHome device announces ``_esphomelib._tcp`` the same way, with its
own TXT fields). Announcing is best effort: any failure is a warning, never fatal."""

from __future__ import annotations

import logging
import socket
from typing import Any

log = logging.getLogger(__name__)

SERVICE = "_wyoming._tcp.local."
MDNS_GROUP = "224.0.0.251"


def local_address() -> str:
    """The address this machine uses towards the mDNS group (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((MDNS_GROUP, 5353))
        return str(sock.getsockname()[0])


class Announcer:
    """``start()`` registers the service, ``stop()`` withdraws it; both only log on failure."""

    def __init__(self, name: str, host: str, port: int, service: str = SERVICE,
                 properties: dict[str, str] | None = None, server: str | None = None) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.service = service
        self.properties = properties or {"software": "rkvoice"}
        self.server = server
        """The host name announced (e.g. ``rkvoice.local.``); None: the service's own name."""
        self._zc: Any = None
        self._info: Any = None

    async def start(self) -> bool:
        try:
            from zeroconf import IPVersion
            from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

            address = self.host if self.host not in ("0.0.0.0", "::", "") else local_address()
            self._info = AsyncServiceInfo(
                self.service, f"{self.name}.{self.service}", addresses=[socket.inet_aton(address)], port=self.port,
                properties=self.properties, server=self.server,
            )
            self._zc = AsyncZeroconf(ip_version=IPVersion.V4Only)
            await self._zc.async_register_service(self._info)
        except Exception as exc:  # no network, no multicast, a name clash: the server serves anyway
            log.warning("zeroconf: could not announce %s on port %d (%s); add the server in Home Assistant "
                        "by host and port instead", self.service, self.port, exc)
            await self.stop()
            return False
        log.info("zeroconf: announced %s as %s at %s:%d", self.service, self.name, address, self.port)
        return True

    async def stop(self) -> None:
        zc, info, self._zc, self._info = self._zc, self._info, None, None
        if zc is None:
            return
        try:
            if info is not None:
                await zc.async_unregister_service(info)
            await zc.async_close()
        except Exception as exc:
            log.warning("zeroconf: withdrawing the announcement failed: %s", exc)
