"""Audio sinks for the speaker: aplay, sounddevice, a WAV file, and a paced null sink.

Every player takes mono int16 blocks at ``rate`` and offers:

- ``open()`` (heavy part: start the process / stream / file), ``close()``;
- ``write(block)``: hand one block over; may block while the device is far enough ahead;
- ``drain()``: return once everything handed over has been played (or cleared);
- ``clear()``: from any thread, drop buffered audio now (barge-in), waking a blocked
  ``write``/``drain``.

Real-time players keep audio-time accounting: ``dry_at`` is the clock time at which the
device runs out of audio. Waiting uses the injected clock (a FakeClock advances instead).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import wave
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rkvoice.atomic import FILE_MODE
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.registry import Registry

log = logging.getLogger(__name__)

PLAYERS = Registry("player")
PLAYERS.register("aplay", "rkvoice.audio.players:AplayPlayer", "ALSA aplay subprocess (board default)")
PLAYERS.register(
    "sounddevice",
    "rkvoice.audio.players:SounddevicePlayer",
    "PortAudio output stream",
    install_hint="pip install sounddevice (and the PortAudio library)",
)
PLAYERS.register("wav", "rkvoice.audio.players:WavPlayer", "write a WAV file (--out)")
PLAYERS.register("null", "rkvoice.audio.players:NullPlayer", "discard audio at real-time pace")


class Player(Protocol):
    name: str
    rate: int

    def open(self) -> None: ...
    def write(self, block: np.ndarray) -> None: ...
    def drain(self) -> None: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...


class PacedPlayer:
    """Audio-time accounting and interruptible waits shared by the real-time players."""

    name = "paced"

    def __init__(self, rate: int, clock: Clock, max_ahead_s: float | None = 0.25, latency_s: float = 0.0) -> None:
        self.rate = rate
        self._clock = clock
        self.max_ahead_s = max_ahead_s
        self.latency_s = latency_s
        self._cond = threading.Condition()
        self._clears = 0
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
            gen = self._clears
        while True:
            remaining = deadline - self._clock.now()
            if remaining <= 0:
                return True
            if isinstance(self._clock, MonotonicClock):
                with self._cond:
                    if self._cond.wait_for(lambda: self._clears != gen, timeout=remaining):
                        return False
            else:  # a controlled clock: sleeping moves it
                self._clock.sleep(remaining)
            with self._cond:
                if self._clears != gen:
                    return False

    def _pace(self) -> None:
        """Block while more than ``max_ahead_s`` of audio is queued on the device."""
        if self.max_ahead_s is None or self.dry_at is None:
            return
        self._wait_until(self.dry_at - self.max_ahead_s)

    def _mark_cleared(self) -> None:
        with self._cond:
            self._clears += 1
            self.dry_at = self._clock.now()
            self._cond.notify_all()

    def drain(self) -> None:
        if self.dry_at is not None:
            self._wait_until(self.dry_at + self.latency_s)

    def clear(self) -> None:
        self._mark_cleared()


class NullPlayer(PacedPlayer):
    """Consumes audio at real-time pace on the injected clock and keeps a log of what played.

    ``segments`` lists (start, end) clock times of audio that was (or is being) heard;
    ``clear()`` cuts the current segment at the moment of the clear.
    """

    name = "null"

    def __init__(self, cfg: Config, clock: Clock | None = None, max_ahead_s: float | None = None) -> None:
        super().__init__(cfg.audio.output_rate, clock or MonotonicClock(), max_ahead_s=max_ahead_s)
        self.segments: list[list[float]] = []
        self.samples = 0
        self.blocks = 0

    def open(self) -> None:
        pass

    def write(self, block: np.ndarray) -> None:
        self._pace()
        start, end = self._account(len(block))
        with self._cond:
            self.samples += len(block)
            self.blocks += 1
            if self.segments and abs(self.segments[-1][1] - start) < 1e-9:
                self.segments[-1][1] = end
            else:
                self.segments.append([start, end])

    def clear(self) -> None:
        with self._cond:
            now = self._clock.now()
            for seg in self.segments:
                seg[1] = min(seg[1], max(seg[0], now))
        self._mark_cleared()

    def heard_until(self) -> float | None:
        with self._cond:
            return self.segments[-1][1] if self.segments else None

    def close(self) -> None:
        pass


def default_wav_path() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.gettempdir()) / f"rkvoice-{stamp}-{os.getpid()}.wav"


class WavPlayer:
    """Writes the audio to a WAV file: a temp file in the same folder, renamed on close().

    ``abort()`` (or a close after an error) removes the temp file: a half-written WAV never
    appears at ``path``.
    """

    name = "wav"

    def __init__(self, cfg: Config, clock: Clock | None = None, path: str | Path | None = None) -> None:
        self.rate = cfg.audio.output_rate
        self.path = Path(path) if path is not None else default_wav_path()
        self._tmp: Path | None = None
        self._wav: Any = None
        self._lock = threading.Lock()
        self.samples = 0

    def open(self) -> None:
        if self.path.is_dir():
            raise RkvoiceError("player", "bad-out", f"--out {self.path} is a directory; give a file name ending in .wav")
        directory = self.path.parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".part", dir=directory)
        except OSError as exc:
            raise RkvoiceError(
                "player",
                "unwritable",
                f"cannot write {self.path}: {exc.strerror or exc}; choose a writable path for --out",
            ) from exc
        os.fchmod(fd, FILE_MODE)  # a WAV like any file the user writes, not mkstemp's 0600
        self._tmp = Path(tmp)
        wav = wave.open(os.fdopen(fd, "wb"), "wb")
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(self.rate)
        self._wav = wav

    def write(self, block: np.ndarray) -> None:
        with self._lock:
            if self._wav is None:
                raise RkvoiceError("player", "not-open", "the WAV player was used before open()")
            self._wav.writeframes(np.asarray(block, dtype="<i2").tobytes())
            self.samples += len(block)

    def drain(self) -> None:
        pass

    def clear(self) -> None:
        pass  # nothing is buffered: what was written stays, later blocks are not written

    def close(self) -> None:
        """Finish the file and rename it into place."""
        with self._lock:
            if self._wav is None or self._tmp is None:
                return
            try:
                self._wav.close()
                os.replace(self._tmp, self.path)
            except OSError as exc:
                self._remove_tmp()
                raise RkvoiceError("player", "unwritable", f"cannot write {self.path}: {exc.strerror or exc}") from exc
            finally:
                self._wav = None
            log.info("wrote %s (%.2f s)", self.path, self.samples / self.rate)

    def abort(self) -> None:
        """Drop the partial file."""
        with self._lock:
            if self._wav is not None:
                try:
                    self._wav.close()
                except (OSError, wave.Error):
                    pass
                self._wav = None
            self._remove_tmp()

    def _remove_tmp(self) -> None:
        if self._tmp is not None:
            try:
                self._tmp.unlink()
            except FileNotFoundError:
                pass
            self._tmp = None


class AplayPlayer(PacedPlayer):
    """Raw S16_LE mono PCM to ``aplay`` on stdin.

    A dying aplay (device busy, unplugged) is reported with its exit code and last error
    line; the blocks of the next ``retry_s`` are dropped (their time still passes) and the
    process is started again. ``clear()`` kills the process, which drops what the pipe and
    ALSA hold at once; the next write starts a new one.
    """

    name = "aplay"

    def __init__(
        self,
        cfg: Config,
        clock: Clock | None = None,
        command: tuple[str, ...] = ("aplay",),
        retry_s: float = 1.0,
        max_ahead_s: float = 0.25,
    ) -> None:
        super().__init__(cfg.audio.output_rate, clock or MonotonicClock(), max_ahead_s=max_ahead_s, latency_s=0.05)
        self.device = cfg.audio.device
        self.command = command
        self.retry_s = retry_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._errfile: Any = None
        self._retry_at = 0.0
        self._plock = threading.Lock()
        self.deaths = 0

    def argv(self) -> list[str]:
        return [
            *self.command, "-q", "-t", "raw", "-f", "S16_LE", "-r", str(self.rate), "-c", "1", "-D", self.device,
        ]

    def open(self) -> None:
        if shutil.which(self.command[0]) is None:
            raise RkvoiceError(
                "player",
                "aplay-missing",
                f"{self.command[0]} not found: install alsa-utils, or set audio.player to sounddevice, wav or null",
            )
        with self._plock:
            self._start()

    def _start(self) -> None:
        self._errfile = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(self.argv(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._errfile)
        log.debug("started %s (pid %d)", " ".join(self.argv()), self._proc.pid)

    def _report_death(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            code = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        detail = ""
        if self._errfile is not None:
            self._errfile.seek(0)
            lines = self._errfile.read().decode("utf-8", "replace").strip().splitlines()
            detail = lines[-1] if lines else ""
            self._errfile.close()
            self._errfile = None
        self.deaths += 1
        self._retry_at = self._clock.now() + self.retry_s
        log.warning("aplay on %s exited (code %s%s); restarting it", self.device, code, f": {detail}" if detail else "")

    def write(self, block: np.ndarray) -> None:
        self._pace()
        self._account(len(block))
        data = np.asarray(block, dtype="<i2").tobytes()
        with self._plock:
            if self._proc is None:
                if self._clock.now() < self._retry_at:
                    return  # device was failing: drop this block, keep time
                self._start()
            proc = self._proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            with self._plock:
                if proc is self._proc:  # otherwise clear() killed it on purpose
                    self._report_death()

    def clear(self) -> None:
        with self._plock:
            proc, self._proc = self._proc, None
            if self._errfile is not None:
                self._errfile.close()
                self._errfile = None
        if proc is not None:
            proc.kill()
            try:
                proc.stdin.close()  # type: ignore[union-attr]
            except (OSError, ValueError):
                pass
            proc.wait()
        self._mark_cleared()

    def close(self) -> None:
        self.drain()
        with self._plock:
            proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # type: ignore[union-attr]
            except (OSError, ValueError):
                pass
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class SounddevicePlayer:
    """A PortAudio output stream fed from a block queue by its callback.

    ``write`` blocks while more than ``max_ahead_s`` is queued; ``clear`` empties the queue
    (the device keeps at most one callback block, ~20 ms); the callback plays zeros when
    the queue runs dry. A stream that stops by itself (device unplugged, PortAudio error)
    is reported through its finished callback and opened again on the next write.
    """

    name = "sounddevice"

    def __init__(
        self,
        cfg: Config,
        clock: Clock | None = None,
        max_ahead_s: float = 0.25,
        stream_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.rate = cfg.audio.output_rate
        self.device = None if cfg.audio.device == "default" else cfg.audio.device
        self.block = max(1, self.rate * cfg.audio.block_ms // 1000)
        self.max_ahead = int(max_ahead_s * self.rate)
        self._factory = stream_factory
        self._queue: deque[np.ndarray] = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._stream: Any = None
        self._clears = 0
        self._dead = False
        self._stopping = False
        self.deaths = 0

    def open(self) -> None:
        factory = self._factory
        if factory is None:
            try:
                import sounddevice as sd
            except (ImportError, OSError) as exc:
                raise RkvoiceError(
                    "player", "missing-dependency", f"sounddevice is unusable ({exc}); use audio.player=aplay, wav or null"
                ) from exc
            factory = sd.OutputStream
        try:
            stream = factory(
                samplerate=self.rate, channels=1, dtype="int16", blocksize=self.block, device=self.device,
                callback=self._callback, finished_callback=self._finished,
            )
            stream.start()
        except Exception as exc:  # PortAudioError and friends
            raise RkvoiceError("player", "device", f"cannot open sound device {self.device or 'default'}: {exc}") from exc
        with self._cond:
            self._stream = stream
            self._dead = False

    def _callback(self, outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        out = np.zeros(frames, dtype=np.int16)
        filled = 0
        with self._cond:
            while filled < frames and self._queue:
                head = self._queue[0]
                take = min(frames - filled, len(head))
                out[filled : filled + take] = head[:take]
                filled += take
                if take == len(head):
                    self._queue.popleft()
                else:
                    self._queue[0] = head[take:]
                self._queued -= take
            self._cond.notify_all()
        outdata[:, 0] = out

    def _finished(self) -> None:
        with self._cond:
            if not self._stopping:
                self._dead = True
                self._cond.notify_all()

    def _revive(self) -> None:
        """Report a stream that stopped by itself, drop what it held, open a new one."""
        with self._cond:
            old, self._stream = self._stream, None
            self._queue.clear()
            self._queued = 0
            self.deaths += 1
        log.warning("sound device %s stopped; opening it again", self.device or "default")
        if old is not None:
            try:
                old.close()
            except Exception:  # already broken; closing is best effort
                log.debug("closing the dead stream failed", exc_info=True)
        self.open()

    def write(self, block: np.ndarray) -> None:
        block = np.asarray(block, dtype=np.int16)
        if self._dead or self._stream is None:
            self._revive()
        with self._cond:
            gen = self._clears
            self._cond.wait_for(lambda: self._queued <= self.max_ahead or self._clears != gen or self._dead)
            if self._clears != gen or self._dead:
                return  # cleared (barge-in) or the device went away: this block is dropped
            self._queue.append(block)
            self._queued += len(block)

    def drain(self) -> None:
        with self._cond:
            gen = self._clears
            self._cond.wait_for(lambda: self._queued == 0 or self._clears != gen or self._dead)

    def clear(self) -> None:
        with self._cond:
            self._queue.clear()
            self._queued = 0
            self._clears += 1
            self._cond.notify_all()

    def close(self) -> None:
        if self._stream is not None:
            self.drain()
            with self._cond:
                self._stopping = True
                stream, self._stream = self._stream, None
            stream.stop()
            stream.close()


class TeePlayer:
    """Hands every block to several players (e.g. a paced null sink and a WAV recorder).

    The first player sets the pace; ``close`` closes all, ``abort`` aborts those that can.
    """

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


def has_sound_device() -> str | None:
    """Name of a usable output backend ("aplay" or "sounddevice"), or None."""
    cards = Path("/proc/asound/cards")
    if shutil.which("aplay") and cards.exists():
        text = cards.read_text(errors="replace")
        if text.strip() and "no soundcards" not in text:
            return "aplay"
    try:
        import sounddevice as sd

        if any(d.get("max_output_channels", 0) > 0 for d in sd.query_devices()):
            return "sounddevice"
    except Exception:  # no PortAudio, no devices: both mean "no sound device"
        log.debug("sounddevice has no output device", exc_info=True)
    return None


def resolve_player_name(cfg: Config) -> str:
    """``audio.player``, with ``auto`` resolved: a sound device if there is one, else a WAV file."""
    name = cfg.audio.player
    if name != "auto":
        PLAYERS.backend(name)  # unknown names fail here, listing the choices
        return name
    return has_sound_device() or "wav"


def create_player(name: str, cfg: Config, clock: Clock | None = None, **kwargs: Any) -> Any:
    """A player from the registry (not opened)."""
    return PLAYERS.create(name, cfg, clock, **kwargs)
