"""The Answerer: a turn's transcript -> tools or LLM -> StreamChunker -> the speaker.

Each piece goes to the speaker as soon as it is safe to speak, so the first one plays while the
model still generates. No first text within ``daemon.answer_first_timeout_s``, or no next within
``daemon.answer_gap_timeout_s`` (a wedged LLM), cancels the turn; when the player is about to run dry
with no piece waiting, the pending text is cut early at its last comma (a clause now, not silence).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol

from rkvoice.answer.assistant import Reply
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.pieces import piece_chars
from rkvoice.speaker import Speaker
from rkvoice.text.stream_chunker import StreamChunker
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

STARVE_MARGIN_S = 0.6
"""Cut early when the audio handed to the player runs out within this time (synthesis + margin)."""
_END = object()


def deadline_deltas(deltas: Iterable[str], turn: Turn, first_timeout: float, gap_timeout: float) -> Iterator[str]:
    """Yield ``deltas``; when they stall, cancel ``turn`` and raise RkvoiceError("answer", "timeout").

    Each delta is pulled on a thread of its own (a wedged native call cannot be interrupted) when the
    consumer asks for it; the consumer waits on the turn's clock, and a cancel ends the wait at once."""
    box: deque[object] = deque()
    arrived = threading.Event()
    wanted = threading.Event()
    gone = threading.Event()
    source = iter(deltas)

    def pump() -> None:
        try:
            while True:
                wanted.wait()
                wanted.clear()
                if gone.is_set() or turn.cancelled:
                    break
                box.append(next(source, _END))  # after the end: wait for the consumer to go
                arrived.set()
        except BaseException as exc:  # handed to the consumer, re-raised there
            box.append(exc)
        finally:
            box.append(_END)
            arrived.set()
            getattr(source, "close", lambda: None)()  # a generator's cleanup runs here, on the thread that ran it

    def wake_both(_turn: Turn) -> None:
        arrived.set()
        wanted.set()

    turn.on_cancel(wake_both)
    threading.Thread(target=pump, name="answer-stream", daemon=True).start()
    timeout = first_timeout
    try:
        while True:
            while not box:
                arrived.clear()
                wanted.set()
                if not box and not turn.cancelled and not turn.clock.wait(arrived, timeout):
                    what = "its first words" if timeout is first_timeout else "its next words"
                    turn.cancel("timeout")
                    raise RkvoiceError(
                        Stage.ANSWER, "timeout",
                        f"the answer did not produce {what} within {timeout:g} s; the turn was aborted "
                        "(raise daemon.answer_first_timeout_s / answer_gap_timeout_s if the model is just slow)",
                    )
                if turn.cancelled and not box:
                    return
            item = box.popleft()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            timeout = gap_timeout
            yield str(item)
    finally:
        gone.set()
        wanted.set()


class Replier(Protocol):
    def reply(self, text: str, turn: Turn) -> Reply:
        """Route ``text`` (tools first, else the LLM); the answer streams from ``Reply.deltas``."""


class Answerer:
    """Answers a turn through a loaded Speaker; ``assistant`` is an Assistant or a gated view of it."""

    def __init__(self, assistant: Replier, speaker: Speaker, cfg: Config) -> None:
        self.assistant = assistant
        self.speaker = speaker
        self.cfg = cfg

    def respond(self, turn: Turn) -> str:
        """Answer ``turn.text`` and speak it; returns the answer text once it has played (or the
        turn was cancelled). Raises the turn's error when the answer could not be spoken."""
        tl = turn.timeline
        reply = self.assistant.reply(turn.text, turn)
        turn.route = reply.route
        if reply.tool is not None and reply.tool.action == "stop":  # the user asked to stop speaking
            self.speaker.cancel_all("stop")
            tl.mark(Ev.ANSWER, text="", route=reply.route)
            return ""
        self.speaker.start(turn)
        chunker = StreamChunker(*piece_chars(self.cfg, self.speaker.engine))
        tl.mark(Ev.ANSWER_START, turn=turn.id)
        d = self.cfg.daemon
        started = spoken = False
        try:
            for delta in deadline_deltas(reply.deltas, turn, d.answer_first_timeout_s, d.answer_gap_timeout_s):
                if turn.cancelled:
                    break
                if delta and not started:
                    started = True
                    tl.mark(Ev.ANSWER_FIRST_TEXT, turn=turn.id)
                ready = chunker.feed(delta)
                # everything said so far is with the player already, and it plays out within the margin
                ahead = None if ready else self.speaker.audio_ahead_s(turn)
                if ahead is not None and ahead < STARVE_MARGIN_S:
                    ready = chunker.cut_early()
                    log.debug("turn %d: the player is about to run dry; cut early: %r", turn.id, ready)
                for piece in ready:
                    self.speaker.say(turn, piece)
                if ready and not spoken and reply.llm is not None:
                    spoken = True
                    reply.llm.engine.speaking()  # the engine may now leave the voice a core
            if not turn.cancelled:
                for piece in chunker.flush():
                    self.speaker.say(turn, piece)
        except Exception as exc:
            turn.fail(exc)
            raise
        except BaseException:  # Ctrl-C
            turn.cancel("interrupted")
            raise
        finally:
            self.speaker.end(turn)
            tl.mark(Ev.ANSWER, text=reply.text, route=reply.route)
        if not self.speaker.wait(turn, timeout=d.stall_s):
            log.warning("turn %d: the answer has not finished playing after %.0f s", turn.id, d.stall_s)
        turn.raise_if_failed()
        return reply.text
