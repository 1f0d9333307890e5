"""A small blocking client of Home Assistant's websocket API (``/api/websocket``), stdlib only.

Only what rkvoice asks HA over the websocket: ``--check``'s count of entities exposed to Assist and
the names the home route recognises commands by. RFC 6455 as HA's server speaks it: one HTTP/1.1
upgrade, masked client frames, text messages (possibly fragmented), pings answered, no extensions.
Every read has a deadline; a closed or malformed stream is a ``WsError`` naming what happened.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import os
import socket
import ssl
import struct
import time
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 64 << 20
"""Largest message read (HA's entity registry of a big home is a few MB)."""


class WsError(Exception):
    """The websocket could not be opened, was refused, closed, or sent something that is not HA's API."""


class HaSocket:
    """An authenticated connection to HA's websocket API; ``call`` sends a command and returns its result."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        self.timeout = timeout
        self._ids = itertools.count(1)
        self.sock, self._buf = _open(url, timeout)
        try:
            hello = self.receive()
            if hello.get("type") != "auth_required":
                raise WsError(f"{url} sent {hello.get('type')!r} instead of auth_required: not Home Assistant's API")
            self.ha_version = str(hello.get("ha_version", ""))
            self._send_json({"type": "auth", "access_token": token})
            answer = self.receive()
            if answer.get("type") != "auth_ok":
                raise WsError(f"Home Assistant refused the token ({answer.get('message') or answer.get('type')})")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> HaSocket:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def call(self, kind: str, **fields: Any) -> Any:
        """Send command ``kind`` with ``fields``; its ``result``, or WsError with HA's error message."""
        msg_id = next(self._ids)
        self._send_json({"id": msg_id, "type": kind, **fields})
        while True:
            msg = self.receive()
            if msg.get("id") != msg_id or msg.get("type") != "result":
                continue  # an event of a subscription, or an older command's answer
            if not msg.get("success"):
                error = msg.get("error") or {}
                raise WsError(f"{kind}: {error.get('code', 'error')}: {error.get('message', '')}".rstrip(": "))
            return msg.get("result")

    def receive(self) -> dict[str, Any]:
        """The next JSON message (a text message, fragments joined; pings answered on the way)."""
        deadline = time.monotonic() + self.timeout
        parts: list[bytes] = []
        while True:
            fin, opcode, payload = self._frame(deadline)
            if opcode == 0x9:  # ping
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                raise WsError(f"Home Assistant closed the websocket (code {code} {payload[2:].decode(errors='replace')})")
            if opcode in (0x1, 0x2, 0x0):
                parts.append(payload)
                if sum(map(len, parts)) > MAX_MESSAGE:
                    raise WsError(f"a websocket message over {MAX_MESSAGE} bytes")
                if fin:
                    break
                continue
            raise WsError(f"unexpected websocket opcode {opcode:#x}")
        try:
            data = json.loads(b"".join(parts))
        except ValueError as exc:
            raise WsError(f"the websocket sent something that is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise WsError(f"the websocket sent {type(data).__name__} instead of an object")
        return data

    def _send_json(self, data: dict[str, Any]) -> None:
        self._send_frame(0x1, json.dumps(data, ensure_ascii=False).encode())

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.settimeout(self.timeout)
        self.sock.sendall(head + mask + masked)

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WsError(f"no answer on the websocket within {self.timeout:g} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(max(65536, n - len(self._buf)))
            except TimeoutError as exc:
                raise WsError(f"no answer on the websocket within {self.timeout:g} s") from exc
            if not chunk:
                raise WsError("Home Assistant closed the websocket connection")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _frame(self, deadline: float) -> tuple[bool, int, bytes]:
        b0, b1 = self._read(2, deadline)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2, deadline))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8, deadline))[0]
        if n > MAX_MESSAGE:
            raise WsError(f"a websocket frame of {n} bytes")
        mask = self._read(4, deadline) if b1 & 0x80 else b""
        payload = self._read(n, deadline)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(b0 & 0x80), b0 & 0x0F, payload


def _open(url: str, timeout: float) -> tuple[socket.socket, bytes]:
    """TCP (or TLS) to ``url``'s host, upgraded to a websocket on /api/websocket."""
    parsed = urlparse(url)
    secure = parsed.scheme == "https"
    host = parsed.hostname or ""
    port = parsed.port or (443 if secure else 80)
    path = parsed.path.rstrip("/") + "/api/websocket"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise WsError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from exc
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET {path} HTTP/1.1\r\nHost: {parsed.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    try:
        if secure:
            try:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            except ssl.SSLError as exc:  # an OSError: closed below
                raise WsError(f"the TLS handshake with {host}:{port} failed ({exc.reason or exc}); check that "
                              "home_assistant.url's https matches Home Assistant's and that its certificate is "
                              "trusted here") from exc
        sock.sendall(request.encode())
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk or len(head) > 65536:
                raise WsError(f"{url} closed the connection during the websocket upgrade")
            head += chunk
    except OSError as exc:
        sock.close()
        raise WsError(f"{url} did not answer the websocket upgrade: {exc}") from exc
    except BaseException:
        sock.close()
        raise
    head, _, rest = head.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "?"
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    accept = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()  # noqa: S324 - the protocol's
    if status != "101" or headers.get("sec-websocket-accept") != accept:
        sock.close()
        raise WsError(f"{url}{path} answered HTTP {status} to the websocket upgrade: not Home Assistant's API")
    return sock, rest
