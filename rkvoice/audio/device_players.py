"""Players on a sound device: ``aplay`` (ALSA, a subprocess) and ``sounddevice`` (PortAudio); a device
that goes away is reported and opened again."""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from typing import Any

import numpy as np

from rkvoice.audio.sinks import PacedPlayer
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)


class AplayPlayer(PacedPlayer):
    """Raw S16_LE mono PCM to ``aplay`` on stdin. A dying aplay (device busy, unplugged) is reported with
    its exit code and last error line, the blocks of the next ``retry_s`` are dropped (their time still
    passes) and it is started again. ``clear()`` kills the process, which drops what the pipe and ALSA
    hold at once; the next write starts a new one."""

    name = "aplay"
    command: tuple[str, ...] = ("aplay",)
    retry_s = 1.0

    def __init__(self, cfg: Config, clock: Clock | None = None) -> None:
        super().__init__(cfg.audio.output_rate, clock or MonotonicClock(), max_ahead_s=0.25, latency_s=0.05)
        self.device = cfg.audio.device
        self._proc: subprocess.Popen[bytes] | None = None
        self._errfile: Any = None
        self._retry_at = 0.0
        self._plock = threading.Lock()

    def open(self) -> None:
        if shutil.which(self.command[0]) is None:
            raise RkvoiceError(
                Stage.PLAYER,
                "aplay-missing",
                f"{self.command[0]} not found: install alsa-utils, or set audio.player to sounddevice, wav or null",
            )
        with self._plock:
            self._start()

    def _start(self) -> None:
        argv = [*self.command, "-q", "-t", "raw", "-f", "S16_LE", "-r", str(self.rate), "-c", "1", "-D", self.device]
        if self._errfile is not None:  # the previous process's stderr
            self._errfile.close()
        self._errfile = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._errfile)
        log.debug("started %s (pid %d)", " ".join(argv), self._proc.pid)

    def _report_death(self) -> None:
        proc, self._proc = self._proc, None
        assert proc is not None  # called for the running process only
        code = _reap(proc, 1.0)
        self._errfile.seek(0)
        lines = self._errfile.read().decode("utf-8", "replace").strip().splitlines()
        detail = lines[-1] if lines else ""
        self._retry_at = self._clock.now() + self.retry_s
        log.warning("aplay on %s exited (code %s%s); restarting it", self.device, code, f": {detail}" if detail else "")

    def write(self, block: np.ndarray) -> None:
        if not self._pace():
            return  # cleared while waiting for room: this block is dropped (no new aplay for it)
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

    def _take(self) -> subprocess.Popen[bytes] | None:
        with self._plock:
            proc, self._proc = self._proc, None
        return proc

    def clear(self) -> None:
        if (proc := self._take()) is not None:
            proc.kill()
            _reap(proc, None)
        super().clear()

    def close(self) -> None:
        self.drain()
        if (proc := self._take()) is not None:
            _reap(proc, 2.0)


def _reap(proc: subprocess.Popen[bytes], timeout: float | None) -> int:
    """Close ``proc``'s stdin (the end of its audio), wait up to ``timeout`` s for it to exit, then
    kill it; its exit code."""
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.close()  # type: ignore[union-attr]
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


class SounddevicePlayer:
    """A PortAudio output stream fed from a block queue by its callback (zeros when the queue runs dry).
    ``write`` blocks while more than 0.25 s (``max_ahead``) is queued; ``clear`` empties the queue (the device
    keeps at most one ~20 ms callback block). A stream that stops by itself (unplugged, PortAudio
    error) is reported by its finished callback and opened again on the next write."""

    name = "sounddevice"

    def __init__(self, cfg: Config, clock: Clock | None = None) -> None:
        self.rate = cfg.audio.output_rate
        self.device = None if cfg.audio.device == "default" else cfg.audio.device
        self.block = max(1, self.rate * cfg.audio.block_ms // 1000)
        self.max_ahead = int(0.25 * self.rate)
        self._queue: deque[np.ndarray] = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._stream: Any = None
        self._clears = 0
        self._dead = False
        self._stopping = False

    def open(self) -> None:
        try:
            import sounddevice as sd
        except (ImportError, OSError) as exc:
            raise RkvoiceError(
                Stage.PLAYER, "missing-dependency", f"sounddevice is unusable ({exc}); use audio.player=aplay, wav or null"
            ) from exc
        try:
            stream = sd.OutputStream(
                samplerate=self.rate, channels=1, dtype="int16", blocksize=self.block, device=self.device,
                callback=self._callback, finished_callback=self._finished,
            )
            stream.start()
        except Exception as exc:  # PortAudioError and friends
            raise RkvoiceError(Stage.PLAYER, "device", f"cannot open sound device {self.device or 'default'}: {exc}") from exc
        with self._cond:
            self._stream = stream
            self._dead = False

    def _callback(self, outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        out = outdata[:, 0]
        filled = 0
        with self._cond:
            while filled < frames and self._queue:
                head = self._queue.popleft()
                take = min(frames - filled, len(head))
                out[filled : filled + take] = head[:take]
                if take < len(head):
                    self._queue.appendleft(head[take:])
                filled += take
                self._queued -= take
            self._cond.notify_all()
        out[filled:] = 0  # the queue ran dry: silence

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

