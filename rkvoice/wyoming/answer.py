"""The answer to a client's transcript (``handle``), as a turn: the assistant replies on a pool thread,
holding the answer gate at Wyoming priority; the client gets the text as it comes."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from wyoming.handle import Handled, HandledChunk, HandledStart, HandledStop, NotHandled

from rkvoice.errors import RkvoiceError
from rkvoice.timeline import Ev
from rkvoice.turn import Turn

from .context import Send
from .engines import Engines

log = logging.getLogger(__name__)


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
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    preempted = threading.Event()

    def put(kind: str, value: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

    def preempt() -> None:
        preempted.set()
        turn.cancel("preempted")

    def work() -> None:
        try:
            with engines.answer_gate.remote(on_preempt=preempt):
                if turn.cancelled:
                    return
                reply = engines.assistant.reply(text, turn)
                put("route", reply.route)
                for delta in reply.deltas:
                    put("delta", delta)
                llm = reply.llm  # a timed-out answer ends with the apology it streamed: still an answer
                put("end", "cancelled" if llm is not None and llm.cancelled else "")
        except Exception as exc:  # reported to the client as not-handled, logged here
            log.warning("wyoming answer to %r failed: %s", text, exc)
            put("error", exc)
        finally:
            put("done", None)

    worker = loop.run_in_executor(None, work)
    try:
        await _relay(queue, send, preempted, turn)
        turn.finish()  # answered: a client leaving while the worker lets go cancels nothing
    except BaseException:
        turn.cancel("interrupted")  # a cancelled task stops the LLM before waiting for it
        raise
    finally:
        await asyncio.shield(worker)


async def _relay(queue: asyncio.Queue[tuple[str, Any]], send: Send, preempted: threading.Event, turn: Turn) -> None:
    route = ""
    parts: list[str] = []
    streaming = False
    while True:
        kind, value = await queue.get()
        if kind == "route":
            route = turn.route = value
            if route == "llm":
                streaming = True
                await send(HandledStart().event())
        elif kind == "delta":
            parts.append(value)
            if streaming:
                await send(HandledChunk(text=value).event())
        elif kind in ("error", "end"):
            if streaming:
                await send(HandledStop().event())
            text = "".join(parts)
            if kind == "error":
                reason = value.message if isinstance(value, RkvoiceError) else f"the answer failed: {value}"
                await send(NotHandled(text=reason).event())
                return
            turn.timeline.mark(Ev.ANSWER, text=text, route=route)
            reason = "the local assistant needed the model" if preempted.is_set() else value
            if reason:
                await send(NotHandled(text=f"the answer stopped early: {reason}").event())
            elif text.strip():
                await send(Handled(text=text).event())
            else:
                await send(NotHandled(text=f"no answer for {turn.text!r}").event())
            return
        elif kind == "done":  # the worker ended before reaching the model (preempted while waiting)
            await send(NotHandled(text="the local assistant needed the model; ask again").event())
            return

