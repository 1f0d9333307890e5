"""HTTP downloads that survive bad networks: resume, retry, checksum, atomic rename.

``download(url, dest, sha256=..., size=...)`` writes into ``dest.part``, resumes an existing
``.part`` with an HTTP Range request, retries transient failures (connection errors, 5xx,
truncated bodies) with a growing pause, checks the sha256 and only then renames the file into
place. A checksum mismatch deletes the ``.part`` (it cannot be trusted to resume from) and the
final file never appears. Errors name the URL and, for checksums, the expected and actual values.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
USER_AGENT = "rkvoice-installer/1"


def sha256_file(path: str | Path, chunk: int = CHUNK) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


class Progress:
    """A one-line progress display on a text stream (stderr by default).

    On a terminal it redraws one line at most 4 times a second; elsewhere (logs, CI) it
    prints a line every 10 % so the log stays short.
    """

    def __init__(self, label: str, total: int | None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = clock()
        self.done = 0
        self._start_done = 0
        self._last = 0.0
        self._last_decile = -1

    def begin(self, already: int) -> None:
        self.done = already
        self._start_done = already

    def update(self, n: int) -> None:
        self.done += n
        now = self.clock()
        if self.tty:
            if now - self._last >= 0.25:
                self._last = now
                self.stream.write("\r" + self._line(now) + "\x1b[K")
                self.stream.flush()
        elif self.total:
            decile = int(10 * self.done / self.total)
            if decile != self._last_decile and decile < 10:
                self._last_decile = decile
                self.stream.write(self._line(now) + "\n")
                self.stream.flush()

    def finish(self) -> None:
        line = self._line(self.clock())
        self.stream.write(("\r" + line + "\x1b[K\n") if self.tty else line + "\n")
        self.stream.flush()

    def _line(self, now: float) -> str:
        rate = (self.done - self._start_done) / max(now - self.start, 1e-6)
        if self.total:
            pct = 100.0 * self.done / self.total
            return f"  {self.label}: {_mb(self.done)} / {_mb(self.total)} ({pct:.0f} %) {_mb(rate)}/s"
        return f"  {self.label}: {_mb(self.done)} {_mb(rate)}/s"


class _Retry(Exception):
    """A transient failure: try again (resuming if the .part kept some bytes)."""


def _fail(url: str, code: str, msg: str) -> RkvoiceError:
    return RkvoiceError("models", code, f"download {url}: {msg}")


def _fetch_once(url: str, part: Path, size: int | None, timeout: float,
                progress: Progress | None) -> None:
    """One HTTP attempt, appending to ``part``; raises _Retry for transient failures."""
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:
        log.info("%s: partial file is larger than expected; starting over", part.name)
        part.unlink()
        offset = 0
    if size is not None and offset == size:
        return
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if offset:
        req.add_header("Range", f"bytes={offset}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            # Range not satisfiable: the .part is already whole (or junk); the checksum decides.
            return
        if exc.code in (408, 429) or exc.code >= 500:
            raise _Retry(f"HTTP {exc.code} {exc.reason}") from None
        raise _fail(url, "http-error", f"HTTP {exc.code} {exc.reason}") from None
    except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Retry(f"cannot connect: {reason}") from None
    with resp:
        status = resp.status
        if offset and status == 200:
            log.info("%s: server ignored the Range request; starting over", part.name)
            offset = 0
        length = resp.headers.get("Content-Length")
        expected = int(length) if length is not None and length.isdigit() else None
        total = size if size is not None else (offset + expected if expected is not None else None)
        if progress is not None:
            progress.total = total
            progress.begin(offset)
        got = 0
        mode = "ab" if offset else "wb"
        try:
            with open(part, mode) as out:
                while True:
                    block = resp.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    got += len(block)
                    if progress is not None:
                        progress.update(len(block))
                out.flush()
                os.fsync(out.fileno())
        except (TimeoutError, http.client.IncompleteRead, ConnectionError) as exc:
            raise _Retry(f"connection broke after {got} bytes: {exc!r}") from None
    if expected is not None and got < expected:
        raise _Retry(f"truncated response: got {got} of {expected} bytes")
    if size is not None and part.stat().st_size < size:
        raise _Retry(f"short file: {part.stat().st_size} of {size} bytes")


def download(
    url: str,
    dest: str | Path,
    sha256: str | None = None,
    size: int | None = None,
    *,
    retries: int = 4,
    timeout: float = 60.0,
    backoff: float = 2.0,
    progress: bool | TextIO = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """Download ``url`` to ``dest`` (atomically) and return ``dest``.

    An existing ``dest`` whose sha256 (or, with no sha256 given, size) matches is kept as is.
    ``retries`` is the number of extra attempts after the first one for transient failures.
    """
    dest = Path(dest)
    if dest.exists() and _matches(dest, sha256, size):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    stream = progress if not isinstance(progress, bool) else sys.stderr
    bar = Progress(dest.name, size, stream) if progress is not False else None
    attempt = 0
    last = ""
    while True:
        try:
            _fetch_once(url, part, size, timeout, bar)
            break
        except _Retry as exc:
            last = str(exc)
            if attempt >= retries:
                kept = (f" (the partial file {part} is kept and a rerun resumes it)"
                        if part.exists() and part.stat().st_size else "")
                raise _fail(url, "download-failed", f"{last}; gave up after {attempt + 1} attempts{kept}") from None
            wait = backoff * (2 ** attempt)
            attempt += 1
            log.warning("download %s: %s; retry %d/%d in %.0f s", url, last, attempt, retries, wait)
            sleep(wait)
    if bar is not None:
        bar.finish()
    actual_size = part.stat().st_size
    if size is not None and actual_size != size:
        part.unlink()
        raise _fail(url, "bad-size", f"expected {size} bytes, got {actual_size}; the partial file was deleted")
    if sha256 is not None:
        actual = sha256_file(part)
        if actual != sha256:
            part.unlink()
            raise _fail(
                url, "bad-sha256",
                f"sha256 mismatch: expected {sha256}, got {actual}; the download was deleted "
                "(rerun to fetch it again; if it persists the file on the server changed)",
            )
    os.replace(part, dest)
    return dest


def _matches(path: Path, sha256: str | None, size: int | None) -> bool:
    if size is not None and path.stat().st_size != size:
        return False
    if sha256 is not None:
        return sha256_file(path) == sha256
    return size is not None
