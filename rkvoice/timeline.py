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
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rkvoice.atomic import write_atomic
from rkvoice.clock import Clock
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)


class Ev(enum.StrEnum):
    """Event names, in the order a turn usually produces them."""

    SPEECH_END = "speech_end"  # the VAD closed the request (audio_s, silence_ms, truncated; ended_by, judged)
    WAKE = "wake"  # the wake phrase was heard (text, barge_in, audio_s)
    CUE = "cue"  # the acknowledgement was handed to the player (delay_ms)
    ASR_DONE = "asr_done"  # the request's transcript (text, heard, asr_ms, woke)
    BARGE_IN = "barge_in"  # a wake cancelled this turn (cancel_ms)
    ROUTE = "route"  # "tool:<name>", "home" or "llm", as Reply.route spells it
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
    """Thread-safe list of events."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._t0: float | None = None
        self._events: list[Event] = []
        self._lock = threading.Lock()

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
        return event

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def find(self, name: Ev) -> list[Event]:
        return [e for e in self.events if e.name is name]

    def summary(self) -> dict[str, Any]:
        return summarize(self.events)

    def to_dict(self) -> dict[str, Any]:
        events = self.events
        return {"events": [e.to_dict() for e in events], "summary": summarize(events)}

    def write(self, path: str | Path) -> None:
        """Write ``{"events": [...], "summary": {...}}`` atomically (temp file + rename)."""
        write_json_atomic(Path(path), self.to_dict())


def max_gap_ms(plays: list[tuple[float, float]]) -> float:
    """Largest silence heard between chunks on a real-time player. ``plays``: per chunk in play order,
    (ms when its first block was handed over, its audio seconds); the player runs dry once everything
    handed has played, and a chunk handed after that leaves a gap of the difference."""
    gap = 0.0
    dry = plays[0][0] if plays else 0.0
    for handed_ms, audio_s in plays:
        gap = max(gap, handed_ms - dry)
        dry = max(handed_ms, dry) + audio_s * 1000.0
    return round(gap, 3)


def _letters(text: str) -> int:
    return len(re.sub(r"[\W_]+", "", text))


def summarize(events: list[Event]) -> dict[str, Any]:
    """The ``summary`` block: speech figures always, answer and hearing figures when those happened."""
    every: defaultdict[Ev, list[Event]] = defaultdict(list)
    for e in events:
        every[e.name].append(e)
    t = {name: marks[0].t_ms for name, marks in every.items()}  # the first mark of each name
    out: dict[str, Any] = {}
    if Ev.TEXT_READY in t and Ev.AUDIO_FIRST in t:
        out["first_audio_ms"] = round(t[Ev.AUDIO_FIRST] - t[Ev.TEXT_READY], 3)
    synth_ms = sum(float(e.get("synth_ms", 0.0)) for e in every[Ev.SYNTH_END])
    audio_s = sum(float(e.get("audio_s", 0.0)) for e in every[Ev.SYNTH_END])
    out["synth_ms"] = round(synth_ms, 3)
    out["audio_s"] = round(audio_s, 4)
    out["rtf"] = round(synth_ms / 1000.0 / audio_s, 4) if audio_s > 0 else None
    out["chunks"] = len(every[Ev.CHUNK])
    out["max_gap_ms"] = max_gap_ms([(e.t_ms, float(e.get("audio_s"))) for e in every[Ev.PLAY_CHUNK]])
    if Ev.TEXT_READY in t and Ev.PLAY_END in t:
        out["total_ms"] = round(t[Ev.PLAY_END] - t[Ev.TEXT_READY], 3)
    if every[Ev.WHOLE_TEXT_SYNTH]:
        whole_ms = out["whole_text_synth_ms"] = every[Ev.WHOLE_TEXT_SYNTH][0].get("synth_ms")
        if "first_audio_ms" in out and whole_ms > 0:
            out["first_audio_vs_whole"] = round(out["first_audio_ms"] / whole_ms, 4)
    if Ev.CANCELLED in t:
        out["cancelled"] = True
    if every[Ev.ERROR]:
        out["errors"] = [e.get("message", "") for e in every[Ev.ERROR]]
    if every[Ev.ANSWER]:
        from rkvoice.text.normalize import speakable

        answer = every[Ev.ANSWER][0]
        text = str(answer.get("text", ""))
        out.update(answer=text, route=answer.get("route", ""))
        for name in (Ev.LLM_START, Ev.LLM_FIRST_TOKEN, Ev.LLM_DONE, Ev.TEXT_READY, Ev.AUDIO_FIRST, Ev.PLAY_END):
            if name in t:
                out[f"{name}_ms"] = t[name]
        out["spoken_chars"] = _letters("".join(str(e.get("text", "")) for e in every[Ev.CHUNK]))
        out["answer_chars"] = _letters(speakable(text)) if text else 0
        if Ev.LLM_START in t and Ev.AUDIO_FIRST in t:
            out["first_audio_from_llm_start_ms"] = round(t[Ev.AUDIO_FIRST] - t[Ev.LLM_START], 3)
        if Ev.LLM_DONE in t and Ev.AUDIO_FIRST in t:
            out["audio_first_before_llm_done"] = t[Ev.AUDIO_FIRST] < t[Ev.LLM_DONE]
    if every[Ev.ASR_DONE]:
        # the end of the user's speech (the last one before the transcript) -> the answer's first sound
        asr = every[Ev.ASR_DONE][0]
        out.update(transcript=asr.get("text", ""), asr_ms=asr.get("asr_ms"), woke=bool(asr.get("woke")) or Ev.WAKE in t)
        ends = [e for e in every[Ev.SPEECH_END] if e.t_ms <= asr.t_ms]
        if ends:
            out["vad_silence_ms"] = ends[-1].get("silence_ms")
            if Ev.AUDIO_FIRST in t:
                out["end_to_first_audio_ms"] = round(t[Ev.AUDIO_FIRST] - ends[-1].t_ms, 3)
    return out


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON next to ``path`` and rename over it: readers never see half a file."""
    payload = (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
    try:
        write_atomic(path, payload)
    except OSError as exc:
        raise RkvoiceError(
            Stage.METRICS, "unwritable", f"cannot write {path}: {exc.strerror}; choose a writable path"
        ) from exc
