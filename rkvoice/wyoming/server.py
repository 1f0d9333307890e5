"""Serving rkvoice over the Wyoming protocol: ``serve_wyoming(cfg, uri)`` blocks until ``stop`` is set.

The engines are loaded once and shared by every connection (``Engines``, rkvoice/wyoming/engines.py; rkvoice/gate.py keeps the
local turn's priority). The protocol has no authentication: a TCP address other than loopback is
served, with a warning, because exposing the server is the user's choice.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from wyoming.server import AsyncServer, AsyncTcpServer, AsyncUnixServer

from rkvoice.answer.llm.registry import engine_name
from rkvoice.config import Config
from rkvoice.config_ha import WyomingConfig
from rkvoice.endpoint import Endpoint, parse_uri
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.stages import StageSet, serving_stages

from .context import Context
from .discovery import Announcer
from .engines import Engines
from .handler import WyomingHandler
from .info import build_info
from .tts import Voices

log = logging.getLogger(__name__)


class WyomingServer:
    """The listening server; ``start()`` binds, ``stop()`` closes it and every connection."""

    def __init__(self, cfg: Config, wcfg: WyomingConfig, engines: Engines) -> None:
        if not wcfg.uri:
            raise RkvoiceError(Stage.WYOMING, "no-uri", "no Wyoming address given; set wyoming.uri or pass "
                                                    "--wyoming tcp://0.0.0.0:10300")
        self.wcfg = wcfg
        self.endpoint: Endpoint = parse_uri(wcfg.uri)
        voices = Voices(cfg, engines)
        self.context = Context(cfg, wcfg, engines, voices, build_info(cfg, engines.asr, voices, engine_name(cfg)))
        self._server: AsyncServer | None = None
        self._announcer: Announcer | None = None
        self.port = self.endpoint.port

    async def start(self) -> None:
        ep = self.endpoint
        if ep.scheme == "unix":
            Path(ep.path).parent.mkdir(parents=True, exist_ok=True)
            server: AsyncServer = AsyncUnixServer(ep.path)
        else:
            if not ep.loopback:
                log.warning("wyoming: serving on %s:%d, reachable from other machines; the Wyoming protocol has "
                            "no authentication, so anyone who can reach this port can use the assistant",
                            ep.host, ep.port)
            server = AsyncTcpServer(ep.host, ep.port)
        try:
            await server.start(functools.partial(WyomingHandler, self.context))
        except OSError as exc:
            raise RkvoiceError(Stage.WYOMING, "bind-failed",
                               f"cannot serve on {self.wcfg.uri}: {exc.strerror or exc}; pick a free port "
                               "or another socket path") from exc
        self._server = server
        if isinstance(server, AsyncTcpServer) and ep.port == 0:  # port 0: the system chose one
            inner = getattr(server, "_server", None)
            if inner is not None and inner.sockets:
                self.port = int(inner.sockets[0].getsockname()[1])
        log.info("wyoming: serving %s", f"unix://{ep.path}" if ep.scheme == "unix" else f"tcp://{ep.host}:{self.port}")
        if self.wcfg.zeroconf:
            if ep.scheme != "tcp":
                log.warning("zeroconf: a unix socket cannot be announced on the network; not announcing")
            else:
                if ep.loopback:
                    log.warning("zeroconf: %s is a loopback address; other machines cannot reach it", ep.host)
                self._announcer = Announcer(f"rkvoice-{socket.gethostname()}", ep.host, self.port)
                await self._announcer.start()

    async def stop(self) -> None:
        if self._announcer is not None:
            await self._announcer.stop()
            self._announcer = None
        if self._server is not None:
            await self._server.stop()
            self._server = None


def from_cfg(cfg: Config, **overrides: Any) -> WyomingConfig:
    """The ``wyoming`` section of ``cfg``, then the ``overrides`` that are not None."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(cfg.wyoming, **given) if given else cfg.wyoming


def serve_wyoming(cfg: Config, uri: str = "", *, zeroconf: bool | None = None, engines: Engines | None = None,
                  stop: threading.Event | None = None, ready: Callable[[WyomingServer], None] | None = None) -> None:
    """Serve on ``uri`` (else ``wyoming.uri``) until ``stop`` is set (forever without one); ``ready(server)``
    runs once it listens; ``zeroconf`` overrides ``wyoming.zeroconf``. ``engines`` are the daemon's loaded
    engines; without them the server's own stages (rkvoice.stages.serving_stages) are loaded here, and
    closed at the end."""
    wcfg = from_cfg(cfg, uri=uri or None, zeroconf=zeroconf)
    own = StageSet(serving_stages(wcfg.time_zone)) if engines is None else None
    if own is not None:
        own.load_all(cfg)
        engines = Engines.of(cfg, own.stages)

    async def main(engines: Engines) -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        if stop is not None:
            threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(done.set)),
                             name="wyoming-stop", daemon=True).start()
        server = WyomingServer(cfg, wcfg, engines)
        await server.start()
        try:
            if ready is not None:
                ready(server)
            await done.wait()
        finally:
            await server.stop()

    assert engines is not None
    try:
        asyncio.run(main(engines))
    finally:
        if own is not None:
            engines.close()
            own.close_all()
