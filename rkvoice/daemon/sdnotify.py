"""systemd's sd_notify protocol, spoken directly over the $NOTIFY_SOCKET datagram socket.

One datagram of ``KEY=VALUE`` lines to the AF_UNIX socket (a path, or an abstract ``@name``); no
libsystemd needed. Without $NOTIFY_SOCKET every call is a no-op, so the daemon runs the same in a terminal.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)


def _address(name: str) -> str | bytes:
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    if name.startswith("/"):
        return name
    raise RkvoiceError(Stage.DAEMON, "bad-notify-socket", f"NOTIFY_SOCKET={name!r} is neither an absolute path nor an "
                       "abstract '@name'; unset it or point it at the service manager's socket")


class Notifier:
    """Sends notifications (``notify(READY=1, STATUS="listening")``) to the service manager."""

    def __init__(self, socket_name: str | None = None, watchdog_usec: str | None = None) -> None:
        name = os.environ.get("NOTIFY_SOCKET") if socket_name is None else socket_name
        self._addr = _address(name) if name else None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._failing = False
        usec = _parse_usec(os.environ.get("WATCHDOG_USEC") if watchdog_usec is None else watchdog_usec)
        self.watchdog_interval = usec / 2 / 1_000_000 if usec else None
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None without a watchdog."""

    def notify(self, **fields: object) -> bool:
        """Send one datagram; False without a socket, or (logging the first of a run of failures) when
        it is gone or full: the daemon keeps running, systemd restarts it if it really stopped."""
        if self._addr is None:
            return False
        # one field per line: a newline inside STATUS would start a bogus field
        payload = "\n".join(f"{k}={v}".replace("\n", " ") for k, v in fields.items()).encode()
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                # never block: a full receive queue must not stall the daemon's main thread
                self._sock.sendto(payload, socket.MSG_DONTWAIT, self._addr)
            except OSError as exc:
                if not self._failing:
                    log.warning("sd_notify %s failed: %s", ",".join(fields), exc)
                self._failing = True
                return False
            self._failing = False
        log.debug("sd_notify %s", payload.decode().replace("\n", " "))
        return True

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _parse_usec(raw: str | None) -> int | None:
    if not raw:
        return None
    try:
        usec = int(raw)
    except ValueError:
        raise RkvoiceError(
            Stage.DAEMON, "bad-watchdog", f"WATCHDOG_USEC={raw!r} is not a number of microseconds"
        ) from None
    if os.environ.get("WATCHDOG_PID") not in (None, "", str(os.getpid())):
        # the watchdog is meant for another process (e.g. our parent): don't ping it
        return None
    return usec if usec > 0 else None
