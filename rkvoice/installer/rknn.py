"""NPU files built at install time: the toolkit version, sidecars, PC drop-ins, the conversion.

rknn-toolkit2, rknn-toolkit-lite2 and the board's librknnrt.so must be one version (another toolkit's
.rknn may load and compute garbage), read from the board's librknnrt.so or ``--toolkit-version``; each
``X.rknn`` has a sidecar ``X.json`` naming the toolkit that built it. The ``rknn`` step takes finished
files from the download cache when they are all there, else installs ``<toolkit>==<version>``
``--no-deps`` (its declared deps pull torch with CUDA, 5.6 GB) and the lean ``deps`` in a throw-away venv.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rkvoice.board import runtimes, versions
from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.installer.context import DOWNLOADS, Context, Toolkit, atomic

if TYPE_CHECKING:
    from rkvoice.installer.manifest import Model, Step

log = logging.getLogger(__name__)

_VERSION = re.compile(r"^\d+\.\d+\.\d+(?:[a-z]+\d*)?$")


def resolve_toolkit(override: str | None = None, lib_paths: tuple[Path, ...] | None = None) -> Toolkit:
    """The board runtime's version, or ``override`` (a PC build); both given and different is refused."""
    if override is not None and not _VERSION.match(override):
        raise RkvoiceError(Stage.MODELS, "bad-option", f"--toolkit-version {override!r}: expected a version like 2.3.2")
    path, found = versions.librknnrt_version(lib_paths)
    if override and found and override != found:
        return Toolkit(None, "", RkvoiceError(Stage.MODELS, Code.TOOLKIT_MISMATCH, f"--toolkit-version {override} but this "
                                              f"board's librknnrt ({path}) is {found}; they must be equal: "
                                              "drop --toolkit-version to build with the board's version"))
    if override:
        return Toolkit(override, "--toolkit-version")
    if path is not None and found is None:
        return Toolkit(None, "", RkvoiceError(Stage.MODELS, Code.TOOLKIT_UNREADABLE, f"cannot read the version string from "
                                              f"{path} (strings {path} | grep 'librknnrt version'); "
                                              "pass --toolkit-version V with the version it reports"))
    if found:
        return Toolkit(found, f"librknnrt {path}")
    return Toolkit(None)


def rknn_problem(rknn: Path, expected: str | None) -> tuple[str, str] | None:
    """(kind, detail) when the present file ``rknn`` cannot be used with toolkit ``expected``; None when it
    can. kind: missing (sidecar) | corrupt | mismatch; with ``expected`` unknown only the file and its
    sidecar are checked."""
    if rknn.stat().st_size == 0:
        return "corrupt", f"{rknn.name} is empty"
    try:
        built = runtimes.sidecar_version(rknn.with_suffix(".json"))
    except RkvoiceError as err:
        return ("missing" if err.code == Code.NO_SIDECAR else "corrupt"), err.message
    stamp = runtimes.rknn_build_version(rknn)  # what rknn-toolkit2 stamps into the .rknn itself, if anything
    if stamp and stamp != built:
        return "corrupt", f"{rknn.name} says rknn-toolkit2 {stamp} but its sidecar says {built}"
    if expected and built != expected:
        return "mismatch", f"{rknn.name} was built by rknn-toolkit2 {built} but the runtime is {expected}"
    return None


def rknn_files(model: Model) -> list[str]:
    """The model's .rknn files (relative to its dir), the ones an ``rknn`` step makes."""
    return [f.path for f in model.files if f.check == "rknn"]


def drop_ins_present(model: Model, root: Path) -> bool:
    """Is a complete set of the model's .rknn files (with sidecars) waiting in the download cache?"""
    cache = root / DOWNLOADS
    names = [Path(p).name for p in rknn_files(model)]
    return bool(names) and all((cache / n).is_file() and (cache / n).with_suffix(".json").is_file() for n in names)


def install_drop_ins(ctx: Context, toolkit: Toolkit) -> bool:
    """Copy finished files from the download cache into the model dir; False if they are not all there.
    A set whose sidecars name another toolkit than the runtime's, or mixed versions, is refused."""
    cache = ctx.root / DOWNLOADS
    names = [Path(p).name for p in rknn_files(ctx.model)]
    present = [cache / n for n in names if (cache / n).is_file()]
    if not present:
        return False
    if len(present) < len(names):
        absent = sorted(set(names) - {p.name for p in present})
        log.warning("%s: %s has only part of the set (missing %s); converting instead",
                    ctx.model.id, cache, ", ".join(absent))
        return False
    built: set[str] = set()
    for p in present:
        problem = rknn_problem(p, toolkit.version)
        if problem and problem[0] == "mismatch":
            raise RkvoiceError(Stage.MODELS, Code.TOOLKIT_MISMATCH, f"{problem[1]} ({toolkit.origin}); refusing the files "
                               f"in {cache}: rebuild them with --toolkit-version {toolkit.version}, or delete them "
                               "to convert here")
        if problem:
            raise RkvoiceError(Stage.MODELS, Code.BAD_DROP_IN, f"{p}: {problem[1]}")
        built.add(runtimes.sidecar_version(p.with_suffix(".json")))
    if len(built) > 1:
        raise RkvoiceError(Stage.MODELS, Code.TOOLKIT_MISMATCH,
                           f"the files in {cache} were built by different toolkits ({', '.join(sorted(built))})")
    if toolkit.version is None:
        (made_by,) = built
        log.warning("%s: taking files built by rknn-toolkit2 %s; the board's librknnrt and "
                    "rknn-toolkit-lite2 must be %s too", ctx.model.id, made_by, made_by)
    for rel, p in zip(rknn_files(ctx.model), present, strict=True):
        target = ctx.dest / rel
        for suffix in (".rknn", ".json", ".onnx"):
            src, dst = p.with_suffix(suffix), target.with_suffix(suffix)
            if src.is_file():
                with open(src, "rb") as f, atomic(dst) as out:
                    shutil.copyfileobj(f, out)
    log.info("%s: installed %d file set(s) built elsewhere from %s (no conversion)", ctx.model.id, len(present), cache)
    return True


def _run_converter(ctx: Context, vpy: str, script: Path, args: list[str]) -> None:
    """Run one converter command, log its output as it comes, check and log its JSON report lines."""
    cmd = [vpy, str(script), *args]
    log.info("  running %s %s", script.name, " ".join(args))
    reports: list[dict[str, Any]] = []
    tail: list[str] = []
    with subprocess.Popen(cmd, cwd=ctx.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            with contextlib.suppress(ValueError):  # a report line is a JSON object naming its model
                if isinstance(report := json.loads(line), dict) and "model" in report:
                    reports.append(report)
                    continue
            tail = (tail + [line.strip()])[-4:]
            log.debug("    %s", line)
        rc = proc.wait()
    what = f"{script.name} {args[0] if args else ''}".strip()
    if rc != 0:
        raise RkvoiceError(Stage.MODELS, Code.CONVERT_FAILED,
                           f"{ctx.model.id}: {what} exited {rc}: {' | '.join(t for t in tail if t)}")
    want = sum(a in ("--tokens", "--frames") for a in args)  # one JSON line per bucket
    if not reports or (want and len(reports) != want):
        raise RkvoiceError(Stage.MODELS, Code.CONVERT_FAILED,
                           f"{ctx.model.id}: {what} printed {len(reports)} JSON report line(s), "
                           f"expected {want or 'some'}")
    for r in reports:
        if r.get("true_frames_ok") is False:
            raise RkvoiceError(Stage.MODELS, Code.CONVERT_FAILED, f"{ctx.model.id}: {what}: true_frames_ok is false in {r}")
        log.info("  %s %s: SNR vs original %s dB, simulator %s dB, build %s s, peak %s MB", r.get("model"),
                 r.get("tokens", r.get("frames")), r.get("snr_vs_original_db"), r.get("snr_db"),
                 r.get("build_s"), r.get("peak_rss_mb"))


def convert(ctx: Context, step: Step) -> None:
    """Build the NPU files in a throw-away venv with ``step.toolkit==<the runtime's toolkit version>``."""
    version = ctx.toolkit.version
    assert version is not None
    script = ctx.root / step.script
    if not script.is_file():
        raise RkvoiceError(Stage.MODELS, Code.STEP_FAILED, f"{ctx.model.id}: converter {script} is missing from the checkout")
    base = ctx.toolkit_python or ctx.python
    log.info("  creating a throw-away venv (%s) with %s==%s", base, step.toolkit, version)
    with ctx.venv(base, Code.TOOLKIT_INSTALL_FAILED) as vpy:
        pin = f"{step.toolkit}=={version}"
        ctx.pip_install(vpy, ["--no-deps", "--only-binary=:all:", pin], pin, Code.TOOLKIT_INSTALL_FAILED)
        if step.deps:
            ctx.pip_install(vpy, step.deps, "the toolkit's dependencies", Code.TOOLKIT_INSTALL_FAILED)
        for args in step.runs:
            _run_converter(ctx, vpy, script, [ctx.fmt(a) for a in args])


def run_rknn_step(ctx: Context, step: Step) -> None:
    """Drop-ins if complete, else a conversion with the runtime's toolkit version."""
    toolkit = ctx.toolkit
    if toolkit.error is not None:
        raise toolkit.error
    if install_drop_ins(ctx, toolkit):
        return
    if toolkit.version is None:
        raise RkvoiceError(
            Stage.MODELS, Code.NO_TOOLKIT_VERSION,
            f"{ctx.model.id}: no librknnrt.so here to take the rknn-toolkit2 version from; run the install "
            "on the board, or pass --toolkit-version V (the board's librknnrt version) to build on a PC",
        )
    convert(ctx, step)
