"""Audio in: microphones and WAV files, as 16 kHz mono float32 frames.

Every source is an iterable of frames (``frames()``) of ``FRAME_SAMPLES`` samples (the last one of a
file may be shorter). Microphone faults (no device, busy, unplugged) are logged and retried with a
capped exponential backoff; they never end the stream, only ``close()`` does.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from rkvoice.audio.post import resample
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
FRAME_SAMPLES = 512  # 32 ms: one silero window


class AudioSource(Protocol):
    sample_rate: int

    def frames(self) -> Iterator[np.ndarray]:
        """Yield float32 mono frames at ``sample_rate`` until the source ends or is closed."""

    def close(self) -> None:
        """Stop delivering frames (safe from any thread)."""


def to_mono_16k(samples: np.ndarray, rate: int, what: str = "audio") -> np.ndarray:
    """Downmix (mean of channels) and resample to 16 kHz float32; log once when it converts."""
    data = np.asarray(samples, dtype=np.float32)
    changes = []
    if data.ndim == 2:
        if data.shape[1] != 1:
            changes.append(f"{data.shape[1]} channels -> mono")
        data = data.mean(axis=1, dtype=np.float32)
    if rate != SAMPLE_RATE:
        changes.append(f"{rate} Hz -> {SAMPLE_RATE} Hz")
        data = resample(data, rate, SAMPLE_RATE)
    if changes:
        log.info("%s: converted %s", what, ", ".join(changes))
    return np.ascontiguousarray(data, dtype=np.float32)


def read_wav(path: str | Path) -> np.ndarray:
    """Read an audio file as 16 kHz mono float32, or raise a clear RkvoiceError."""
    import soundfile as sf

    p = Path(path)
    if not p.is_file():
        raise RkvoiceError(Stage.HEAR, "no-file", f"audio file {p} does not exist; pass a WAV recording")
    try:
        data, rate = sf.read(str(p), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
        raise RkvoiceError(
            Stage.HEAR,
            "bad-audio",
            f"{p} is not a readable audio file ({exc}); record or convert it to WAV "
            "(e.g. arecord -f S16_LE -r 16000 -c 1 file.wav)",
        ) from exc
    if data.shape[0] == 0:
        raise RkvoiceError(Stage.HEAR, "bad-audio", f"{p} holds no audio samples; record it again")
    return to_mono_16k(data, int(rate), what=str(p))


class WavFileSource:
    """A whole file (or samples) delivered as fast as it is read (``--file`` replay)."""

    sample_rate = SAMPLE_RATE

    def __init__(self, audio: np.ndarray | str | Path) -> None:
        self.samples = read_wav(audio) if isinstance(audio, (str, Path)) else np.asarray(audio, np.float32)
        self._closed = threading.Event()

    def frames(self) -> Iterator[np.ndarray]:
        for i in range(0, len(self.samples), FRAME_SAMPLES):
            if self._closed.is_set():
                return
            yield self.samples[i : i + FRAME_SAMPLES]

    def close(self) -> None:
        self._closed.set()


class DeviceError(Exception):
    """A microphone fault worth retrying (no device, busy, unplugged)."""


class MicStream(Protocol):
    def read(self) -> np.ndarray:
        """Block for one frame of 16 kHz mono float32; raise DeviceError on a device fault."""

    def close(self) -> None: ...


class MicSource:
    """A microphone that survives its device: open, read, and on a fault log + wait + reopen.

    ``opener`` returns a MicStream or raises DeviceError. ``backoff`` is (first, cap): the waits
    double from ``first`` up to ``cap`` while faults repeat and start over after a good read.
    ``wait(seconds) -> bool`` waits and returns True when the source was closed meanwhile
    (default: the close event).
    """

    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        opener: Callable[[], MicStream],
        name: str,
        backoff: tuple[float, float] = (0.5, 8.0),
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self.opener = opener
        self.name = name
        self.first_s, self.cap_s = backoff
        self._delay = self.first_s
        self._closed = threading.Event()
        self._wait = wait or self._closed.wait

    def frames(self) -> Iterator[np.ndarray]:
        while not self._closed.is_set():
            try:
                stream = self.opener()
            except DeviceError as exc:
                if self._fault("cannot open", exc):
                    return
                continue
            log.info("microphone %s open", self.name)
            try:
                while not self._closed.is_set():
                    frame = stream.read()
                    self._delay = self.first_s
                    yield frame
            except DeviceError as exc:
                if self._fault("lost", exc):
                    return
            finally:
                try:
                    stream.close()
                except Exception:  # closing a dead device must not mask the fault
                    log.debug("closing %s failed", self.name, exc_info=True)

    def _fault(self, what: str, exc: Exception) -> bool:
        delay, self._delay = self._delay, min(self.cap_s, self._delay * 2)
        log.warning("microphone %s %s (%s); retrying in %.1f s", self.name, what, exc, delay)
        return bool(self._wait(delay)) or self._closed.is_set()

    def close(self) -> None:
        self._closed.set()


class SounddeviceStream:
    """PortAudio input via sounddevice; opens at 16 kHz or, if refused, the device rate + soxr."""

    def __init__(self, device: str) -> None:
        try:
            import sounddevice as sd
        except (ImportError, OSError) as exc:  # OSError: PortAudio library missing
            raise DeviceError(f"sounddevice unavailable: {exc}") from exc
        self._sd = sd
        dev = None if device in ("", "default") else (int(device) if device.isdigit() else device)
        self._resampler = None
        try:
            try:
                self._stream = sd.InputStream(
                    samplerate=SAMPLE_RATE, channels=1, dtype="float32", device=dev, blocksize=FRAME_SAMPLES
                )
                self._rate = SAMPLE_RATE
            except sd.PortAudioError:
                self._rate = int(sd.query_devices(dev, "input")["default_samplerate"])
                self._stream = sd.InputStream(samplerate=self._rate, channels=1, dtype="float32", device=dev)
                import soxr

                self._resampler = soxr.ResampleStream(self._rate, SAMPLE_RATE, 1, dtype="float32")
                log.info("microphone runs at %d Hz; resampling to %d Hz", self._rate, SAMPLE_RATE)
            self._stream.start()
        except (sd.PortAudioError, ValueError) as exc:  # ValueError: unknown device name
            raise DeviceError(str(exc)) from exc
        self._pending = np.zeros(0, dtype=np.float32)

    def read(self) -> np.ndarray:
        n_in = FRAME_SAMPLES if self._resampler is None else int(FRAME_SAMPLES * self._rate / SAMPLE_RATE) + 1
        while len(self._pending) < FRAME_SAMPLES:
            try:
                data, overflowed = self._stream.read(n_in)
            except self._sd.PortAudioError as exc:
                raise DeviceError(str(exc)) from exc
            if overflowed:
                log.debug("microphone input overflow")
            chunk = np.asarray(data, dtype=np.float32).reshape(-1)
            if self._resampler is not None:
                chunk = self._resampler.resample_chunk(chunk)
            self._pending = np.concatenate([self._pending, chunk])
        frame, self._pending = self._pending[:FRAME_SAMPLES], self._pending[FRAME_SAMPLES:]
        return frame

    def close(self) -> None:
        self._stream.close()


class ArecordStream:
    """ALSA capture through an ``arecord`` child process writing raw S16_LE to a pipe."""

    def __init__(self, device: str) -> None:
        exe = shutil.which("arecord")
        if exe is None:
            raise DeviceError("arecord not found (install alsa-utils)")
        cmd = [exe, "-q", "-D", device, "-f", "S16_LE", "-r", str(SAMPLE_RATE), "-c", "1", "-t", "raw"]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def read(self) -> np.ndarray:
        assert self._proc.stdout is not None
        want = FRAME_SAMPLES * 2
        buf = self._proc.stdout.read(want)
        if len(buf) < want:
            self._proc.wait(timeout=2)
            err = (self._proc.stderr.read() if self._proc.stderr else b"").decode(errors="replace").strip()
            raise DeviceError(f"arecord exited with {self._proc.returncode}: {err or 'no message'}")
        return np.frombuffer(buf, dtype="<i2").astype(np.float32) / 32768.0

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()


def microphone(cfg: Config) -> MicSource:
    """The configured microphone (``audio.input``: sounddevice or arecord; ``audio.input_device``)."""
    kind, device = cfg.audio.input, cfg.audio.input_device
    streams: dict[str, Callable[[str], MicStream]] = {"sounddevice": SounddeviceStream, "arecord": ArecordStream}
    if kind not in streams:
        raise RkvoiceError(
            Stage.HEAR, "bad-input", f"unknown microphone source {kind!r} (audio.input); choose one of: arecord, sounddevice"
        )
    return MicSource(lambda: streams[kind](device), f"{kind}:{device}")
