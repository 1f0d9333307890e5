"""Acoustic echo cancellers (the played audio is the reference) and the playback-to-capture delay.

Two backends, chosen by ``hear.aec`` (``auto``: the first that is installed, in this order):

- ``speex``: speexdsp's MDF canceller with its residual-echo suppressor: the system's libspeexdsp
  when installed, else the fixed-point build inside ``pyaec`` (a 240 KB wheel for x86_64 and
  aarch64, no dependencies), both driven the same way (rkvoice/hear/speexdsp.py). Chosen by
  bench/echo.py: the user is still heard while the assistant talks over them (double talk), and
  the residual echo is suppressed.
- ``webrtc``: WebRTC's AEC3 through livekit's ``rtc.AudioProcessingModule`` (an optional extra:
  a 12 MB wheel). Cancels more echo when nobody else talks, but its suppressor also removes the
  user whenever the echo is as loud as they are: barge-in recall dropped to half on the bench.

Both work on 10 ms frames of 16 kHz int16. ``estimate_delay`` finds how far the microphone's echo
lags the reference (GCC-PHAT cross-correlation): the reference is shifted by it before the canceller,
so a short adaptive filter covers the room and not the device's buffering (see rkvoice/hear/echo.py).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.speexdsp import (
    FRAME,
    RATE,
    SPEEX_TAIL,
    SpeexDspCanceller,
    UnexpectedBuild,
    pyaec_library,
    system_speexdsp,
)

log = logging.getLogger(__name__)


CHOICES = ("auto", "webrtc", "speex", "off", "external")
"""The values of ``hear.aec`` (external: the sound server cancels the echo; the microphone is heard as it is)."""


class Canceller(Protocol):
    name: str

    def process(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """One ``FRAME`` of int16 microphone and (aligned) reference -> the microphone without echo."""

    def reset(self) -> None:
        """Forget the adapted echo path (after a large delay change)."""


class WebrtcCanceller:
    """WebRTC AEC3 (livekit's audio processing module)."""

    name = "webrtc"

    def __init__(self) -> None:
        from livekit import rtc

        self._rtc = rtc
        self._apm: Any = None
        self.reset()

    def reset(self) -> None:
        self._apm = self._rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)

    def process(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        rtc = self._rtc
        self._apm.process_reverse_stream(rtc.AudioFrame(np.ascontiguousarray(ref, np.int16).tobytes(), RATE, 1, FRAME))
        self._apm.set_stream_delay_ms(0)  # the reference is already aligned to the echo
        frame = rtc.AudioFrame(np.ascontiguousarray(mic, np.int16).tobytes(), RATE, 1, FRAME)
        self._apm.process_stream(frame)
        return np.frombuffer(frame.data, dtype=np.int16).copy()


class SpeexCanceller(SpeexDspCanceller):
    """speexdsp inside the pyaec wheel (fixed point), driven like the system's library (speexdsp.py)."""

    def __init__(self, tail: int = SPEEX_TAIL) -> None:
        super().__init__("pyaec", tail)


class SystemSpeexCanceller(SpeexDspCanceller):
    """The system's libspeexdsp (Debian: apt-get install libspeexdsp1), a floating-point build. On
    bench/echo.py it kept the user's words better than pyaec's fixed-point build of the same code."""

    def __init__(self, tail: int = SPEEX_TAIL) -> None:
        super().__init__("system", tail)


class PyaecWrapperCanceller:
    """pyaec's own entry points (AecNew: the canceller at its 8 kHz constants + the preprocessor),
    for a pyaec build whose speexdsp symbols are stripped."""

    name = "speex"

    def __init__(self, tail: int = SPEEX_TAIL) -> None:
        path = str(pyaec_library())
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise ImportError(f"cannot load {path}: {exc}", name="pyaec") from exc
        handle, pcm = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int16)
        lib.AecNew.argtypes, lib.AecNew.restype = [ctypes.c_size_t, ctypes.c_int32, ctypes.c_int32, ctypes.c_bool], handle
        lib.AecCancelEcho.argtypes, lib.AecCancelEcho.restype = [handle, pcm, pcm, pcm, ctypes.c_size_t], None
        lib.AecDestroy.argtypes, lib.AecDestroy.restype = [handle], None
        self._lib, self._pcm, self.tail = lib, pcm, tail
        self._aec: int | None = None
        self.reset()

    def reset(self) -> None:
        self.close()
        self._aec = self._lib.AecNew(FRAME, self.tail, RATE, True)
        if not self._aec:
            raise RkvoiceError(Stage.HEAR, "aec-failed", "speexdsp could not create an echo canceller")

    def process(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        near = np.ascontiguousarray(mic, np.int16)
        far = np.ascontiguousarray(ref, np.int16)
        out = np.empty(FRAME, np.int16)
        self._lib.AecCancelEcho(self._aec, near.ctypes.data_as(self._pcm), far.ctypes.data_as(self._pcm),
                                out.ctypes.data_as(self._pcm), FRAME)
        return out

    def close(self) -> None:
        if self._aec:
            self._lib.AecDestroy(self._aec)
            self._aec = None

    def __del__(self) -> None:
        self.close()


def speex() -> Canceller:
    """speexdsp: the system's library when installed (measured better), else the one pyaec ships."""
    if system_speexdsp():
        return SystemSpeexCanceller()
    try:
        return SpeexCanceller()
    except UnexpectedBuild as exc:
        log.warning("%s; using pyaec's own entry points (the canceller at its 8 kHz constants)", exc)
        return PyaecWrapperCanceller()


BACKENDS: dict[str, tuple[Callable[[], Canceller], str, str]] = {
    "speex": (speex, "pyaec", "pip install pyaec==1.0.1 (requirements/portable.txt lists it); "
              "better: apt-get install libspeexdsp1"),
    "webrtc": (WebrtcCanceller, "livekit", "pip install livekit==1.2.1 (an optional extra: not in requirements/)"),
}
"""name -> (factory, the package it imports, how to install it); ``auto`` tries them in this order."""


def installed(name: str) -> bool:
    """Whether backend ``name``'s package can be found (without importing it)."""
    if name == "speex" and system_speexdsp():
        return True
    return importlib.util.find_spec(BACKENDS[name][1]) is not None


def resolve(setting: str) -> str:
    """``hear.aec`` with ``auto`` resolved: the first installed backend, else ``off``."""
    if setting not in CHOICES:
        raise RkvoiceError(Stage.HEAR, "bad-aec", f"unknown echo canceller {setting!r} (hear.aec); "
                           f"choose one of: {', '.join(CHOICES)}")
    if setting != "auto":
        return setting
    return next((name for name in BACKENDS if installed(name)), "off")


def create_canceller(setting: str) -> Canceller | None:
    """The canceller ``hear.aec`` names (None for ``off``, or ``auto`` with none installed).

    A backend named explicitly that cannot load is an error naming the fix; under ``auto`` a
    backend that fails to load is logged and the next one is tried."""
    name = resolve(setting)
    if name in ("off", "external"):
        return None
    order = [name] if setting != "auto" else [n for n in BACKENDS if installed(n)]
    for candidate in order:
        factory, package, hint = BACKENDS[candidate]
        try:
            return factory()
        except (ImportError, OSError) as exc:
            if setting != "auto":
                raise RkvoiceError(Stage.HEAR, "missing-dependency",
                                   f"echo canceller {candidate!r} needs {package} ({exc}): {hint}") from exc
            log.warning("echo canceller %s unusable (%s); trying the next", candidate, exc)
    return None


SUMMARY = {"webrtc": "WebRTC AEC3 (livekit)", "speex": "speexdsp MDF + residual echo suppression"}


def describe(setting: str, tail_ms: int) -> tuple[str, list[str], list[str]]:
    """For ``--check``: (the canceller in use, problems, notes) under ``hear.aec: setting``."""
    name = resolve(setting)
    if name == "external":
        return name, [], ["hear.aec: external: the sound server cancels the echo (PipeWire/PulseAudio echo-cancel "
                          "as audio.input_device); the microphone is heard as it is, barge-in included"]
    if name != "off" and not installed(name):
        _factory, package, hint = BACKENDS[name]
        return name, [f"hear.aec: {name} needs the {package} package: {hint}"], []
    if name == "off":
        why = "hear.aec: off" if setting == "off" else "no echo canceller installed (pip install livekit or pyaec)"
        return "off", [], [f"{why}: the wake and follow-up path is muted while the speaker plays and "
                           f"{tail_ms} ms after (+ the echo delay); no barge-in while it speaks"]
    source = ""
    if name == "speex":
        source = " (the system's libspeexdsp)" if system_speexdsp() else \
            " (pyaec's build; apt-get install libspeexdsp1 hears the user better over the echo)"
    return name, [], [f"{SUMMARY[name]}{source} with the played audio as reference; playback-to-capture "
                      "delay estimated from the audio (GCC-PHAT); hear.aec: off mutes instead"]


def estimate_delay(mic: np.ndarray, ref: np.ndarray, max_lag: int) -> tuple[int, float]:
    """How many samples ``mic``'s echo lags ``ref`` (0..max_lag), with the peak's prominence.

    GCC-PHAT: the cross-spectrum is whitened so the peak is sharp for speech. The prominence is the
    peak over the correlation's standard deviation (around 4 for noise, far above 10 for a clear echo
    path): callers trust estimates above ``DELAY_TRUST``.
    """
    n = min(len(mic), len(ref))
    if n == 0 or not np.any(ref[:n]):
        return 0, 0.0
    size = 1 << int(np.ceil(np.log2(2 * n)))
    cross = np.fft.rfft(mic[:n].astype(np.float64), size) * np.conj(np.fft.rfft(ref[:n].astype(np.float64), size))
    cross /= np.abs(cross) + 1e-12
    corr = np.fft.irfft(cross, size)[: max_lag + 1]
    lag = int(np.argmax(corr))
    spread = float(np.std(corr))
    return lag, (float(corr[lag]) / spread if spread > 0 else 0.0)


DELAY_TRUST = 8.0
"""The prominence above which a delay estimate is taken (noise alone gives about 4)."""


def erle_db(echo: np.ndarray, residual: np.ndarray) -> float:
    """Echo return loss enhancement: echo power over what is left of it after cancelling, in dB."""
    e = float(np.mean(np.square(echo, dtype=np.float64)))
    r = float(np.mean(np.square(residual, dtype=np.float64)))
    return 10.0 * np.log10((e + 1e-12) / (r + 1e-12))
