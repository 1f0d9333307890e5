"""Single-instance lock: one resident assistant per machine (it owns the microphone and the NPU).
A non-blocking ``fcntl.flock``: the kernel drops it when the process dies, however it dies, so a
crash never leaves a stale lock. The file holds the owner's pid, for the error message only."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rkvoice.errors import Code, RkvoiceError, Stage

log = logging.getLogger(__name__)


@contextmanager
def instance_lock(path: Path) -> Iterator[None]:
    """Hold the lock on ``path`` inside the ``with``; RkvoiceError if another process holds it."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise RkvoiceError(Stage.DAEMON, "lock-unwritable", f"cannot open the instance lock {path}: "
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
                           f"holding {path}; stop it first (systemctl stop rkvoice) or use --text/--file for "
                           "one-shot runs") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        log.debug("instance lock %s held by pid %d", path, os.getpid())
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
