"""Speech for Wyoming clients: synthesize, and streamed synthesize-start/-chunk/-stop, as turns.

The text goes the one speech path (``rkvoice.pieces``) one piece at a time on the TTS worker, behind
the shared TTS gate at Wyoming priority; each piece's audio is sent as soon as it is ready, and a
streamed text is cut as it arrives (``StreamChunker``).
"""

from __future__ import annotations

import asyncio
import logging

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.tts import Synthesize, SynthesizeStart, SynthesizeStopped, SynthesizeVoice

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.pieces import Pieces
from rkvoice.text.stream_chunker import StreamChunker
from rkvoice.timeline import Ev
from rkvoice.tts.base import TtsEngine
from rkvoice.turn import Turn

from .context import Context, Requests, Send

log = logging.getLogger(__name__)

CHUNK_MS = 100  # audio per audio-chunk event
QUIET_S = 0.3
"""A streamed text quiet this long has its complete clauses spoken without waiting for more."""
Voice = tuple[TtsEngine, int]
"""A chosen voice: its loaded engine and the speaker id."""


class SpeechOut:
    """One synthesis answer of ``turn``: audio-start with the first piece, audio-chunks, audio-stop."""

    def __init__(self, ctx: Context, voice: Voice, turn: Turn, send: Send) -> None:
        engine, sid = voice
        self.engine = engine
        self.worker = ctx.engines.tts_worker
        self.pieces = Pieces(ctx.engines.voice_view(engine), ctx.cfg, turn, block_ms=CHUNK_MS, fade_ms=10.0, sid=sid)
        self.turn = turn
        self.send = send
        self.rate = 0

    async def say(self, text: str) -> None:
        """Cut ``text`` and send each piece's audio as soon as it is synthesised (off the event loop)."""
        if text.strip() and not self.turn.timeline.find(Ev.TEXT_READY):
            self.turn.timeline.mark(Ev.TEXT_READY, turn=self.turn.id)
        steps = self.pieces.pieces(text)
        while (piece := await asyncio.wrap_future(self.worker.submit(lambda: next(steps, None)))) is not None:
            if not self.rate:
                self.rate = piece.rate
                await self.send(AudioStart(rate=self.rate, width=2, channels=1).event())
                self.turn.timeline.mark(Ev.AUDIO_FIRST, turn=self.turn.id)
            for block in piece.blocks:
                await self.send(AudioChunk(rate=self.rate, width=2, channels=1, audio=block.tobytes()).event())

    async def finish(self) -> None:
        if not self.rate:  # nothing speakable: an empty stream at the voice's rate
            self.rate = int(self.engine.sample_rate)
            await self.send(AudioStart(rate=self.rate, width=2, channels=1).event())
        await self.send(AudioStop().event())


class SpeechStream:
    """A streamed synthesis on a task of its own: text arrives by ``feed``, is cut by the StreamChunker
    and synthesised piece by piece, in order. With no voice named, the first text chooses it. Text
    quiet for ``QUIET_S`` has its complete clauses spoken (``StreamChunker.cut_early``, as the local answerer)."""

    def __init__(self, synthesis: Synthesis, request: SynthesizeStart, chosen: Voice | None) -> None:
        self.synthesis = synthesis
        self.request = request
        self.chosen = chosen
        self.chars = 0
        self.texts: asyncio.Queue[str | None] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(), name="wyoming synthesis")

    async def _run(self) -> None:
        with self.synthesis.requests.turn("streamed synthesis") as turn:
            first = ""
            item: str | None = ""
            while item is not None and not first.strip():  # the voice follows the first text
                item = await self.texts.get()
                first += item or ""
            voice = self.chosen or await self.synthesis.voice(self.request.voice, first)
            out = SpeechOut(self.synthesis.ctx, voice, turn, self.synthesis.send)
            cutter = StreamChunker(out.pieces.first, out.pieces.later)
            ready = cutter.feed(first) if item is not None else []
            ended, armed = item is None, True
            turn.text = first
            while True:
                for piece in ready:
                    await out.say(piece)
                if ended:
                    break
                wait = QUIET_S if armed and cutter.pending.strip() else None
                try:
                    item = await asyncio.wait_for(self.texts.get(), wait)
                except TimeoutError:  # the text has gone quiet: what is complete of it goes now
                    ready, armed = cutter.cut_early(), False
                    continue
                armed, ended = True, item is None
                turn.text += item or ""
                ready = cutter.flush() if item is None else cutter.feed(item)
            await out.finish()

    def feed(self, text: str) -> None:
        self.texts.put_nowait(text)

    async def stop(self) -> None:
        self.texts.put_nowait(None)
        await self.task


class Synthesis:
    """A connection's speech out: one ``synthesize`` at a time, or one streamed synthesis."""

    def __init__(self, ctx: Context, requests: Requests, send: Send) -> None:
        self.ctx = ctx
        self.requests = requests
        self.send = send
        self.stream: SpeechStream | None = None
        self.max_chars = ctx.wcfg.max_text_chars

    async def voice(self, voice: SynthesizeVoice | None, text: str) -> Voice:
        """The requested voice (loaded off the event loop the first time) and speaker id."""
        voices = self.ctx.voices
        asked = voice or SynthesizeVoice()
        name = voices.choose(asked.name, asked.language, text)
        engine = await asyncio.to_thread(voices.engine, name)
        return engine, voices.sid(engine, asked.speaker)

    async def synthesize(self, request: Synthesize) -> None:
        if self.stream is not None:  # while streaming, synthesize repeats the streamed text: skipped
            return
        if len(request.text) > self.max_chars:
            raise RkvoiceError(Stage.WYOMING, "text-too-long",
                               f"the text has {len(request.text)} characters; at most {self.max_chars} "
                               "are synthesised at once (wyoming.max_text_chars)")
        with self.requests.turn("synthesis", request.text) as turn:
            out = SpeechOut(self.ctx, await self.voice(request.voice, request.text), turn, self.send)
            await out.say(request.text)
            await out.finish()

    async def start(self, request: SynthesizeStart) -> None:
        if self.stream is not None:
            raise RkvoiceError(Stage.WYOMING, "already-streaming",
                               "synthesize-start during a streamed synthesis; send synthesize-stop first")
        named = request.voice  # named: checked (and loaded) now; else the first text decides
        chosen = await self.voice(named, "") if named is not None and (named.name or named.language) else None
        self.stream = SpeechStream(self, request, chosen)

    def chunk(self, text: str) -> None:
        stream = self.stream
        if stream is None:
            raise RkvoiceError(Stage.WYOMING, "not-streaming", "synthesize-chunk without synthesize-start")
        if stream.task.done():  # the synthesis failed: its error is reported at synthesize-stop
            return
        stream.chars += len(text)
        if stream.chars > self.max_chars:
            self.requests.cancel("text-too-long")
            stream.task.cancel()
            self.stream = None
            raise RkvoiceError(Stage.WYOMING, "text-too-long",
                               f"the streamed text passed {self.max_chars} characters "
                               "(wyoming.max_text_chars); the synthesis is dropped")
        stream.feed(text)

    async def stop(self) -> None:
        stream, self.stream = self.stream, None
        if stream is None:
            raise RkvoiceError(Stage.WYOMING, "not-streaming", "synthesize-stop without synthesize-start")
        await stream.stop()
        await self.send(SynthesizeStopped().event())

    def close(self, peer: str) -> None:
        """The connection is over: a streamed synthesis still running is stopped."""
        stream, self.stream = self.stream, None
        if stream is None:
            return
        if not stream.task.done():
            stream.task.cancel()
        elif not stream.task.cancelled() and stream.task.exception() is not None:
            log.info("wyoming %s: a streamed synthesis ended in %s", peer, stream.task.exception())
