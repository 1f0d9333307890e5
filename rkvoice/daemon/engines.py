"""The resident engines: built and loaded once, reloaded on SIGHUP only where the config changed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage

from .stages import StageSpec

log = logging.getLogger(__name__)


class StageSet:
    """Holds one loaded engine per StageSpec, with the config key it was loaded for."""

    def __init__(self, specs: tuple[StageSpec, ...], on_progress: Callable[[str], None] | None = None):
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise RkvoiceError(Stage.DAEMON, "bad-plan", f"stage names must be unique, got {names}")
        self.specs = specs
        self.engines: dict[str, Any] = {}
        self._keys: dict[str, Any] = {}
        self._progress = on_progress or (lambda _msg: None)

    def _load(self, spec: StageSpec, cfg: Config) -> Any:
        self._progress(f"loading {spec.name}")
        t0 = time.monotonic()
        engine = spec.build(cfg)
        engine.load()
        log.info("loaded %s (%s) in %.2f s", spec.name, type(engine).__name__, time.monotonic() - t0)
        return engine

    def load_all(self, cfg: Config) -> None:
        for spec in self.specs:
            self.engines[spec.name] = self._load(spec, cfg)
            self._keys[spec.name] = spec.key(cfg)

    def reload(self, old_cfg: Config, new_cfg: Config) -> list[str]:
        """Reload the engines whose config key changed; returns their names.

        The old engine is closed before the new one loads (the board has no RAM for two
        LLMs). If the new one fails to load, the old config is loaded back and the error
        re-raised; if even that fails, the error is fatal to the process.
        """
        changed = [s for s in self.specs if s.key(new_cfg) != self._keys.get(s.name)]
        for spec in changed:
            _close(spec.name, self.engines.pop(spec.name, None))
            try:
                self.engines[spec.name] = self._load(spec, new_cfg)
            except Exception as exc:
                log.error("reloading %s failed (%s); restoring the previous config", spec.name, exc)
                try:
                    self.engines[spec.name] = self._load(spec, old_cfg)
                except Exception as again:
                    log.critical("restoring %s failed too: %s", spec.name, again)
                raise
            self._keys[spec.name] = spec.key(new_cfg)
        return [s.name for s in changed]

    def close_all(self) -> None:
        for spec in reversed(self.specs):
            _close(spec.name, self.engines.pop(spec.name, None))


def _close(name: str, engine: Any) -> None:
    try:
        getattr(engine, "close", lambda: None)()  # None (never loaded) has no close either
    except Exception as exc:
        log.error("closing %s failed: %s", name, exc)
