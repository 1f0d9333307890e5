"""What the satellite plays, one thing after another on the board's player: Home Assistant's audio
streams (a reply, a timer alarm, an announcement: ``audio-start`` / ``audio-chunk`` / ``audio-stop``),
the board's own words (a finished timer, said by rkvoice's voice through the Speaker) and the wake
acknowledgement (``hear.ack``).

The player is the speak stage's, wrapped in the echo reference tap (rkvoice.hear.echo.ReferenceTap),
so what HA's voice says is cancelled from the microphone like a local answer. One thread plays; the
protocol side only queues. ``clear()`` (barge-in, shutdown) drops what is queued and silences the
player at once. ``on_played(stream)`` is called once a stream has played out (or was cut): the
satellite then sends ``played``.
"""

from __future__ import annotations

import enum
import itertools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rkvoice.audio.players import Player
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.speaker import Speaker

log = logging.getLogger(__name__)

MIN_RATE, MAX_RATE = 8000, 48000
KEEP = 64
"""Streams and words remembered (a daemon runs for weeks)."""
SPEECH_WAIT_S = 60.0
"""Longest the board's own words may take to play (a stuck speaker does not hold the queue)."""


class StreamKind(enum.StrEnum):
    REPLY = "reply"
    """The answer of a run (after its ``synthesize``, or streamed before it)."""
    ANNOUNCE = "announce"
    """Audio with no run waiting for it: ``assist_satellite.announce``."""


@dataclass(frozen=True)
class Begin:
    stream: Stream


@dataclass(frozen=True)
class Chunk:
    stream: Stream
    data: np.ndarray
    """int16 samples, channels interleaved."""


@dataclass(frozen=True)
class End:
    stream: Stream


@dataclass(frozen=True)
class Say:
    id: int
    text: str


@dataclass(frozen=True)
class Cue:
    samples: np.ndarray
    """float32 at the player's rate."""
    done: Callable[[], None] | None = None
    """Called once the samples were handed to the player (or dropped by a clear)."""


@dataclass(frozen=True)
class Stop:
    pass


Command = Begin | Chunk | End | Say | Cue | Stop
"""What the playing thread is told, in order."""


@dataclass
class Stream:
    """One audio stream Home Assistant sent."""

    id: int
    rate: int
    channels: int
    kind: StreamKind
    samples: int = 0
    """Samples (per channel) received."""
    first_audio_at: float | None = None
    """Clock time the first block went to the player."""
    played_at: float | None = None
    cut: bool = False
    """Cleared before it played out (barge-in)."""
    ended: threading.Event = field(default_factory=threading.Event)

    @property
    def audio_s(self) -> float:
        return self.samples / self.rate


class Playback:
    """Plays streams and words in the order they were queued, on ``player`` (opened, mono int16 at
    ``player.rate``); ``speaker`` (loaded, on the same player) says the board's own words."""

    def __init__(self, player: Player, speaker: Speaker | None, block_ms: int = 20, clock: Clock | None = None,
                 on_played: Callable[[Stream], None] | None = None,
                 on_said: Callable[[int], None] | None = None) -> None:
        self.player = player
        self.speaker = speaker
        self.block = max(1, player.rate * block_ms // 1000)
        self.clock = clock or MonotonicClock()
        self.on_played = on_played
        self.on_said = on_said
        """Called with ``say``'s id once the words were said (or dropped by a clear)."""
        self.streams: list[Stream] = []
        self.said: list[str] = []
        self._ids = itertools.count(1)
        self._q: queue.Queue[tuple[int, Command]] = queue.Queue()
        self._generation = 0  # bumped by clear(): queued items of an older generation are dropped
        self._lock = threading.Lock()
        self._busy = 0  # items queued and not yet done
        self._thread: threading.Thread | None = None
        self._resampler: Any = None
        self._pending = np.zeros(0, np.float32)

    # -- the protocol side -------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="rkvoice-satellite-play", daemon=True)
            self._thread.start()

    def begin(self, rate: int, width: int, channels: int, kind: StreamKind) -> Stream | None:
        """A new stream, or None (with a warning) for a format the player cannot take."""
        if width != 2 or channels not in (1, 2) or not MIN_RATE <= rate <= MAX_RATE:
            log.warning("satellite: Home Assistant sent audio as %d Hz, %d bytes, %d channels; only 16-bit mono or "
                        "stereo at %d-%d Hz is played: ignored", rate, width, channels, MIN_RATE, MAX_RATE)
            return None
        stream = Stream(next(self._ids), rate, channels, kind)
        with self._lock:
            self.streams.append(stream)
            del self.streams[:-KEEP]
        self._put(Begin(stream))
        return stream

    def chunk(self, stream: Stream, pcm: bytes) -> None:
        data = np.frombuffer(pcm[: len(pcm) - len(pcm) % (2 * stream.channels)], "<i2")
        stream.samples += len(data) // stream.channels
        self._put(Chunk(stream, data))

    def end(self, stream: Stream) -> None:
        """No more audio in ``stream``: once it has played, ``on_played(stream)``."""
        self._put(End(stream))

    def say(self, text: str) -> int:
        """The board's own words, after what is queued (a finished timer); their id for ``on_said``."""
        sound_id = next(self._ids)
        self._put(Say(sound_id, text))
        return sound_id

    def cue(self, samples: np.ndarray, done: Callable[[], None] | None = None) -> None:
        """A sound at the player's rate (float32), after what is queued: the wake acknowledgement, or a
        piece of music (rkvoice.satellite.media: ``done()`` once it is with the player or dropped, so
        the music keeps only a few pieces queued and what comes after it waits no longer)."""
        if len(samples):
            self._put(Cue(samples, done))

    def clear(self, reason: str = "barge-in") -> None:
        """Drop everything queued and silence the player now; the streams not ended yet are cut (their
        audio still to come is dropped too) and still get ``on_played``."""
        with self._lock:
            self._generation += 1
            for stream in self.streams:
                if not stream.ended.is_set():
                    stream.cut = True
        if self.speaker is not None:
            self.speaker.cancel_all(reason)
        self.player.clear()
        log.info("satellite: playback cleared (%s)", reason)

    @property
    def playing(self) -> bool:
        """Whether anything is queued or playing: an item not played yet, or a stream HA has not ended
        or that has not played out (its audio may all be with the player, the queue empty)."""
        with self._lock:
            return self._busy > 0 or any(not stream.ended.is_set() for stream in self.streams)

    def close(self) -> None:
        self.clear("shutdown")
        if self._thread is not None:
            self._q.put((-1, Stop()))
            self._thread.join(2.0)
            self._thread = None

    # -- the playing thread --------------------------------------------------------------------

    def _put(self, command: Command) -> None:
        with self._lock:
            self._busy += 1
            generation = self._generation
        self._q.put((generation, command))

    def _loop(self) -> None:
        while True:
            generation, command = self._q.get()
            if isinstance(command, Stop):
                return
            try:
                self._play(command, generation)
            except Exception:  # a broken player or voice fails this item, never the thread
                log.exception("satellite: playing %s failed", type(command).__name__)
            finally:
                with self._lock:
                    self._busy -= 1

    def _stale(self, generation: int) -> bool:
        with self._lock:
            return generation != self._generation

    def _play(self, command: Command, generation: int) -> None:
        stale = self._stale(generation)
        match command:
            case Begin():
                self._resampler, self._pending = None, np.zeros(0, np.float32)
            case Chunk(stream, data):
                if not (stale or stream.cut):
                    self._write(stream, data)
            case End(stream):
                self._finish(stream, generation)
            case Say(sound_id, text):
                try:
                    if not stale:
                        self._speak(text)
                finally:
                    if self.on_said is not None:
                        self.on_said(sound_id)
            case Cue(samples, done):
                try:
                    for i in range(0, 0 if stale else len(samples), self.block):
                        block = samples[i : i + self.block]
                        self.player.write(np.clip(np.round(block * 32767.0), -32768, 32767).astype(np.int16))
                finally:
                    if done is not None:
                        done()

    def _write(self, stream: Stream, data: np.ndarray) -> None:
        x = data.astype(np.float32).reshape(-1, stream.channels).mean(axis=1) / 32768.0
        if stream.rate != self.player.rate:
            if self._resampler is None:
                import soxr

                self._resampler = soxr.ResampleStream(stream.rate, self.player.rate, 1, dtype="float32")
            x = self._resampler.resample_chunk(x)
        self._pending = np.concatenate([self._pending, x])
        self._flush(stream, whole=False)

    def _flush(self, stream: Stream, whole: bool) -> None:
        n = len(self._pending) if whole else len(self._pending) - len(self._pending) % self.block
        out, self._pending = self._pending[:n], self._pending[n:]
        for i in range(0, len(out), self.block):
            block = np.clip(np.round(out[i : i + self.block] * 32767.0), -32768, 32767).astype(np.int16)
            if stream.first_audio_at is None:
                stream.first_audio_at = self.clock.now()
            self.player.write(block)

    def _finish(self, stream: Stream, generation: int) -> None:
        if not (self._stale(generation) or stream.cut):
            if self._resampler is not None:
                self._pending = np.concatenate([self._pending, self._resampler.resample_chunk(
                    np.zeros(0, np.float32), last=True)])
            self._flush(stream, whole=True)
            self.player.drain()  # a clear() cuts it short
        stream.cut = stream.cut or self._stale(generation)  # a clear() during the drain
        stream.played_at = self.clock.now()
        log.info("satellite: %s audio %d played (%.2f s%s)", stream.kind, stream.id, stream.audio_s,
                 ", cut" if stream.cut else "")
        stream.ended.set()
        if self.on_played is not None:
            self.on_played(stream)

    def _speak(self, text: str) -> None:
        self.said.append(text)
        del self.said[:-KEEP]
        if self.speaker is None:
            log.warning("satellite: no voice to say %r", text)
            return
        turn = self.speaker.speak(text)
        if not self.speaker.wait(turn, SPEECH_WAIT_S):
            log.warning("satellite: saying %r took over %.0f s; going on", text, SPEECH_WAIT_S)
