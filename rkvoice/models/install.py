"""Install one profile's models: skip what verifies, fetch, assemble, verify, clean up.

Idempotent by construction: a model whose files all verify is not touched (no network, no
conversion), so a second run costs only the hashing. A model that fails to verify after its
steps is an error naming the file and what is wrong with it.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

from rkvoice.errors import RkvoiceError
from rkvoice.models.assemble import Context, run_step
from rkvoice.models.download import sha256_file
from rkvoice.models.fetch import fetch
from rkvoice.models.manifest import Manifest, Model
from rkvoice.models.verify import applies_here, verify_model

log = logging.getLogger(__name__)


def _unverified(model: Model) -> list[str]:
    return [s.name for s in model.sources if s.sha256 is None and s.kind != "local"]


def install_model(
    model: Model,
    root: Path,
    *,
    allow_unverified: bool = False,
    keep_downloads: bool = False,
    python: str = sys.executable,
) -> bool:
    """Install one model; returns True if anything was done, False if it already verified."""
    if not verify_model(model, root):
        log.info("%s: ok (already installed, nothing to do)", model.id)
        return False
    bad = _unverified(model)
    if bad and not allow_unverified:
        notes = "; ".join(f"{n}: {model.source(n).note}" for n in bad)
        raise RkvoiceError(
            "models", "no-sha256",
            f"{model.id}: source(s) {', '.join(bad)} have no published sha256 ({notes}); "
            "refusing to install unverified files. Rerun with --allow-unverified to accept them on trust",
        )
    cache = root / ".cache" / "models" / "downloads"
    fetched: dict[str, Path] = {}
    total = sum(s.size or 0 for s in model.sources)
    log.info("%s: fetching %d source(s)%s", model.id, len(model.sources),
             f", {total / 1e6:.0f} MB" if total else "")
    done = 0
    for i, source in enumerate(model.sources, 1):
        fetched[source.name] = fetch(source, cache)
        done += source.size or 0
        if len(model.sources) > 2 and total:
            log.info("  %d/%d sources, %.0f of %.0f MB", i, len(model.sources), done / 1e6, total / 1e6)
        if source.sha256 is None:
            log.warning("%s: %s has no published sha256; accepted on trust, sha256 is %s",
                        model.id, source.filename, sha256_file(fetched[source.name]))
    ctx = Context(root, model, fetched, python=python)
    for i, step in enumerate(model.steps, 1):
        log.info("%s: step %d/%d %s %s", model.id, i, len(model.steps), step.op, step.to or step.script or step.module)
        run_step(ctx, step)
    problems = verify_model(model, root)
    if problems:
        raise RkvoiceError(
            "models", "verify-failed",
            f"{model.id}: assembled but does not verify: " + "; ".join(str(p) for p in problems),
        )
    shutil.rmtree(ctx.work, ignore_errors=True)
    if not keep_downloads:
        for source in model.sources:
            if source.kind != "local":  # the user's own artefacts stay where they put them
                fetched[source.name].unlink(missing_ok=True)
    log.info("%s: installed and verified", model.id)
    return True


def install_profile(
    manifest: Manifest,
    root: Path,
    profile: str,
    *,
    only: list[str] | None = None,
    allow_unverified: bool = False,
    keep_downloads: bool = False,
) -> list[str]:
    """Install every model of ``profile`` (or just ``only``); returns the ids that changed."""
    models = manifest.profile(profile)
    if only:
        unknown = sorted(set(only) - {m.id for m in models})
        if unknown:
            raise RkvoiceError(
                "models", "unknown-model",
                f"no {profile} model(s) {', '.join(unknown)}; choose from: {', '.join(m.id for m in models)}",
            )
        models = [m for m in models if m.id in only]
    changed = []
    for n, model in enumerate(models, 1):
        if not applies_here(model):
            log.info("[%d/%d] %s: skipped (only installed on %s)", n, len(models), model.id, model.platform)
            continue
        log.info("[%d/%d] %s (%s, %s)", n, len(models), model.id, model.stage, model.engine)
        if install_model(model, root, allow_unverified=allow_unverified, keep_downloads=keep_downloads):
            changed.append(model.id)
    return changed
