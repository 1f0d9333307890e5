"""The assistant's own voice on the microphone: what was played, and the hearing side that removes it.

- ``PlayedAudio``: the reference, the audio the speaker played at 16 kHz on a timeline of sample
  ticks (``tick = clock seconds * 16000``). Thread-safe: the player writes, the mic reads.
- ``ReferenceTap``: a Player wrapper that hands every block it writes, with the time it will be
  heard, to a ``PlayedAudio``; ``clear()`` (barge-in) erases the blocks that will never be heard.
- ``EchoFilter``: runs on each microphone frame before VAD/wake/ASR. With a canceller it cancels the
  reference, shifted by the estimated playback-to-capture delay; without one (``hear.aec: off``) it
  mutes the frame while the speaker plays and ``tail_s`` after (no self-wake, no barge-in either).
- ``EchoCancelledSource``: an AudioSource through an EchoFilter; live frames are placed on the
  timeline by their arrival time, a ``--file`` replay by sample count (its ``--reference`` starts with it).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.hear.aec import DELAY_TRUST, FRAME, RATE, Canceller, create_canceller, estimate_delay

log = logging.getLogger(__name__)

KEEP_S = 8.0  # reference audio kept behind the newest block
MAX_DELAY_S = 0.5  # the largest playback-to-capture delay looked for
FIRST_LOOK = 12000  # samples (0.75 s) of microphone for the first delay estimate
LEAD = 80  # samples (5 ms) the reference is kept ahead of the estimated delay: the filter is causal


class PlayedAudio:
    """The played audio on a tick timeline (16 kHz sample ticks)."""

    def __init__(self, keep_s: float = KEEP_S) -> None:
        self.keep = int(keep_s * RATE)
        """Ticks of audio kept behind the newest block's end (the player writes at most ~0.25 s ahead)."""
        self._lock = threading.Lock()
        self._chunks: deque[tuple[int, np.ndarray]] = deque()
        self.end_tick: int | None = None
        """Tick where the newest block ends (None: nothing played yet)."""

    def push(self, start_tick: int, samples: np.ndarray) -> None:
        """Add 16 kHz float32 ``samples`` heard from ``start_tick`` on; a block that starts within 1 ms
        of the previous one's end is placed right after it (no gap or overlap from rounding)."""
        if len(samples) == 0:
            return
        with self._lock:
            if self.end_tick is not None and abs(start_tick - self.end_tick) <= RATE // 1000:
                start_tick = self.end_tick
            self._chunks.append((start_tick, np.asarray(samples, np.float32)))
            self.end_tick = max(self.end_tick or 0, start_tick + len(samples))
            while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) < self.end_tick - self.keep:
                self._chunks.popleft()

    def cut(self, tick: int) -> None:
        """Erase everything from ``tick`` on (it was cleared before being heard)."""
        with self._lock:
            self._chunks = deque((start, data[: tick - start]) for start, data in self._chunks if start < tick)
            if self.end_tick is not None:  # every chunk kept now ends by ``tick``
                self.end_tick = min(self.end_tick, tick)

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether anything plays during ticks ``lo .. hi``."""
        with self._lock:
            for start, data in reversed(self._chunks):  # in time order: look from the newest back
                if start + len(data) <= lo:
                    return False
                if start < hi:
                    return True
            return False

    def read(self, start_tick: int, n: int) -> np.ndarray:
        """The reference for ticks ``start_tick .. start_tick + n`` (zeros where nothing played)."""
        out = np.zeros(n, np.float32)
        with self._lock:
            for start, data in reversed(self._chunks):  # in time order: look from the newest back
                if start + len(data) <= start_tick:
                    break
                lo, hi = max(start, start_tick), min(start + len(data), start_tick + n)
                if lo < hi:
                    out[lo - start_tick : hi - start_tick] = data[lo - start : hi - start]
        return out


class ReferenceTap:
    """Wraps a Player: each written block also goes to ``played``, at the time it will be heard.
    Everything else (name, rate, open, drain, close, abort) is the player's."""

    def __init__(self, player: Any, played: PlayedAudio, clock: Clock | None = None) -> None:
        self.player = player
        self.played = played
        self.clock = clock or MonotonicClock()
        self._dry_at: float | None = None
        self._next_tick = 0
        self._resampler: Any = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.player, name)

    def write(self, block: np.ndarray) -> None:
        self.player.write(block)  # returns once the device took it (paced players wait here)
        samples = np.asarray(block, np.float32) / 32768.0
        with self._lock:
            now = self.clock.now()
            if self._dry_at is None or self._dry_at < now:  # a new stretch of audio (or the device ran dry)
                self._dry_at, self._next_tick, self._resampler = now, round(now * RATE), None
            self._dry_at += len(samples) / self.rate
            if self.rate != RATE:  # one resampler per stretch: its chunks follow each other exactly
                if self._resampler is None:
                    import soxr

                    self._resampler = soxr.ResampleStream(self.rate, RATE, 1, dtype="float32")
                samples = self._resampler.resample_chunk(samples)
            self.played.push(self._next_tick, samples)
            self._next_tick += len(samples)

    def clear(self) -> None:
        with self._lock:
            self.played.cut(round(self.clock.now() * RATE))
            self._dry_at = None
            self._resampler = None
        self.player.clear()


class EchoFilter:
    """Removes (or, without a canceller, mutes) the assistant's own voice in microphone frames."""

    def __init__(self, played: PlayedAudio, canceller: Canceller | None, tail_s: float = 0.3) -> None:
        self.played = played
        self.canceller = canceller
        self.tail = int(tail_s * RATE)
        self.delay: int | None = None
        """Samples the echo lags the reference, estimated from the audio."""
        self._mic_hist = np.zeros(0, np.float32)
        self._hist_tick = 0
        self._since_estimate = 0
        self._in = np.zeros(0, np.float32)
        self._in_tick = 0
        self._out = np.zeros(FRAME, np.float32)  # one frame of latency: every call returns len(frame)

    def playing(self, start_tick: int, n: int) -> bool:
        """Whether the speaker plays (or its echo still rings) during ticks ``start_tick .. + n``."""
        lookback = self.tail + (int(MAX_DELAY_S * RATE) if self.delay is None else self.delay)
        return self.played.overlaps(start_tick - lookback, start_tick + n)

    def process(self, frame: np.ndarray, start_tick: int) -> np.ndarray:
        """``frame`` (float32, 16 kHz) heard from ``start_tick`` on, with the echo removed."""
        frame = np.asarray(frame, np.float32)
        if self.canceller is None:
            if self.playing(start_tick, len(frame)):
                return np.zeros_like(frame)
            return frame
        if not self.playing(start_tick - FRAME, len(frame) + FRAME):  # quiet: the frame as it is, no latency
            self._in = np.zeros(0, np.float32)
            self._out = np.zeros(FRAME, np.float32)
            return frame
        self._track_delay(frame, start_tick)
        if len(self._in) == 0:
            self._in_tick = start_tick
        self._in = np.concatenate([self._in, frame])
        done = []
        while len(self._in) >= FRAME:
            chunk, self._in = self._in[:FRAME], self._in[FRAME:]
            done.append(self._cancel(chunk, self._in_tick))
            self._in_tick += FRAME
        self._out = np.concatenate([self._out, *done]) if done else self._out
        out, self._out = self._out[: len(frame)], self._out[len(frame) :]
        return out

    def _cancel(self, chunk: np.ndarray, tick: int) -> np.ndarray:
        assert self.canceller is not None
        delay = self.delay if self.delay is not None else 0
        ref = self.played.read(tick - max(0, delay - LEAD), FRAME)
        to16 = lambda x: np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)  # noqa: E731
        return self.canceller.process(to16(chunk), to16(ref)).astype(np.float32) / 32768.0

    def _track_delay(self, frame: np.ndarray, start_tick: int) -> None:
        """Re-estimate the delay on the last 2 s of microphone + reference, once per second of playback."""
        window = 2 * RATE
        if start_tick != self._hist_tick + len(self._mic_hist):  # a gap: start the history again
            self._mic_hist = np.zeros(0, np.float32)
            self._hist_tick = start_tick
        self._mic_hist = np.concatenate([self._mic_hist, frame])[-window:]
        self._hist_tick = start_tick + len(frame) - len(self._mic_hist)
        self._since_estimate += len(frame)
        first = self.delay is None  # the first look comes early, on a shorter window
        if self._since_estimate < (RATE // 2 if first else RATE) or len(self._mic_hist) < (
                FIRST_LOOK if first else window):
            return
        max_lag = int(MAX_DELAY_S * RATE)
        ref = self.played.read(self._hist_tick - max_lag, len(self._mic_hist) + max_lag)
        if np.mean(np.abs(ref[max_lag:]) > 1e-4) < 0.3:
            return  # too little playback in the window to say anything
        self._since_estimate = 0
        mic_padded = np.concatenate([np.zeros(max_lag, np.float32), self._mic_hist])
        lag, prominence = estimate_delay(mic_padded, ref, max_lag)  # both start at the same tick
        if prominence < DELAY_TRUST:
            return
        if self.delay is None or abs(lag - self.delay) > RATE // 250:  # moved by more than 4 ms
            log.info("echo delay %.1f ms (was %s)", lag * 1000.0 / RATE,
                     "unknown" if self.delay is None else f"{self.delay * 1000.0 / RATE:.1f} ms")
            if self.canceller is not None:
                self.canceller.reset()
            self.delay = lag


class EchoCancelledSource:
    """An AudioSource whose frames pass through an EchoFilter.

    ``live``: frames are placed on the reference's timeline by their arrival on ``clock`` (the
    earliest arrival seen, less the audio before it, anchors the microphone: reads that come late
    do not shift it). Otherwise (a file replay) frame ticks count from 0, where the reference starts.
    """

    def __init__(self, source: Any, echo: EchoFilter, clock: Clock | None = None, live: bool = True) -> None:
        self.source = source
        self.echo = echo
        self.clock = clock or MonotonicClock()
        self.live = live
        self.sample_rate = source.sample_rate
        self._anchor: float | None = None

    def frames(self) -> Iterator[np.ndarray]:
        heard = 0
        for frame in self.source.frames():
            if self.live:
                start = self.clock.now() * RATE - len(frame) - heard
                self._anchor = start if self._anchor is None else min(self._anchor, start)
                tick = round(self._anchor) + heard
            else:
                tick = heard
            heard += len(frame)
            yield self.echo.process(frame, tick)

    def close(self) -> None:
        self.source.close()


def echo_filter(cfg: Config, played: PlayedAudio) -> EchoFilter | None:
    """The hearing side's filter as ``hear.aec`` and ``hear.echo_tail_ms`` say (a canceller, or the
    mute); None for ``external`` (the sound server cancels the echo: the microphone as it is)."""
    if cfg.hear.aec == "external":
        log.info("echo cancelled by the sound server (hear.aec=external): the microphone is heard as it is")
        return None
    f = EchoFilter(played, create_canceller(cfg.hear.aec), tail_s=cfg.hear.echo_tail_ms / 1000.0)
    if f.canceller is None:
        log.info("no echo canceller (hear.aec=%s): muting the microphone while speaking", cfg.hear.aec)
    else:
        log.info("echo canceller: %s", f.canceller.name)
    return f
