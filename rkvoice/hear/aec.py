"""Acoustic echo cancellers (the played audio is the reference) and the playback-to-capture delay.

Two backends, chosen by ``hear.aec`` (``auto``: the first that is installed, in this order):

- ``speex``: speexdsp's MDF canceller with its residual-echo suppressor, from the system's
  libspeexdsp or else the fixed-point build inside ``pyaec`` (rkvoice/hear/speexdsp.py). Chosen by
  bench/echo.py: the user is still heard while the assistant talks over them (double talk).
- ``webrtc``: WebRTC's AEC3 through livekit (an optional 12 MB extra). Cancels more echo when nobody
  else talks, but its suppressor also removes the user whenever the echo is as loud as they are:
  barge-in recall dropped to half on the bench.

Both work on 10 ms frames of 16 kHz int16. ``estimate_delay`` (GCC-PHAT) finds how far the echo lags
the reference, so a short adaptive filter covers the room and not the device's buffering.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear import speexdsp
from rkvoice.hear.speexdsp import FRAME, RATE, system_speexdsp

log = logging.getLogger(__name__)


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


def speex() -> Canceller:
    """speexdsp: the system's floating-point library when installed (on bench/echo.py it kept the
    user's words better than pyaec's fixed-point build of the same code), else pyaec's."""
    if system_speexdsp():
        return speexdsp.SpeexDspCanceller("system")
    try:
        return speexdsp.SpeexDspCanceller("pyaec")
    except speexdsp.UnexpectedBuild as exc:
        log.warning("%s; using pyaec's own entry points (the canceller at its 8 kHz constants)", exc)
        return speexdsp.PyaecWrapperCanceller()


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
    """``hear.aec`` (a one_of field the config checks) with ``auto`` resolved: the first installed
    backend, else ``off``."""
    if setting != "auto":
        return setting
    return next((name for name in BACKENDS if installed(name)), "off")


def create_canceller(setting: str) -> Canceller | None:
    """The canceller ``hear.aec`` names (None for ``off``, or ``auto`` with none installed).

    A backend named explicitly that cannot load is an error naming the fix; under ``auto`` a
    backend that fails to load is logged and the next one is tried."""
    if setting in ("off", "external"):
        return None
    order = [setting] if setting != "auto" else [n for n in BACKENDS if installed(n)]
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
