"""The home's vocabulary: the names Home Assistant's sentences can name, read over its websocket.

``fetch_vocabulary`` reads the entities exposed to Assist (their names as HA shows them, their
registry names and aliases), and every area and floor with their aliases. ``HomeNames`` holds the
last one read: it loads the cache (``home_names.json`` in the state directory, written atomically)
at once, so a restart without HA still has the names, then reads HA in a thread of its own at start
and every ``every_s`` (``retry_s`` after a failure). Readers get the names and the matcher
(``rkvoice.home.correct``) of the last reading without waiting for HA, ever.

Bounded: at most ``MAX_NAMES`` names of at most ``MAX_LEN`` characters are kept, whatever HA has;
the websocket's messages are bounded by ``rkvoice.home.ws.MAX_MESSAGE`` and its reads by a timeout.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rkvoice.atomic import write_atomic
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.home.client import HomeFailure
from rkvoice.home.correct import NameMatcher, apply, clean
from rkvoice.home.ws import HaSocket, WsError
from rkvoice.home_names import KINDS, MAX_NAMES, Vocabulary, bounded, read_cache

log = logging.getLogger(__name__)

EVERY_S = 300.0
"""How often the names are read again (HA's registries change when the user renames or exposes)."""
REWRITE_S = 3600.0
"""The cache is rewritten when the names changed, else at most this often (flash storage on a board)."""


def fetch_vocabulary(sock: HaSocket, url: str, now: Callable[[], float] = time.time) -> Vocabulary:
    """Read the names from HA (five websocket commands); WsError/AttributeError/TypeError on an answer
    of another shape."""
    exposed = sock.call("homeassistant/expose_entity/list").get("exposed_entities", {})
    ids = sorted(eid for eid, to in exposed.items() if isinstance(to, dict) and to.get("conversation"))
    wanted = set(ids)
    entity: list[str] = []
    for state in sock.call("get_states"):
        if state.get("entity_id") in wanted:
            entity.append(str(state.get("attributes", {}).get("friendly_name") or ""))
    alias: list[str] = []
    if ids:
        entries = sock.call("config/entity_registry/get_entries", entity_ids=ids)
        for entry in (entries or {}).values():
            if isinstance(entry, dict):
                entity.append(str(entry.get("name") or ""))
                alias.extend(str(a) for a in entry.get("aliases") or () if a)
    area: list[str] = []
    for a in sock.call("config/area_registry/list") or ():
        area.append(str(a.get("name") or ""))
        alias_of_area = [str(x) for x in a.get("aliases") or () if x]
        area.extend(alias_of_area)
    floor: list[str] = []
    try:
        floors = sock.call("config/floor_registry/list") or ()
    except WsError as exc:  # an HA before floors (2024.4)
        log.debug("home: no floor registry (%s)", exc)
        floors = ()
    for f in floors:
        floor.append(str(f.get("name") or ""))
        floor.extend(str(x) for x in f.get("aliases") or () if x)
    room = MAX_NAMES
    names: dict[str, tuple[str, ...]] = {}
    for kind, found in zip(KINDS, (entity, alias, area, floor)):
        names[kind] = bounded(found, max(room, 0)) if room > 0 else ()
        room -= len(names[kind])
    return Vocabulary(names, len(ids), now(), url)


@dataclass
class HomeNames:
    """The last names read from HA (or the cache), kept current by a thread of its own once ``start``ed."""

    url: str
    token: Callable[[], str]
    """The access token (read when needed: a fixed token file needs no restart)."""
    cache: Path | None
    timeout_s: float = 5.0
    every_s: float = EVERY_S
    retry_s: float = 30.0
    clock: Clock = field(default_factory=MonotonicClock)
    vocabulary: Vocabulary | None = field(default=None, init=False)
    matcher: NameMatcher = field(default_factory=lambda: NameMatcher(()), init=False)
    names: frozenset[str] = field(default=frozenset(), init=False)
    """Every name as ``clean`` spells it (no spaces or punctuation, lower case), two characters or more."""
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _written: float = field(default=0.0, init=False, repr=False)
    _tried: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _waited: bool = field(default=False, init=False, repr=False)

    def start(self) -> None:
        """Load the cache now; read HA in the background at once and every ``every_s``. Idempotent."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._keep, name="home-names", daemon=True)
        if self.vocabulary is None and self.cache is not None:
            cached = read_cache(self.cache, self.url)
            if cached is not None:
                self.use(cached)
                log.info("home: %d names cached from %s", cached.count(), cached.when())
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait_first(self, timeout: float) -> None:
        """``start``, and with no names yet (none cached) wait once up to ``timeout`` for the first
        reading: a one-shot run (``--text``, ``--file``) asks its one question before a background
        reading would end."""
        self.start()
        if self.vocabulary is None and not self._waited:
            self._waited = True  # once: a wedged HA costs one wait, not one per question
            self._tried.wait(timeout)

    def use(self, vocab: Vocabulary) -> None:
        """Make ``vocab`` the current names (readers switch at once, whole)."""
        cleaned = frozenset(c for c in (clean(n) for n in vocab.all()) if len(c) >= 2)
        self.matcher = NameMatcher(cleaned)
        self.names = cleaned
        self.vocabulary = vocab

    def correct(self, text: str) -> str:
        """``text`` with misheard names put right (``rkvoice.home.correct``); as it was when none is."""
        fixes = self.matcher.fixes(text)
        if not fixes:
            return text
        out = apply(text, fixes)
        log.info("home: heard %r, corrected to %r (%s)", text, out,
                 ", ".join(f"{f.heard}->{f.name} {f.cost:g}" for f in fixes))
        return out

    def refresh(self) -> bool:
        """Read HA once; True when it answered (the cache rewritten when the names changed)."""
        try:
            with HaSocket(self.url, self.token(), self.timeout_s) as sock:
                vocab = fetch_vocabulary(sock, self.url)
        except (HomeFailure, WsError, OSError, ValueError, AttributeError, TypeError) as exc:
            log.debug("home: could not read the names (%s)", exc)  # the names stay as they were
            return False
        last = self.vocabulary
        changed = last is None or last.names != vocab.names
        if changed:
            self.use(vocab)
        else:
            self.vocabulary = vocab  # the same names: the matcher is kept (built anew, 20,000 names cost seconds)
        log.debug("home: %d names of %d exposed entities read", vocab.count(), vocab.entities)
        if self.cache is not None and (changed or vocab.fetched_at - self._written >= REWRITE_S):
            self._written = vocab.fetched_at
            try:
                self.cache.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(self.cache, json.dumps(vocab.to_json(), ensure_ascii=False).encode(), durable=changed)
            except OSError as exc:
                log.warning("home: cannot write the names cache %s (%s); a restart without HA has no names", self.cache,
                            exc)
        return True

    def _keep(self) -> None:
        while not self._stop.is_set():
            wait = self.every_s if self.refresh() else self.retry_s
            self._tried.set()
            if self.clock.wait(self._stop, wait):
                return
