"""A connection's audio in: a transcription (transcribe + audio) or a wake-detect stream (detect + audio),
on the shared engines, off the event loop, behind each engine's gate at Wyoming priority."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import numpy as np
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.wake import Detect, Detection, NotDetected

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.pinyin_match import PhraseMatcher
from rkvoice.hear.wake import WakeEngine, WakeHit
from rkvoice.home.vocab import HomeNames
from rkvoice.timeline import Ev

from .audio import TARGET_RATE, AudioIn
from .context import Context, Requests, Send
from .engines import Engines
from .handoff import KEEP_S, Heard
from .languages import primary

log = logging.getLogger(__name__)


def without_phrase(text: str, phrase: PhraseMatcher, host: str = "") -> str:
    """``text`` without a leading wake phrase, when a request follows it ("小智小智，打开客厅灯" ->
    "打开客厅灯"). A satellite that wakes on its own microphone streams from the phrase's segment, so a
    request said in one breath reaches the transcription with the phrase in front, and Home
    Assistant's sentences match only the command. The phrase alone is left as it is."""
    found = phrase.match(text.strip())
    if found is None or not any(ch.isalnum() for ch in found.remainder):
        return text
    log.info("wyoming %s: the wake phrase in front of %r taken off the transcript", host, found.remainder)
    return found.remainder


class AsrRequest:
    """transcribe + audio -> one transcript at audio-stop (the engine does not stream text). The audio
    the host's detect stream heard after the wake phrase goes in front (handoff.py). With the home's
    names (``home_assistant.url`` set), a home command's misheard names are put right: Home
    Assistant's agent matches names exactly."""

    def __init__(self, engines: Engines, language: str, requests: Requests, handoff: dict[str, Heard], host: str,
                 phrase: PhraseMatcher, names: HomeNames | None = None) -> None:
        self.engines = engines
        self.phrase = phrase
        self.names = names
        self.language = language
        self.requests = requests
        self.handoff = handoff
        self.host = host
        self.parts: list[np.ndarray] = []
        self.first = b""
        self.started_at = 0.0

    async def begin(self) -> None:
        self.parts = []
        self.first = b""
        self.started_at = self.requests.clock.now()

    async def feed(self, audio: AudioIn, data: bytes, send: Send) -> None:
        self.first = self.first or data
        self.parts.append(audio.convert(data))

    async def end(self, audio: AudioIn, send: Send) -> None:
        fmt = (audio.rate, audio.width, audio.channels)
        held = self.handoff.pop(self.host, None)  # taken once, by the host's next transcription
        before = held.take(self.started_at, fmt, self.first) if held is not None else b""
        if before:
            log.info("wyoming %s: the %.2f s heard after the wake phrase go before the transcription", self.host,
                     len(before) / (fmt[1] * fmt[2]) / fmt[0])
            self.parts.insert(0, AudioIn(*fmt, KEEP_S + 1.0).convert(before, last=True))
        samples, self.parts = np.concatenate([*self.parts, audio.finish()]), []
        with self.requests.turn("transcription") as turn:
            tl = turn.timeline
            tl.mark(Ev.SPEECH_END, audio_s=round(len(samples) / TARGET_RATE, 3))
            t0 = tl.clock.now()
            job = self.engines.transcribe(samples)
            turn.on_cancel(lambda _: job.cancel())  # still queued behind another request: it never runs
            turn.text = without_phrase(await asyncio.wrap_future(job), self.phrase, self.host)
            if self.names is not None:
                turn.text = self.names.correct(turn.text)
            tl.mark(Ev.ASR_DONE, text=turn.text, asr_ms=round((tl.clock.now() - t0) * 1000.0, 3))
        await send(Transcript(text=turn.text, language=self.language).event())


class WakeStream:
    """detect + audio -> detection (as soon as the phrase is heard) or not-detected at audio-stop, on a
    wake engine of the stream's own (its VAD state belongs to it)."""

    def __init__(self, engines: Engines, name: str, slots: asyncio.Semaphore,
                 on_detected: Callable[[float], None]) -> None:
        self.engines = engines
        self.name = name
        self.slots = slots
        """Bounds the wake engines out at once (each about 12 MB for asr-match); a stream waits for one."""
        self.on_detected = on_detected
        """Called with the detection's phrase end (seconds into the stream) before it is sent."""
        self.engine: WakeEngine | None = None
        self.fed = 0
        self.detections = 0

    async def begin(self) -> None:
        self.fed = 0
        self.detections = 0
        if self.engine is None:
            await self.slots.acquire()
            try:
                self.engine = await asyncio.to_thread(self.engines.borrow_wake)
            except BaseException:
                self.slots.release()
                raise
        self._engine().restart(0)

    def _engine(self) -> WakeEngine:
        assert self.engine is not None, "begin() first"
        return self.engine

    async def feed(self, audio: AudioIn, data: bytes, send: Send) -> None:
        await self._accept(audio.convert(data), send)

    async def _accept(self, frame: np.ndarray, send: Send) -> bool:
        """Feed ``frame`` to the wake engine; True when it heard the phrase."""
        hit = await asyncio.to_thread(self._engine().accept, frame) if len(frame) else None
        self.fed += len(frame)
        if hit is not None:
            await self._detected(hit, send)
        return hit is not None

    async def _detected(self, hit: WakeHit, send: Send) -> None:
        self.detections += 1
        log.info("wyoming wake: %r at %.2f s", hit.text, hit.at_s)
        self.on_detected(hit.end_s)
        await send(Detection(name=self.name, timestamp=int(round(hit.end_s * 1000))).event())
        self._engine().restart(self.fed)

    def skip(self, frame: np.ndarray) -> None:
        """Audio that is not listened to (it came while the last detection was decided): the stream's
        clock moves on."""
        self.fed += len(frame)
        self._engine().restart(self.fed)

    async def end(self, audio: AudioIn, send: Send) -> None:
        if not await self._accept(audio.finish(), send):
            hit = await asyncio.to_thread(self._engine().flush)
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

    def __init__(self, ctx: Context, requests: Requests, send: Send, host: str = "") -> None:
        self.ctx = ctx
        self.requests = requests
        self.send = send
        self.host = host
        """The client's host: a transcription from it may follow its detection (handoff.py)."""
        self.heard: Heard | None = None
        """The raw audio of the stream the reader is in, as read (ahead of the handling)."""
        self._taped = self._started = 0
        """Audio streams the reader has begun, and the handling: equal while both are in the same one."""
        self._taping = False
        """The reader is inside a stream (from its audio-start or first chunk to its audio-stop)."""
        self._detecting = False
        """The last request the reader read was a detect: its stream's audio is taped."""
        self._handled = self._skip_to = 0
        """Bytes of the stream handled; up to ``_skip_to`` the wake engine skips them: what had come
        while it decided on a detection (Home Assistant has moved on to STT; the tape has them)."""
        self.listener: AsrRequest | WakeStream | None = None
        self.wake: WakeStream | None = None
        self.audio: AudioIn | None = None
        self.discard = False
        self.refused = False

    def request(self, request: Transcribe | Detect) -> None:
        self.listener, self.refused = None, True  # a refused request's audio is not transcribed
        self.listener = (AsrRequest(self.ctx.engines, self._asr_language(request), self.requests,
                                    self.ctx.handoff, self.host, self.ctx.phrase, self.ctx.names)
                         if isinstance(request, Transcribe) else self._wake_stream(request))
        self.refused = False

    async def start(self, fmt: AudioStart | AudioChunk) -> None:
        if self.refused:
            return
        self._started += 1
        self._handled = self._skip_to = 0
        self.audio, self.discard = None, True  # until the format is known to be good
        if self.listener is None:
            self.listener = AsrRequest(self.ctx.engines, "zh", self.requests, self.ctx.handoff, self.host,
                                       self.ctx.phrase, self.ctx.names)
        self.audio, self.discard = AudioIn(fmt.rate, fmt.width, fmt.channels, self.ctx.wcfg.max_audio_s), False
        await self.listener.begin()

    async def chunk(self, chunk: AudioChunk) -> None:
        if self.discard or self.refused:
            return
        if self.audio is None:
            await self.start(chunk)
        assert self.audio is not None and self.listener is not None
        if (chunk.rate, chunk.width, chunk.channels) != (self.audio.rate, self.audio.width, self.audio.channels):
            self.discard = True
            raise RkvoiceError(
                Stage.WYOMING, "bad-audio-format",
                f"audio-chunk format {chunk.rate} Hz/{chunk.width} B/{chunk.channels} ch differs from the stream's "
                f"{self.audio.rate} Hz/{self.audio.width} B/{self.audio.channels} ch; the stream is dropped",
            )
        self._handled += len(chunk.audio)
        if self._handled <= self._skip_to and isinstance(self.listener, WakeStream):
            self.listener.skip(self.audio.convert(chunk.audio))
            return
        await self.listener.feed(self.audio, chunk.audio, self.send)

    async def stop(self) -> None:
        listener, audio, discarded = self.listener, self.audio, self.discard or self.refused
        self.listener, self.audio, self.discard, self.refused = None, None, False, False
        if listener is None or discarded:
            return
        if audio is None:
            raise RkvoiceError(Stage.WYOMING, "no-audio", "audio-stop came before any audio; send audio-start and chunks")
        await listener.end(audio, self.send)

    def close(self) -> None:
        if self.wake is not None:
            self.wake.close()

    def tape(self, event: Event) -> None:
        """Every event as the reader reads it (audio the handling drops, once the client has left,
        included): a detect stream's audio is taped, and a detection hands the audio after the phrase
        to the transcription after it."""
        if Detect.is_type(event.type) or Transcribe.is_type(event.type):
            self._detecting = Detect.is_type(event.type)
        elif AudioStop.is_type(event.type):
            self._taping = False
        elif AudioStart.is_type(event.type) or (AudioChunk.is_type(event.type) and not self._taping):
            self._taped, self._taping = self._taped + 1, True
            fmt = tuple(event.data.get(k) for k in ("rate", "width", "channels"))
            valid = self._detecting and all(isinstance(v, int) and v > 0 for v in fmt)
            self.heard = Heard((fmt[0], fmt[1], fmt[2])) if valid else None  # type: ignore[arg-type]
        if AudioChunk.is_type(event.type) and self.heard is not None and event.payload:
            if tuple(event.data.get(k) for k in ("rate", "width", "channels")) == self.heard.fmt:
                self.heard.add(event.payload)

    def _detected(self, end_s: float) -> None:
        if self.heard is not None and self._taped == self._started:
            self.heard.detected(end_s, self.ctx.clock.now())
            self.ctx.handoff[self.host] = self.heard
            self._skip_to = self.heard.taped

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
            self.wake = WakeStream(self.ctx.engines, self.ctx.wake_name, self.ctx.wake_slots, self._detected)
        return self.wake
