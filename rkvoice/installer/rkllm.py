"""``--rkllm FILE_OR_URL [--rkllm-sha256 HEX]``: the user's converted RKLLM model, brought into the models
directory and checked, or refused with one line while the rest of the install goes on.

The file is copied (or downloaded into the download cache, resumable) to a temporary name beside its
destination, checked there (the sha256 when one is given, the size and the first bytes, and on a board
with librkllmrt the runtime's own ``rkllm_init`` in a child process, so a crash cannot take the
installer down) and only then renamed over the destination: the models directory never holds half a
model, and a refused file leaves the one installed before untouched.

What the first bytes can tell: Rockchip documents no .rkllm layout; its runtime refuses a bad file with
"invalid rknn llm model magic" (airockchip/rknn-llm issue #129). A public reverse-engineering note on
rkllm-toolkit 1.3.x files reads them as a GGUF v3 directory whose magic and strings are XOR-masked, so
such a file starts with the masked "GGUF" (``RKLLM_MAGIC``) and a version. That was not confirmed for
1.2.x files, so an unrecognised header is accepted (the runtime's load check decides on the board);
what is refused is a file too small to be a language model or one whose first bytes are certainly
another format (a GGUF for llama.cpp, an .rknn, an archive, a web page...).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pooch import file_hash

from rkvoice.board import versions
from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.installer.context import DOWNLOADS
from rkvoice.installer.fetch import download
from rkvoice.installer.manifest import Model

log = logging.getLogger(__name__)

MIN_BYTES = 16 << 20
"""Smaller than any language model rkllm-toolkit converts (Qwen2.5-0.5B at w4a16 is several hundred MB):
a smaller file is a truncated copy, a checksum list or an error page."""
RKLLM_MAGIC = bytes(a ^ b for a, b in zip(b"GGUF", bytes.fromhex("9da9e670"), strict=True))
"""The masked "GGUF" the 1.3.x files start with (see the module note): da ee b3 36."""
NOT_RKLLM = (
    (b"GGUF", "a GGUF model (llama.cpp), not one converted by rkllm-toolkit"),
    (b"RKNN", "an .rknn model (rknn-toolkit2), not an .rkllm"),
    (b"PK\x03\x04", "a zip archive (a PyTorch checkpoint or a packed folder?)"),
    (b"\x1f\x8b", "a gzip archive: unpack it first"),
    (b"\x7fELF", "a program or library"),
    (b"<", "a web page or XML (a download page instead of the file?)"),
    (b"{", "JSON text"),
)
_HEX = re.compile(r"^[0-9a-f]{64}$")
LOAD_TIMEOUT_S = 600.0

LoadCheck = Callable[[Path], tuple[bool, str]]
"""``check(path) -> (passed, what was done)``; not passed: the text says why."""


@dataclass(frozen=True)
class RkllmSource:
    """Where the user's model is (a path or an http(s) URL) and the sha256 it must have, if given."""

    where: str
    sha256: str | None = None

    @property
    def is_url(self) -> bool:
        return self.where.startswith(("https://", "http://"))


@dataclass(frozen=True)
class Brought:
    """What was installed: from where, its size and sha256, and what the checks said."""

    dest: Path
    size: int
    sha256: str
    header: str
    load: str


def parse_sha256(value: str) -> str:
    """``--rkllm-sha256``: 64 hex digits (any case); anything else is an option error."""
    v = value.strip().lower()
    if not _HEX.match(v):
        raise RkvoiceError(Stage.MODELS, "bad-option", f"--rkllm-sha256 {value!r}: expected 64 hex digits "
                           "(sha256sum FILE prints them)")
    return v


def refusal(head: bytes, size: int, min_bytes: int = MIN_BYTES) -> str | None:
    """Why a file of ``size`` bytes starting with ``head`` is not an RKLLM model, or None."""
    if size < min_bytes:
        return f"only {size} bytes, too small for an RKLLM model (at least {min_bytes >> 20} MB)"
    if head[:4] == RKLLM_MAGIC:
        return None
    if len(head) >= 10 and head[8:10] == b'{"':
        return "a safetensors file (Hugging Face weights): convert it with models/convert_rkllm.py first"
    for magic, what in NOT_RKLLM:
        if head.startswith(magic):
            return what
    return None


def header_note(head: bytes) -> str:
    """What the first bytes say about a file ``refusal`` accepted."""
    if head[:4] == RKLLM_MAGIC and len(head) >= 8:
        return f"RKLLM header, container version {struct.unpack('<I', head[4:8])[0]}"
    return "header not recognised (layouts before rkllm-toolkit 1.3 are not known here); the runtime decides"


def _fail(code: str, message: str) -> RkvoiceError:
    return RkvoiceError(Stage.MODELS, code, message)


def _obtain(src: RkllmSource, root: Path) -> tuple[Path, bool]:
    """(the file to copy from, whether it is a download of ours to move rather than copy)."""
    if src.is_url:
        name = Path(urllib.parse.urlsplit(src.where).path).name or "model.rkllm"
        # checked once it is here (_check_file): a wrong sha256 is not fetched again and again
        return download(src.where, root / DOWNLOADS / name, retries=2), True
    path = Path(src.where).expanduser()
    if not path.is_file():
        raise _fail("local-missing", f"--rkllm {src.where}: no such file (give the path of the .rkllm "
                    "models/convert_rkllm.py wrote, or an https URL)")
    return path, False


def _check_file(path: Path, src: RkllmSource, min_bytes: int) -> tuple[int, str, str]:
    """(size, sha256, header note) of ``path``, or an RkvoiceError saying why it is refused."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(64)
    why = refusal(head, size, min_bytes)
    if why is not None:
        raise _fail("not-rkllm", f"--rkllm {src.where}: not an RKLLM model: {why}")
    actual = file_hash(str(path))
    if src.sha256 is not None and actual != src.sha256:
        raise _fail(Code.BAD_SHA256, f"--rkllm {src.where}: sha256 mismatch: expected {src.sha256}, got {actual} "
                    "(a damaged copy, or another file)")
    return size, actual, header_note(head)


def _place(origin: Path, tmp: Path, move: bool) -> None:
    """``origin`` to ``tmp`` (moved when it is our own download on the same filesystem), synced to disk."""
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if move:
        with contextlib.suppress(OSError):
            os.replace(origin, tmp)
            return
    with origin.open("rb") as src, tmp.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def runtime_load_check(path: Path, lib_paths: tuple[Path, ...] | None = None) -> tuple[bool, str]:
    """On a board with librkllmrt: ``rkllm_init`` on ``path`` in a child process, then freed."""
    lib = versions.first_existing(versions.LIBRKLLMRT_PATHS if lib_paths is None else lib_paths)
    if lib is None or platform.machine() != "aarch64":
        return True, "runtime load check skipped (no librkllmrt.so here; --check on the board loads nothing either)"
    version = versions.so_version(lib, "rkllm")
    abi = versions.rkllm_runtime_abi(version or "")
    if abi is None:
        return True, (f"runtime load check skipped: {lib} is version {version or 'unknown'}, which the binding "
                      f"does not drive (supported: {versions.RKLLM_RUNTIMES})")
    cmd = [sys.executable, "-m", "rkvoice.installer.rkllm", str(path), "--lib", str(lib), "--abi", abi]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S, check=False,
                              cwd=Path(__file__).resolve().parents[2])  # where the rkvoice package is
    except subprocess.TimeoutExpired:
        return False, f"librkllmrt {version} did not load it within {LOAD_TIMEOUT_S:.0f} s"
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:]) or f"exit {proc.returncode}"
        return False, f"librkllmrt {version} ({lib}) refused it: {tail}"
    return True, f"loaded by librkllmrt {version} (rkllm_init)"


def bring(model: Model, src: RkllmSource, root: Path, *, load_check: LoadCheck = runtime_load_check,
          keep_downloads: bool = False, min_bytes: int = MIN_BYTES) -> Brought:
    """Install ``src`` as ``model``'s file; an RkvoiceError (one line) leaves nothing new behind."""
    dest = root / model.dir / model.files[0].path
    tmp = dest.with_name(f".{dest.name}.incoming")
    origin, ours = _obtain(src, root)
    try:
        size, sha, header = _check_file(origin, src, min_bytes)
        _place(origin, tmp, move=ours and not keep_downloads)
        passed, load = load_check(tmp)
        if not passed:
            raise _fail("rkllm-load", f"--rkllm {src.where}: {load}; convert it with the rkllm-toolkit version of "
                        "the board's librkllmrt (models/convert_rkllm.py)")
        os.replace(tmp, dest)
    except RkvoiceError:
        if ours:
            origin.unlink(missing_ok=True)  # a refused download is not kept
        raise
    finally:
        tmp.unlink(missing_ok=True)
    if ours and not keep_downloads:
        origin.unlink(missing_ok=True)
    log.info("%s: installed %s from %s (%d bytes, sha256 %s; %s; %s)", model.id, dest.relative_to(root), src.where,
             size, sha, header, load)
    return Brought(dest, size, sha, header, load)


def main(argv: list[str] | None = None) -> int:
    """``python -m rkvoice.installer.rkllm MODEL --lib LIB --abi A``: rkllm_init on MODEL, then free it
    (the installer's load check, run in its own process)."""
    import argparse
    from dataclasses import replace

    from rkvoice.answer.llm.rkllm import RkllmEngine
    from rkvoice.config import Config

    ap = argparse.ArgumentParser(prog="python -m rkvoice.installer.rkllm")
    ap.add_argument("model", type=Path)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--abi", required=True)
    args = ap.parse_args(argv)
    base = Config()
    cfg = replace(base, llm=replace(base.llm, rkllm_lib=args.lib, rkllm_abi=args.abi, context=512))
    engine = RkllmEngine(cfg, model=args.model.resolve())
    try:
        engine.load()
    except RkvoiceError as err:
        print(err.message, file=sys.stderr)
        return 1
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
