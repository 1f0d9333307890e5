"""A connection's audio in: a transcription (transcribe + audio) or a wake-detect stream (detect + audio),
on the shared engines, off the event loop, behind each engine's gate at Wyoming priority."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart
from wyoming.wake import Detect, Detection, NotDetected

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.gate import Engines
from rkvoice.timeline import Ev

from .audio import TARGET_RATE, AudioIn
from .context import Context, Requests, Send
from .languages import primary

log = logging.getLogger(__name__)


class AsrRequest:
    """transcribe + audio -> one transcript at audio-stop (the engine does not stream text)."""

    def __init__(self, engines: Engines, language: str, requests: Requests) -> None:
        self.engines = engines
        self.language = language
        self.requests = requests
        self.audio: AudioIn | None = None
        self.parts: list[np.ndarray] = []

    async def begin(self, audio: AudioIn) -> None:
        self.audio = audio
        self.parts = []

    async def feed(self, data: bytes, send: Send) -> None:
        assert self.audio is not None
        self.parts.append(self.audio.convert(data))

    async def end(self, send: Send) -> None:
        assert self.audio is not None
        samples, self.parts = np.concatenate([*self.parts, self.audio.finish()]), []
        with self.requests.turn("transcription") as turn:
            tl = turn.timeline
            tl.mark(Ev.SPEECH_END, audio_s=round(len(samples) / TARGET_RATE, 3))
            t0 = tl.clock.now()
            job = self.engines.decode("transcribe", samples)
            turn.on_cancel(lambda _: job.cancel())  # still queued behind another request: it never runs
            turn.text = await asyncio.wrap_future(job)
            tl.mark(Ev.ASR_DONE, text=turn.text, asr_ms=round((tl.clock.now() - t0) * 1000.0, 3))
        await send(Transcript(text=turn.text, language=self.language).event())


class WakeStream:
    """detect + audio -> detection (as soon as the phrase is heard) or not-detected at audio-stop, on a
    wake engine of the stream's own (its VAD state belongs to it)."""

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
        assert self.audio is not None
        await self._accept(self.audio.convert(data), send)

    async def _accept(self, frame: np.ndarray, send: Send) -> bool:
        """Feed ``frame`` to the wake engine; True when it heard the phrase."""
        hit = await asyncio.to_thread(self.engine.accept, frame) if len(frame) else None
        self.fed += len(frame)
        if hit is not None:
            await self._detected(hit, send)
        return hit is not None

    async def _detected(self, hit: Any, send: Send) -> None:
        self.detections += 1
        log.info("wyoming wake: %r at %.2f s", getattr(hit, "text", ""), hit.at_s)
        await send(Detection(name=self.name, timestamp=int(round(hit.end_s * 1000))).event())
        self.engine.restart(self.fed)

    async def end(self, send: Send) -> None:
        assert self.audio is not None
        if not await self._accept(self.audio.finish(), send):
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


class Listening:
    """The connection's audio-in state: the request the audio is for (none: a transcription), its stream,
    and whether it is dropped up to audio-stop (a refused request, a bad or changing format)."""

    def __init__(self, ctx: Context, requests: Requests, send: Send) -> None:
        self.ctx = ctx
        self.requests = requests
        self.send = send
        self.listener: AsrRequest | WakeStream | None = None
        self.wake: WakeStream | None = None
        self.audio: AudioIn | None = None
        self.discard = False
        self.refused = False

    def request(self, request: Transcribe | Detect) -> None:
        self.listener, self.refused = None, True  # a refused request's audio is not transcribed
        self.listener = (AsrRequest(self.ctx.engines, self._asr_language(request), self.requests)
                         if isinstance(request, Transcribe) else self._wake_stream(request))
        self.refused = False

    async def start(self, fmt: AudioStart | AudioChunk) -> None:
        if self.refused:
            return
        self.audio, self.discard = None, True  # until the format is known to be good
        if self.listener is None:
            self.listener = AsrRequest(self.ctx.engines, "zh", self.requests)
        self.audio, self.discard = AudioIn(fmt.rate, fmt.width, fmt.channels, self.ctx.wcfg.max_audio_s), False
        await self.listener.begin(self.audio)

    async def chunk(self, chunk: AudioChunk) -> None:
        if self.discard or self.refused:
            return
        if self.audio is None:
            await self.start(chunk)
        assert self.audio is not None and self.listener is not None
        if not self.audio.same_format(chunk.rate, chunk.width, chunk.channels):
            self.discard = True
            raise RkvoiceError(
                Stage.WYOMING, "bad-audio-format",
                f"audio-chunk format {chunk.rate} Hz/{chunk.width} B/{chunk.channels} ch differs from the stream's "
                f"{self.audio.rate} Hz/{self.audio.width} B/{self.audio.channels} ch; the stream is dropped",
            )
        await self.listener.feed(chunk.audio, self.send)

    async def stop(self) -> None:
        listener, audio, discarded = self.listener, self.audio, self.discard or self.refused
        self.listener, self.audio, self.discard, self.refused = None, None, False, False
        if listener is None or discarded:
            return
        if audio is None:
            raise RkvoiceError(Stage.WYOMING, "no-audio", "audio-stop came before any audio; send audio-start and chunks")
        await listener.end(self.send)

    def close(self) -> None:
        if self.wake is not None:
            self.wake.close()

    def _asr_language(self, request: Transcribe) -> str:
        """The language the transcript is labelled with: the request's own code (any region or
        script variant of a served language), else the engine's first."""
        served = list(self.ctx.engines.asr.languages)
        if not request.language:
            return served[0]
        if primary(request.language) not in served:
            raise RkvoiceError(Stage.WYOMING, "unknown-language",
                               f"transcription in {request.language!r} is not served; languages: {', '.join(served)} "
                               "(with any region or script, e.g. zh-CN)")
        return request.language

    def _wake_stream(self, request: Detect) -> WakeStream:
        if request.names and self.ctx.wake_name not in request.names:
            raise RkvoiceError(Stage.WYOMING, "unknown-wake-word",
                               f"wake word(s) {', '.join(request.names)} not served; the wake word is "
                               f"{self.ctx.wake_name} ({self.ctx.cfg.hear.wake_phrase})")
        if self.wake is None:
            self.wake = WakeStream(self.ctx.engines, self.ctx.wake_name, self.ctx.wake_slots)
        return self.wake
