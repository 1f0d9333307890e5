"""The home's names as stored on disk: the one format the home route writes (rkvoice.home.vocab
reads them from Home Assistant) and the ASR reads to hear them more readily (rkvoice.hear.whisper_asr),
so neither layer imports the other. ``home_names.json`` in the state directory, bounded: at most
``MAX_NAMES`` names of at most ``MAX_LEN`` characters.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CACHE_FILE = "home_names.json"
MAX_NAMES = 20000
MAX_LEN = 40
KINDS = ("entity", "alias", "area", "floor")
MAX_CACHE_BYTES = 16 << 20
"""Largest names file read (``MAX_NAMES`` names of ``MAX_LEN`` characters are under 4 MB)."""


@dataclass(frozen=True)
class Vocabulary:
    """One reading of HA's names: ``names[kind]`` as HA spells them, for kind in ``KINDS``."""

    names: dict[str, tuple[str, ...]]
    entities: int
    """Entities exposed to Assist."""
    fetched_at: float
    """Unix time of the reading."""
    url: str
    """The HA it was read from (a cache of another HA is not used)."""

    def all(self) -> list[str]:
        """Every name, each once, in kind order."""
        return list(dict.fromkeys(n for kind in KINDS for n in self.names.get(kind, ())))

    def count(self) -> int:
        return len(self.all())

    def when(self) -> str:
        return datetime.fromtimestamp(self.fetched_at).strftime("%Y-%m-%d %H:%M")

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "fetched_at": self.fetched_at, "entities": self.entities,
                "names": {k: list(self.names.get(k, ())) for k in KINDS}}

    @classmethod
    def from_json(cls, data: Any) -> Vocabulary:
        """A cache file's content; ValueError naming what is wrong."""
        if not isinstance(data, dict) or not isinstance(data.get("names"), dict):
            raise ValueError("not a names cache (no 'names' object)")
        lists = {k: data["names"].get(k) or [] for k in KINDS}
        if not all(isinstance(v, list) for v in lists.values()):
            raise ValueError("a kind of names that is not a list")
        fetched, entities, url = data.get("fetched_at"), data.get("entities"), data.get("url")
        if not isinstance(fetched, (int, float)) or not isinstance(entities, int) or not isinstance(url, str):
            raise ValueError("fetched_at, entities or url missing")
        try:
            datetime.fromtimestamp(fetched)
        except (OverflowError, OSError, ValueError) as exc:
            raise ValueError(f"fetched_at {fetched!r} is not a time") from exc
        return cls({k: bounded(v) for k, v in lists.items()}, entities, float(fetched), url)


def bounded(names: Iterable[Any], room: int = MAX_NAMES) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for n in names:
        s = str(n).strip() if isinstance(n, str) else ""
        if s and len(s) <= MAX_LEN:
            out[s] = None
            if len(out) >= room:
                break
    return tuple(out)


def read_cache(path: Path, url: str) -> Vocabulary | None:
    """The cached names of the HA at ``url``; None (and one log line) when there are none usable."""
    try:
        if path.stat().st_size > MAX_CACHE_BYTES:
            raise ValueError(f"over {MAX_CACHE_BYTES} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
        vocab = Vocabulary.from_json(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        log.warning("home: the names cache %s is unreadable (%s); it is rewritten at the next reading", path, exc)
        return None
    if vocab.url != url:
        log.info("home: the names cache %s is of %s, not %s; not used", path, vocab.url, url)
        return None
    return vocab
