"""A turn's timeline: monotonic marks on an injected clock, and the latency figures drawn from them.

Events are dicts ``{"t_ms": ..., "name": ..., **data}``, times relative to the first mark
(or an explicit ``start()``). Event names used by the speaker:

- ``text_ready``: the first text piece of a turn reached the speaker;
- ``chunk`` (``text``, ``index``): a piece cut for synthesis;
- ``synth_start`` / ``synth_end`` (``index``, ``synth_ms``, ``audio_s``): one engine call;
- ``audio_first``: the first PCM block of the turn handed to the player;
- ``play_chunk`` (``index``, ``audio_s``): a chunk's first block handed to the player, with
  the duration of the audio that chunk hands over (what the listener hears);
- ``play_end``: the player has played everything of the turn;
- ``cancelled``; ``error`` (``message``); ``whole_text_synth`` (``synth_ms``, ``audio_s``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rkvoice.atomic import write_atomic
from rkvoice.clock import Clock
from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)

Event = dict[str, Any]


class Timeline:
    """Thread-safe list of marks. ``on_event`` (optional) is called with each new event."""

    def __init__(self, clock: Clock, on_event: Callable[[Event], None] | None = None) -> None:
        self._clock = clock
        self._t0: float | None = None
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._on_event = on_event

    def start(self) -> None:
        """Make now the zero of the timeline (otherwise the first mark is)."""
        with self._lock:
            self._t0 = self._clock.now()

    def mark(self, name: str, **data: Any) -> Event:
        with self._lock:
            now = self._clock.now()
            if self._t0 is None:
                self._t0 = now
            event: Event = {"t_ms": round((now - self._t0) * 1000.0, 3), "name": name, **data}
            self._events.append(event)
        log.debug("mark %s", event)
        if self._on_event is not None:
            self._on_event(event)
        return event

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def find(self, name: str) -> list[Event]:
        return [e for e in self.events if e["name"] == name]

    def summary(self) -> dict[str, Any]:
        return summarize(self.events)

    def to_dict(self) -> dict[str, Any]:
        events = self.events
        return {"events": events, "summary": summarize(events)}

    def write(self, path: str | Path) -> None:
        """Write ``{"events": [...], "summary": {...}}`` atomically (temp file + rename)."""
        write_json_atomic(Path(path), self.to_dict())


def _first(events: list[Event], name: str) -> Event | None:
    return next((e for e in events if e["name"] == name), None)


def max_gap_ms(plays: list[tuple[float, float]]) -> float:
    """Largest silence heard between chunks on a real-time player.

    ``plays`` holds, per chunk in play order, (ms when its first block was handed to the
    player, its audio duration in seconds). The player runs dry when everything handed so
    far has played; a chunk handed after that moment leaves a gap of the difference.
    """
    gap = 0.0
    dry: float | None = None
    for handed_ms, audio_s in plays:
        if dry is None:
            start = handed_ms
        else:
            gap = max(gap, handed_ms - dry)
            start = max(handed_ms, dry)
        dry = start + audio_s * 1000.0
    return round(gap, 3)


def summarize(events: list[Event]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    text_ready = _first(events, "text_ready")
    audio_first = _first(events, "audio_first")
    if text_ready is not None and audio_first is not None:
        out["first_audio_ms"] = round(audio_first["t_ms"] - text_ready["t_ms"], 3)
    ends = [e for e in events if e["name"] == "synth_end"]
    synth_ms = sum(float(e.get("synth_ms", 0.0)) for e in ends)
    audio_s = sum(float(e.get("audio_s", 0.0)) for e in ends)
    out["synth_ms"] = round(synth_ms, 3)
    out["audio_s"] = round(audio_s, 4)
    out["rtf"] = round(synth_ms / 1000.0 / audio_s, 4) if audio_s > 0 else None
    out["chunks"] = sum(1 for e in events if e["name"] == "chunk")
    plays = [(e["t_ms"], float(e["audio_s"])) for e in events if e["name"] == "play_chunk"]
    out["max_gap_ms"] = max_gap_ms(plays)
    play_end = _first(events, "play_end")
    if text_ready is not None and play_end is not None:
        out["total_ms"] = round(play_end["t_ms"] - text_ready["t_ms"], 3)
    whole = _first(events, "whole_text_synth")
    if whole is not None:
        out["whole_text_synth_ms"] = whole["synth_ms"]
        if "first_audio_ms" in out and whole["synth_ms"] > 0:
            out["first_audio_vs_whole"] = round(out["first_audio_ms"] / whole["synth_ms"], 4)
    if _first(events, "cancelled") is not None:
        out["cancelled"] = True
    errors = [e.get("message", "") for e in events if e["name"] == "error"]
    if errors:
        out["errors"] = errors
    return out


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON next to ``path`` and rename over it: readers never see half a file."""
    payload = (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
    try:
        write_atomic(path, payload)
    except OSError as exc:
        raise RkvoiceError(
            "metrics", "unwritable", f"cannot write {path}: {exc.strerror}; choose a writable path"
        ) from exc
