"""The Answerer: a transcript -> tools or LLM -> StreamChunker -> the speaker, with timeline marks.

LLM deltas are cut into pieces as soon as each is safe to speak and handed to the speaker,
so the first piece is synthesised and played while the model is still generating.
Marks: ``route`` (tool name or llm), ``llm_first_token``, ``llm_done`` (from the LLM stream),
``answer`` (``text``, ``route``) when the whole answer text is known.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from rkvoice.answer.assistant import Assistant, Reply
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.text.stream_chunker import StreamChunker
from rkvoice.timeline import Timeline

log = logging.getLogger(__name__)


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
            wait: bool = True) -> Answered:
        timeline = timeline or Timeline(self.clock)
        cancel = cancel or threading.Event()
        reply: Reply = self.assistant.reply(text, timeline, cancel)
        if reply.action == "stop":
            self.speaker.cancel()
            timeline.mark("answer", text="", route=reply.route)
            return Answered(reply.route, "", "stopped")
        turn = self.speaker.start_turn(timeline)
        chunker = StreamChunker(first=self.cfg.tts.first_chars, chunk=self.cfg.tts.chunk_chars)
        pieces = 0
        try:
            for delta in reply.deltas:
                if cancel.is_set():
                    break
                for piece in chunker.feed(delta):
                    self.speaker.say(piece, turn)
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

    # -- rkvoice.hear.loop.Responder ------------------------------------------------------------
    def respond(self, text: str, timeline: Timeline, cancel: threading.Event) -> str:
        return self.ask(text, timeline, cancel).text

    def cancel(self) -> None:
        self.assistant.abort()
        self.speaker.cancel()
