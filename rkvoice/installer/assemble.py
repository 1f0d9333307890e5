"""Assembly steps: turn fetched sources into a model directory.

Ops (models/manifest.yaml): ``extract``/``copy`` one member or file, ``untar``, ``concat``, ``convert``
(a script in a throw-away venv), ``prepare`` (a script run by this interpreter), ``rknn``
(rkvoice.installer.rknn). Every output is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from pooch import file_hash

from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.installer.context import Context, atomic, run_tail
from rkvoice.installer.manifest import Part, Step
from rkvoice.installer.rknn import run_rknn_step

log = logging.getLogger(__name__)

CHUNK = 1 << 20


def _fail(ctx: Context, step: Step, msg: str) -> RkvoiceError:
    what = step.to or step.script or step.module
    return RkvoiceError(Stage.MODELS, Code.STEP_FAILED, f"{ctx.model.id}: {step.op} -> {what}: {msg}")


@contextlib.contextmanager
def open_member(archive: Path, member: str | None) -> Iterator[IO[bytes]]:
    """Open ``member`` of a zip/wheel or tar archive (or the file itself when member is None)."""
    with contextlib.ExitStack() as stack:
        try:
            if member is None:
                f: IO[bytes] | None = open(archive, "rb")
            elif zipfile.is_zipfile(archive):
                f = stack.enter_context(zipfile.ZipFile(archive)).open(member)
            else:
                f = stack.enter_context(tarfile.open(archive)).extractfile(member)
        except KeyError:
            raise KeyError(f"{member} is not in {archive.name}") from None
        if f is None:
            raise KeyError(f"{member} in {archive.name} is not a regular file")
        with f:
            yield f


def _extract(ctx: Context, step: Step) -> None:
    """extract / copy: one member (or the fetched file itself); concat: the parts in order, into one file."""
    target = ctx.path(step.to)
    with atomic(target) as out:
        for i, part in enumerate(step.parts or (Part(step.source, step.member or None),), 1):
            archive = ctx.fetched[part.source]
            which = f"part {i}: " if step.parts else ""
            try:
                with open_member(archive, part.member) as src:
                    shutil.copyfileobj(src, out, CHUNK)
            except KeyError as exc:
                raise _fail(ctx, step, f"{which}{exc.args[0]}") from None
            except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
                raise _fail(ctx, step, f"{which}cannot read {archive.name}: {exc}") from None
    if step.sha256 is not None and (actual := file_hash(target)) != step.sha256:
        target.unlink()
        raise _fail(ctx, step, f"sha256 mismatch of {step.member}: expected {step.sha256}, got {actual}")


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
                with f, atomic(out_path) as out:
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
    rc, tail = run_tail(cmd, 4, ctx.root)
    if rc:
        raise _fail(ctx, step, f"{step.script} exited {rc}: {tail}")


def _convert(ctx: Context, step: Step) -> None:
    log.info("  creating a throw-away venv with %s", " ".join(step.venv))
    with ctx.venv(ctx.python, Code.STEP_FAILED) as vpy:
        ctx.pip_install(vpy, step.venv, " ".join(step.venv), Code.STEP_FAILED)
        for args in step.runs:
            _run(ctx, step, vpy, args)


_OPS = {"extract": _extract, "copy": _extract, "concat": _extract, "untar": _untar, "convert": _convert,
        "prepare": lambda ctx, step: _run(ctx, step, ctx.python, step.args), "rknn": run_rknn_step}
"""Op -> its step; the manifest reader rejects any other op."""


def run_step(ctx: Context, step: Step) -> None:
    """Run one manifest step for ``ctx.model``."""
    ctx.work.mkdir(parents=True, exist_ok=True)
    ctx.dest.mkdir(parents=True, exist_ok=True)
    _OPS[step.op](ctx, step)
