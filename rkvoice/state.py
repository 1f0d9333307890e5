"""User state on disk (todos, reminders): one JSON file per kind, written durably by rkvoice.atomic
(a crash, even ``kill -9``, leaves the complete old or new state). A file that does not parse is
moved aside (``todos.json.corrupt-<time>``) with a warning, never silently emptied.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from rkvoice.atomic import write_atomic
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)


def resolve_state_dir(configured: str, root: Path) -> Path:
    """The configured directory, relative ones under the install dir ``root``. Empty: the default,
    ``$XDG_STATE_HOME/rkvoice``, else ``~/.local/state/rkvoice`` (systemd uses /var/lib/rkvoice)."""
    if not configured:
        return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "rkvoice"
    return root / Path(configured).expanduser()  # an absolute path stays as it is


class StateStore:
    """Reads and atomically writes named JSON documents under one directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise RkvoiceError(Stage.STATE, "bad-name", f"bad state file name {name!r}")
        return self.dir / f"{name}.json"

    def load(self, name: str, default: Any) -> Any:
        """The stored document, or ``default`` if there is none (or it was corrupt and moved aside)."""
        path = self.path(name)
        with self._lock:
            self._remove_stale_temps(path)
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                return default
            except OSError as exc:
                raise RkvoiceError(Stage.STATE, "unreadable", f"cannot read {path}: {exc.strerror}") from exc
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
                os.replace(path, aside)
                log.warning("state file %s is corrupt (%s); moved aside to %s, starting empty", path, exc, aside)
                return default

    def save(self, name: str, data: Any) -> None:
        """Atomically replace the document ``name`` with ``data``."""
        path = self.path(name)
        payload = json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True).encode("utf-8")
        with self._lock:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RkvoiceError(Stage.STATE, "unwritable", f"cannot create state directory {self.dir}: "
                                   f"{exc.strerror}; set state.dir in config.yaml") from exc
            write_atomic(path, payload, durable=True)

    def _remove_stale_temps(self, path: Path, age_s: float = 10.0) -> None:
        """Delete temp files left by a writer that died before its rename."""
        now = time.time()
        for tmp in self.dir.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > age_s:
                    tmp.unlink()
                    log.info("removed stale temp file %s", tmp)
