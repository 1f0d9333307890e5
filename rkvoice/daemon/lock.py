"""Single-instance lock: one resident assistant per machine (it owns the microphone and the NPU).

An exclusive, non-blocking ``fcntl.flock`` on a file in the state/run directory. The kernel
drops the lock when the process dies, however it dies, so a crash never leaves a stale lock.
The file holds the owner's pid, for the error message only.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from rkvoice.errors import Code, RkvoiceError, Stage

log = logging.getLogger(__name__)


class InstanceLock:
    """``with InstanceLock(path):`` or ``acquire()`` / ``release()``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise RkvoiceError(Stage.DAEMON, "lock-unwritable", f"cannot open the instance lock {self.path}: "
                               f"{exc.strerror}; set daemon.lock_file to a writable path (or run as the rkvoice "
                               "user)") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:  # the owner's pid, for the message only
                who = f" (pid {int(os.pread(fd, 32, 0))})"
            except (OSError, ValueError):
                who = ""
            os.close(fd)
            raise RkvoiceError(Stage.DAEMON, Code.ALREADY_RUNNING, f"another rkvoice daemon is already running{who}, "
                               f"holding {self.path}; stop it first (systemctl stop rkvoice) or use --text/--file for "
                               "one-shot runs") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        log.debug("instance lock %s held by pid %d", self.path, os.getpid())

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
