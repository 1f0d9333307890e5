"""Players that need no sound device (null, WAV file, tee), and the audio-time accounting the
real-time players share."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.atomic import FILE_MODE
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)


class PacedPlayer:
    """Audio-time accounting (``dry_at``: when the device runs out of audio) and waits that a ``clear()``
    interrupts, on the injected clock (a FakeClock advances instead of sleeping)."""

    def __init__(self, rate: int, clock: Clock, max_ahead_s: float | None = 0.25, latency_s: float = 0.0) -> None:
        self.rate = rate
        self._clock = clock
        self.max_ahead_s = max_ahead_s
        self.latency_s = latency_s
        self._cond = threading.Condition()
        self._cleared = threading.Event()  # set by clear(), then replaced: one per stretch of audio
        self.dry_at: float | None = None

    def _account(self, n_samples: int) -> tuple[float, float]:
        """Book ``n_samples`` on the device; returns (start, end) of their playback."""
        with self._cond:
            now = self._clock.now()
            start = now if self.dry_at is None or self.dry_at < now else self.dry_at
            self.dry_at = start + n_samples / self.rate
            return start, self.dry_at

    def _wait_until(self, deadline: float) -> bool:
        """Wait for the clock to reach ``deadline``; False if a clear() came first."""
        with self._cond:
            cleared = self._cleared
        while (remaining := deadline - self._clock.now()) > 0:
            if not self._clock.pause(remaining, cleared):
                return False
        return True

    def _pace(self) -> bool:
        """Block while more than ``max_ahead_s`` of audio is queued on the device; False if a clear() cut
        the wait (the block being written is dropped, as the barge-in wants)."""
        if self.max_ahead_s is not None and self.dry_at is not None:
            return self._wait_until(self.dry_at - self.max_ahead_s)
        return True

    def clear(self) -> None:
        with self._cond:
            self._cleared.set()
            self._cleared = threading.Event()
            self.dry_at = self._clock.now()
            self._cond.notify_all()

    def drain(self) -> None:
        if self.dry_at is not None:
            self._wait_until(self.dry_at + self.latency_s)


class NullPlayer(PacedPlayer):
    """Consumes audio at real-time pace on the injected clock (the daemon without a sound device)."""

    name = "null"

    def __init__(self, cfg: Config, clock: Clock | None = None, max_ahead_s: float | None = None) -> None:
        super().__init__(cfg.audio.output_rate, clock or MonotonicClock(), max_ahead_s=max_ahead_s)

    def open(self) -> None:
        pass

    def write(self, block: np.ndarray) -> None:
        if self._pace():
            self._account(len(block))

    def close(self) -> None:
        pass


class WavPlayer:
    """Writes the audio to a WAV file: a temp file in the same folder, renamed on close(); ``abort()`` (or
    a close after an error) removes it, so a half-written WAV never appears at ``path``."""

    name = "wav"

    def __init__(self, cfg: Config, clock: Clock | None = None, path: str | Path | None = None) -> None:
        self.rate = cfg.audio.output_rate
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.path = Path(path) if path is not None else Path(tempfile.gettempdir()) / f"rkvoice-{stamp}.wav"
        self._tmp: Path | None = None
        self._wav: Any = None
        self._lock = threading.Lock()
        self.samples = 0

    def open(self) -> None:
        if self.path.is_dir():
            raise RkvoiceError(Stage.PLAYER, "bad-out", f"--out {self.path} is a directory; give a file name ending in .wav")
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".part", dir=self.path.parent)
        except OSError as exc:
            raise RkvoiceError(
                Stage.PLAYER,
                "unwritable",
                f"cannot write {self.path}: {exc.strerror or exc}; choose a writable path for --out",
            ) from exc
        os.fchmod(fd, FILE_MODE)  # a WAV like any file the user writes, not mkstemp's 0600
        self._tmp = Path(tmp)
        self._wav = wave.open(os.fdopen(fd, "wb"), "wb")
        self._wav.setparams((1, 2, self.rate, 0, "NONE", "not compressed"))  # mono, 16 bit

    def write(self, block: np.ndarray) -> None:
        with self._lock:
            if self._wav is None:
                raise RkvoiceError(Stage.PLAYER, "not-open", "the WAV player was used before open()")
            self._wav.writeframes(np.asarray(block, dtype="<i2").tobytes())
            self.samples += len(block)

    def drain(self) -> None:
        pass

    def clear(self) -> None:
        pass  # nothing is buffered: what was written stays, later blocks are not written

    def close(self) -> None:
        with self._lock:
            if self._wav is None or self._tmp is None:
                return
            try:
                self._wav.close()
                os.replace(self._tmp, self.path)
            except OSError as exc:
                self._remove_tmp()
                raise RkvoiceError(Stage.PLAYER, "unwritable", f"cannot write {self.path}: {exc.strerror or exc}") from exc
            finally:
                self._wav = None
            log.info("wrote %s (%.2f s)", self.path, self.samples / self.rate)

    def abort(self) -> None:
        with self._lock:
            if self._wav is not None:
                with contextlib.suppress(OSError, wave.Error):
                    self._wav.close()
                self._wav = None
            self._remove_tmp()

    def _remove_tmp(self) -> None:
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None


class TeePlayer:
    """Hands every block to several players (e.g. a paced null sink and a WAV recorder); the first sets
    the pace, ``close`` closes all, ``abort`` aborts those that can."""

    def __init__(self, *players: Any) -> None:
        self.players = players
        self.name = "+".join(p.name for p in players)
        self.rate = players[0].rate

    def open(self) -> None:
        for p in self.players:
            p.open()

    def write(self, block: np.ndarray) -> None:
        for p in self.players:
            p.write(block)

    def drain(self) -> None:
        for p in self.players:
            p.drain()

    def clear(self) -> None:
        for p in self.players:
            p.clear()

    def close(self) -> None:
        for p in self.players:
            p.close()

    def abort(self) -> None:
        for p in self.players:
            if hasattr(p, "abort"):
                p.abort()

