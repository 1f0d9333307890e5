"""The Answerer: a transcript -> tools or LLM -> StreamChunker -> the speaker, with timeline marks.

LLM deltas are cut into pieces as soon as each is safe to speak and handed to the speaker,
so the first piece is synthesised and played while the model is still generating.
Marks: ``route`` (tool name or llm), ``llm_first_token``, ``llm_done`` (from the LLM stream),
``answer`` (``text``, ``route``) when the whole answer text is known.

When the LLM is slower than the listener expects at some moment (the player is about to run
dry and nothing else is in flight), the text pending in the chunker is cut early at its last
comma, so the listener hears a clause now instead of silence while the sentence completes.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rkvoice.answer.assistant import Assistant, Reply
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.speaker import piece_chars, raise_if_failed
from rkvoice.text.stream_chunker import StreamChunker
from rkvoice.timeline import Timeline

log = logging.getLogger(__name__)

STARVE_MARGIN_S = 0.6
"""Cut early when the audio handed to the player runs out within this time (synthesis + margin)."""
MIN_EARLY_PIECE = 4
_CLAUSE_END = re.compile(r"[，、；：,;:]")


@dataclass
class Answered:
    route: str
    text: str
    status: str
    """Speaker's turn status: "done", "cancelled", "error", or "stopped" (a stop request)."""
    pieces: int = 0
    turn_id: int | None = None
    result: Any = None


class Answerer:
    """Answers and speaks. ``speaker`` is an rkvoice.speaker.Speaker (start_turn/say/end_turn/cancel)."""

    def __init__(self, assistant: Assistant, speaker: Any, cfg: Config, clock: Clock | None = None) -> None:
        self.assistant = assistant
        self.speaker = speaker
        self.cfg = cfg
        self.clock = clock or MonotonicClock()
        self._cancel = threading.Event()

    def speak_reminder(self, text: str) -> None:
        """Reminder callback: speak as a turn of its own (queued after the current one)."""
        self.speaker.speak(text)

    def ask(self, text: str, timeline: Timeline | None = None, cancel: threading.Event | None = None,
            wait: bool = True, wrap: Callable[[Iterator[str]], Iterable[str]] | None = None) -> Answered:
        """Answer ``text`` and speak it. ``wrap`` may guard the delta stream (e.g. the daemon's deadline)."""
        timeline = timeline or Timeline(self.clock)
        cancel = cancel or threading.Event()
        reply: Reply = self.assistant.reply(text, timeline, cancel)
        if reply.action == "stop":
            self.speaker.cancel()
            timeline.mark("answer", text="", route=reply.route)
            return Answered(reply.route, "", "stopped")
        turn = self.speaker.start_turn(timeline)
        first, chunk = piece_chars(self.cfg, getattr(self.speaker, "engine", None))
        chunker = StreamChunker(first=first, chunk=chunk)
        start = timeline.mark("answer_start", turn=turn)
        offset = self.clock.now() - start["t_ms"] / 1000.0  # clock time of the timeline's zero
        pieces = 0
        last_say_ms = -1.0
        deltas = wrap(reply.deltas) if wrap is not None else reply.deltas
        first = True
        try:
            for delta in deltas:
                if cancel.is_set():
                    break
                if first and delta:
                    first = False
                    timeline.mark("answer_first_text", turn=turn)
                ready = chunker.feed(delta)
                if not ready and self._starving(timeline, turn, offset, last_say_ms):
                    ready = self._cut_early(chunker)
                for piece in ready:
                    self.speaker.say(piece, turn)
                    last_say_ms = (self.clock.now() - offset) * 1000.0
                    pieces += 1
            if not cancel.is_set():
                for piece in chunker.flush():
                    self.speaker.say(piece, turn)
                    pieces += 1
        finally:
            self.speaker.end_turn(turn)
            timeline.mark("answer", text=reply.text, route=reply.route)
        result = None
        if wait:
            result = self.speaker.wait_done(turn)
        status = "cancelled" if cancel.is_set() else (result.status if result is not None else "queued")
        return Answered(reply.route, reply.text, status, pieces, turn, result)

    def _starving(self, timeline: Timeline, turn: int, offset: float, last_say_ms: float) -> bool:
        """Everything said so far is already with the player, and it plays out within the margin."""
        chunk_ms, plays = -1.0, []
        n_chunks = 0
        for e in timeline.events:
            if e.get("turn") != turn:
                continue
            if e["name"] == "chunk":
                n_chunks += 1
                chunk_ms = e["t_ms"]
            elif e["name"] == "play_chunk":
                plays.append((e["t_ms"], float(e["audio_s"])))
        if not plays or len(plays) < n_chunks or last_say_ms > chunk_ms:
            return False  # nothing heard yet, or a piece is still being synthesised
        dry = None
        for handed, audio_s in plays:
            dry = (handed if dry is None else max(handed, dry)) + audio_s * 1000.0
        now_ms = (self.clock.now() - offset) * 1000.0
        return dry is not None and dry - now_ms < STARVE_MARGIN_S * 1000.0

    @staticmethod
    def _cut_early(chunker: StreamChunker) -> list[str]:
        pending = chunker.pending
        cuts = [m.end() for m in _CLAUSE_END.finditer(pending) if m.end() >= MIN_EARLY_PIECE]
        if not cuts:
            return []
        piece, rest = pending[: cuts[-1]], pending[cuts[-1]:]
        chunker.reset()
        log.debug("player about to run dry: cutting %r early", piece)
        return [piece, *chunker.feed(rest)]

    # -- rkvoice.hear.loop.Responder ------------------------------------------------------------
    def respond(self, text: str, timeline: Timeline, cancel: threading.Event) -> str:
        """Raises the speaker's error when the answer could not be spoken (the turn failed)."""
        answered = self.ask(text, timeline, cancel)
        raise_if_failed(answered.result)
        return answered.text

    def cancel(self) -> None:
        self.assistant.abort()
        self.speaker.cancel()
