"""A turn's timeline: typed marks on the injected clock, and the one summary drawn from them.

Every stage marks what it did on the turn's Timeline; nothing reads another stage's marks to learn
its state. ``--metrics`` writes ``{"events": [{"t_ms", "name", ...data}], "summary": {...}}`` with
the names below (bench scripts and users read them), times relative to ``start()`` or the first mark.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rkvoice.atomic import write_atomic
from rkvoice.clock import Clock
from rkvoice.errors import RkvoiceError

log = logging.getLogger(__name__)


class Ev(enum.StrEnum):
    """Event names, in the order a turn usually produces them."""

    SPEECH_END = "speech_end"  # the VAD closed the request (audio_s, silence_ms, truncated)
    WAKE = "wake"  # the wake phrase was heard (text, barge_in, audio_s)
    CUE = "cue"  # the acknowledgement was handed to the player (delay_ms)
    ASR_DONE = "asr_done"  # the request's transcript (text, heard, asr_ms, woke)
    BARGE_IN = "barge_in"  # a wake cancelled this turn (cancel_ms)
    ROUTE = "route"  # tool name or "llm"
    LLM_START = "llm_start"
    LLM_FIRST_TOKEN = "llm_first_token"
    LLM_TIMEOUT = "llm_timeout"  # (timeout_s)
    LLM_DONE = "llm_done"  # (chars, truncated, timed_out, cancelled)
    ANSWER_START = "answer_start"
    ANSWER_FIRST_TEXT = "answer_first_text"
    ANSWER = "answer"  # the whole answer text (text, route)
    TEXT_READY = "text_ready"  # the first text reached the speaker
    CHUNK = "chunk"  # a piece cut for synthesis (index, text)
    SYNTH_START = "synth_start"  # (index)
    SYNTH_END = "synth_end"  # (index, synth_ms, audio_s)
    AUDIO_FIRST = "audio_first"  # the turn's first PCM handed to the player
    PLAY_CHUNK = "play_chunk"  # a chunk's first block handed to the player (index, audio_s)
    PLAY_END = "play_end"  # everything of the turn has played
    CANCELLED = "cancelled"  # (reason)
    ERROR = "error"  # (message)
    WHOLE_TEXT_SYNTH = "whole_text_synth"  # --compare-whole (synth_ms, audio_s)


@dataclass(frozen=True)
class Event:
    name: Ev
    t_ms: float
    data: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        return {"t_ms": self.t_ms, "name": str(self.name), **self.data}


class Timeline:
    """Thread-safe list of events. ``on_event`` (optional) is called with each new event."""

    def __init__(self, clock: Clock, on_event: Callable[[Event], None] | None = None) -> None:
        self.clock = clock
        self._t0: float | None = None
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._on_event = on_event

    def start(self) -> None:
        """Make now the zero of the timeline (otherwise the first mark is)."""
        with self._lock:
            self._t0 = self.clock.now()

    def mark(self, name: Ev, **data: Any) -> Event:
        with self._lock:
            now = self.clock.now()
            if self._t0 is None:
                self._t0 = now
            event = Event(Ev(name), round((now - self._t0) * 1000.0, 3), MappingProxyType(data))
            self._events.append(event)
        log.debug("mark %s %s", event.name, data)
        if self._on_event is not None:
            self._on_event(event)
        return event

    def ms(self) -> float:
        """Now, in this timeline's milliseconds."""
        with self._lock:
            t0 = self._t0
        return 0.0 if t0 is None else round((self.clock.now() - t0) * 1000.0, 3)

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def find(self, name: Ev) -> list[Event]:
        return [e for e in self.events if e.name is name]

    def first(self, name: Ev) -> Event | None:
        return next((e for e in self.events if e.name is name), None)

    def summary(self) -> dict[str, Any]:
        return summarize(self.events)

    def to_dict(self) -> dict[str, Any]:
        events = self.events
        return {"events": [e.to_dict() for e in events], "summary": summarize(events)}

    def write(self, path: str | Path) -> None:
        """Write ``{"events": [...], "summary": {...}}`` atomically (temp file + rename)."""
        write_json_atomic(Path(path), self.to_dict())


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


def _letters(text: str) -> int:
    return len(re.sub(r"[\W_]+", "", text))


def summarize(events: list[Event]) -> dict[str, Any]:
    """The ``summary`` block: speech figures always, hearing and answer figures when those happened."""
    first: dict[Ev, Event] = {}
    for e in events:
        first.setdefault(e.name, e)
    out: dict[str, Any] = {}
    text_ready, audio_first = first.get(Ev.TEXT_READY), first.get(Ev.AUDIO_FIRST)
    if text_ready is not None and audio_first is not None:
        out["first_audio_ms"] = round(audio_first.t_ms - text_ready.t_ms, 3)
    ends = [e for e in events if e.name is Ev.SYNTH_END]
    synth_ms = sum(float(e.get("synth_ms", 0.0)) for e in ends)
    audio_s = sum(float(e.get("audio_s", 0.0)) for e in ends)
    out["synth_ms"] = round(synth_ms, 3)
    out["audio_s"] = round(audio_s, 4)
    out["rtf"] = round(synth_ms / 1000.0 / audio_s, 4) if audio_s > 0 else None
    out["chunks"] = sum(1 for e in events if e.name is Ev.CHUNK)
    out["max_gap_ms"] = max_gap_ms([(e.t_ms, float(e.get("audio_s"))) for e in events if e.name is Ev.PLAY_CHUNK])
    play_end = first.get(Ev.PLAY_END)
    if text_ready is not None and play_end is not None:
        out["total_ms"] = round(play_end.t_ms - text_ready.t_ms, 3)
    whole = first.get(Ev.WHOLE_TEXT_SYNTH)
    if whole is not None:
        out["whole_text_synth_ms"] = whole.get("synth_ms")
        if "first_audio_ms" in out and whole.get("synth_ms") > 0:
            out["first_audio_vs_whole"] = round(out["first_audio_ms"] / whole.get("synth_ms"), 4)
    if Ev.CANCELLED in first:
        out["cancelled"] = True
    errors = [e.get("message", "") for e in events if e.name is Ev.ERROR]
    if errors:
        out["errors"] = errors
    out.update(_answer_figures(events, first))
    out.update(_hear_figures(events, first))
    return out


def _answer_figures(events: list[Event], first: dict[Ev, Event]) -> dict[str, Any]:
    answer = first.get(Ev.ANSWER)
    if answer is None:
        return {}
    from rkvoice.text.normalize import speakable

    text = str(answer.get("text", ""))
    out: dict[str, Any] = {"answer": text, "route": answer.get("route", "")}
    for name in (Ev.LLM_START, Ev.LLM_FIRST_TOKEN, Ev.LLM_DONE, Ev.TEXT_READY, Ev.AUDIO_FIRST, Ev.PLAY_END):
        if name in first:
            out[f"{name}_ms"] = first[name].t_ms
    out["spoken_chars"] = _letters("".join(str(e.get("text", "")) for e in events if e.name is Ev.CHUNK))
    out["answer_chars"] = _letters(speakable(text)) if text else 0
    start, done, audio = first.get(Ev.LLM_START), first.get(Ev.LLM_DONE), first.get(Ev.AUDIO_FIRST)
    if start is not None and audio is not None:
        out["first_audio_from_llm_start_ms"] = round(audio.t_ms - start.t_ms, 3)
    if done is not None and audio is not None:
        out["audio_first_before_llm_done"] = audio.t_ms < done.t_ms
    return out


def _hear_figures(events: list[Event], first: dict[Ev, Event]) -> dict[str, Any]:
    """``transcript``, ``asr_ms``, ``woke``, ``vad_silence_ms`` and ``end_to_first_audio_ms``
    (the end of the user's speech -> the first sound of the answer)."""
    asr = first.get(Ev.ASR_DONE)
    if asr is None:
        return {}
    out: dict[str, Any] = {
        "transcript": asr.get("text", ""),
        "asr_ms": asr.get("asr_ms"),
        "woke": bool(asr.get("woke")) or Ev.WAKE in first,
    }
    ends = [e for e in events if e.name is Ev.SPEECH_END and e.t_ms <= asr.t_ms]
    if ends:
        out["vad_silence_ms"] = ends[-1].get("silence_ms")
        audio_first = first.get(Ev.AUDIO_FIRST)
        if audio_first is not None:
            out["end_to_first_audio_ms"] = round(audio_first.t_ms - ends[-1].t_ms, 3)
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
