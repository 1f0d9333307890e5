"""Atomic file replacement: readers see the old file or the new one, never half of one.

The payload goes to a temporary file ``.<name>.<random>.tmp`` in the target's directory and is
``os.replace``d over the target. ``durable=True`` also fsyncs the file before the rename and the
directory after it, so a crash or power cut keeps either the complete old or the complete new file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)  # read, then put back
FILE_MODE = 0o666 & ~_UMASK
"""The mode a plain ``open()`` gives a new file: mkstemp creates 0600 files, the finished file gets this."""


def write_atomic(path: Path, payload: bytes, durable: bool = False, mode: int | None = None) -> None:
    """Replace ``path`` with ``payload`` atomically (the temp file is removed on any failure); ``mode``: the
    file's permissions (a secret: 0o600) instead of what a plain ``open()`` gives."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, FILE_MODE if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:  # make the rename itself durable (best effort: not every filesystem allows it)
        with contextlib.suppress(OSError):
            dfd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
