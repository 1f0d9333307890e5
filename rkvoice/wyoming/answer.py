"""The listening services for one connection: an ASR request, a wake-detect stream and an answer.

Each keeps its own per-request state; the engines are the shared ones (``Engines``). Every blocking
call runs off the event loop, behind the engine's gate at Wyoming priority: ASR on the ASR worker
thread, a detect stream's VAD on a pool thread, the answer on a pool thread for its whole reply.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import numpy as np
from wyoming.asr import Transcript
from wyoming.handle import Handled, HandledChunk, HandledStart, HandledStop, NotHandled
from wyoming.wake import Detection, NotDetected

from rkvoice.errors import RkvoiceError
from rkvoice.gate import Engines

from .audio import TARGET_RATE, AudioIn
from .tts import Send

log = logging.getLogger(__name__)


class AsrRequest:
    """transcribe + audio -> one transcript at audio-stop (the engine does not stream text)."""

    def __init__(self, engines: Engines, language: str) -> None:
        self.engines = engines
        self.language = language
        self.audio: AudioIn | None = None
        self.parts: list[np.ndarray] = []

    def begin(self, audio: AudioIn) -> None:
        self.audio = audio
        self.parts = []

    async def feed(self, data: bytes) -> None:
        assert self.audio is not None
        self.parts.append(self.audio.convert(data))

    async def end(self, send: Send) -> None:
        if self.audio is not None:
            self.parts.append(self.audio.finish())
        samples = np.concatenate(self.parts) if self.parts else np.zeros(0, np.float32)
        self.parts = []
        text = await asyncio.wrap_future(self.engines.transcribe(samples))
        log.info("wyoming transcript (%.1f s): %r", len(samples) / TARGET_RATE, text)
        await send(Transcript(text=text, language=self.language).event())


class WakeStream:
    """detect + audio -> detection (as soon as the phrase is heard) or not-detected at audio-stop.

    The stream has its own wake engine (its VAD state belongs to this stream); an asr-match engine
    transcribes through the shared ASR at Wyoming priority.
    """

    def __init__(self, engines: Engines, name: str, slots: asyncio.Semaphore) -> None:
        self.engines = engines
        self.name = name
        self.slots = slots
        """Bounds the wake engines out at once (each about 12 MB for asr-match); a stream waits for one."""
        self.engine: Any = None
        self.audio: AudioIn | None = None
        self.fed = 0
        self.detections = 0

    async def begin(self, audio: AudioIn) -> None:
        self.audio = audio
        self.fed = 0
        self.detections = 0
        if self.engine is None:
            await self.slots.acquire()
            try:
                self.engine = await asyncio.to_thread(self.engines.borrow_wake)
            except BaseException:
                self.slots.release()
                raise
        self.engine.restart(0)

    async def feed(self, data: bytes, send: Send) -> None:
        assert self.audio is not None and self.engine is not None
        frame = self.audio.convert(data)
        hit = await asyncio.to_thread(self.engine.accept, frame) if len(frame) else None
        self.fed += len(frame)
        if hit is not None:
            await self._detected(hit, send)

    async def _detected(self, hit: Any, send: Send) -> None:
        self.detections += 1
        log.info("wyoming wake: %r at %.2f s", getattr(hit, "text", ""), hit.at_s)
        await send(Detection(name=self.name, timestamp=int(round(hit.end_s * 1000))).event())
        self.engine.restart(self.fed)

    async def end(self, send: Send) -> None:
        assert self.audio is not None and self.engine is not None
        tail = self.audio.finish()
        hit = None
        if len(tail):
            hit = await asyncio.to_thread(self.engine.accept, tail)
            self.fed += len(tail)
        if hit is None:
            hit = await asyncio.to_thread(self.engine.flush)
        if hit is not None:
            await self._detected(hit, send)
        if self.detections == 0:
            await send(NotDetected().event())

    def close(self) -> None:
        """The connection is gone: its wake engine goes back to the pool for the next stream."""
        engine, self.engine = self.engine, None
        if engine is not None:
            self.engines.return_wake(engine)
            self.slots.release()


async def answer(engines: Engines, text: str, send: Send, max_chars: int) -> None:
    """transcript -> handled (a tool's answer), or handled-start/-chunk/-stop as the LLM's answer comes
    and then handled with the whole text (the protocol's plain event, which clients that do not
    stream, Home Assistant among them, wait for); not-handled with the reason when there is no answer."""
    text = text.strip()
    if not text:
        await send(NotHandled(text="the transcript is empty: nothing to answer").event())
        return
    if len(text) > max_chars:
        await send(NotHandled(text=f"the transcript has {len(text)} characters; at most {max_chars} are "
                                   "answered (wyoming.max_text_chars)").event())
        return
    from rkvoice.turn import Turn

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    turn = Turn(text=text)
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
        await _relay(queue, send, preempted, text)
    except BaseException:
        turn.cancel("client gone")  # a client gone mid-answer (or a cancelled task) stops the LLM
        raise
    finally:
        await asyncio.shield(worker)
        turn.finish()


async def _relay(queue: asyncio.Queue[tuple[str, Any]], send: Send, preempted: threading.Event, text: str) -> None:
    route = ""
    parts: list[str] = []
    streaming = False
    while True:
        kind, value = await queue.get()
        if kind == "route":
            route = value
            if route == "llm":
                streaming = True
                await send(HandledStart().event())
        elif kind == "delta":
            parts.append(value)
            if streaming:
                await send(HandledChunk(text=value).event())
        elif kind == "error":
            reason = value.message if isinstance(value, RkvoiceError) else f"the answer failed: {value}"
            if streaming:
                await send(HandledStop().event())
            await send(NotHandled(text=reason).event())
            return
        elif kind == "end":
            reason = "the local assistant needed the model" if preempted.is_set() else value
            if streaming:
                await send(HandledStop().event())
            if reason:
                await send(NotHandled(text=f"the answer stopped early: {reason}").event())
            elif "".join(parts).strip():
                await send(Handled(text="".join(parts)).event())
            else:
                await send(NotHandled(text=f"no answer for {text!r}").event())
            return
        elif kind == "done":  # the worker ended before reaching the model (preempted while waiting)
            await send(NotHandled(text="the local assistant needed the model; ask again").event())
            return

