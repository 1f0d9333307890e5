"""The answer to a client's transcript (``handle``), as a turn: the assistant replies on a pool thread,
holding the answer gate at Wyoming priority; the client gets the text as it comes."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass

from wyoming.handle import Handled, HandledChunk, HandledStart, HandledStop, NotHandled

from rkvoice.errors import RkvoiceError
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

from .context import Send
from .engines import Engines

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Routed:
    """The assistant chose the answer's route ("tool:<name>", "home" or "llm")."""

    route: str


@dataclass(frozen=True)
class Delta:
    """The next piece of the answer's text."""

    text: str


@dataclass(frozen=True)
class Ended:
    """The answer's text is complete; ``stopped`` says why it stopped early ("" when it did not)."""

    stopped: str


@dataclass(frozen=True)
class Failed:
    """The answer failed."""

    error: Exception


@dataclass(frozen=True)
class WorkerDone:
    """The worker let go of the assistant (after any of the others, or before reaching the model)."""


Progress = Routed | Delta | Ended | Failed | WorkerDone


async def answer(engines: Engines, turn: Turn, send: Send, max_chars: int) -> None:
    """transcript -> handled (a tool's answer), or handled-start/-chunk/-stop as the LLM's answer comes
    and then handled with the whole text (the protocol's plain event, which clients that do not
    stream, Home Assistant among them, wait for); not-handled with the reason when there is no answer."""
    text = turn.text.strip()
    if not text:
        await send(NotHandled(text="the transcript is empty: nothing to answer").event())
        return
    if len(text) > max_chars:
        await send(NotHandled(text=f"the transcript has {len(text)} characters; at most {max_chars} are "
                                   "answered (wyoming.max_text_chars)").event())
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Progress] = asyncio.Queue()
    preempted = threading.Event()

    def put(progress: Progress) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, progress)

    def preempt() -> None:
        preempted.set()
        turn.cancel("preempted")

    def work() -> None:
        try:
            with engines.answer_gate.remote(on_preempt=preempt):
                if turn.cancelled:
                    return
                reply = engines.assistant.reply(text, turn)
                put(Routed(reply.route))
                for delta in reply.deltas:
                    put(Delta(delta))
                llm = reply.llm  # a timed-out answer ends with the apology it streamed: still an answer
                put(Ended("cancelled" if llm is not None and llm.cancelled else ""))
        except Exception as exc:  # reported to the client as not-handled, logged here
            log.warning("wyoming answer to %r failed: %s", text, exc)
            put(Failed(exc))
        finally:
            put(WorkerDone())

    worker = loop.run_in_executor(None, work)
    try:
        await _relay(queue, send, preempted, turn)
        turn.finish()  # answered: a client leaving while the worker lets go cancels nothing
    except BaseException:
        turn.cancel("interrupted")  # a cancelled task stops the LLM before waiting for it
        raise
    finally:
        await asyncio.shield(worker)


async def _relay(queue: asyncio.Queue[Progress], send: Send, preempted: threading.Event, turn: Turn) -> None:
    route = ""
    parts: list[str] = []
    streaming = False
    while True:
        progress = await queue.get()
        if isinstance(progress, Routed):
            route = turn.route = progress.route
            if route == "llm":
                streaming = True
                await send(HandledStart().event())
        elif isinstance(progress, Delta):
            parts.append(progress.text)
            if streaming:
                await send(HandledChunk(text=progress.text).event())
        elif isinstance(progress, (Failed, Ended)):
            if streaming:
                await send(HandledStop().event())
            text = "".join(parts)
            if isinstance(progress, Failed):
                err = progress.error
                reason = err.message if isinstance(err, RkvoiceError) else f"the answer failed: {err}"
                await send(NotHandled(text=reason).event())
                return
            turn.timeline.mark(Ev.ANSWER, text=text, route=route)
            reason = "the local assistant needed the model" if preempted.is_set() else progress.stopped
            if reason:
                await send(NotHandled(text=f"the answer stopped early: {reason}").event())
            elif text.strip():
                await send(Handled(text=text).event())
            else:
                await send(NotHandled(text=f"no answer for {turn.text!r}").event())
            return
        else:  # WorkerDone first: the worker ended before reaching the model (preempted while waiting)
            await send(NotHandled(text="the local assistant needed the model; ask again").event())
            return

