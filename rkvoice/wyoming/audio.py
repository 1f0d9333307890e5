"""Incoming PCM (widths 1-4 bytes, 1-8 channels, 8-192 kHz) -> 16 kHz mono float32 for the engines.

Converted chunk by chunk (channels averaged, soxr's streaming resampler) and counted, so a stream
longer than allowed is refused while it arrives. Chunks may have any byte length (Home Assistant's
REST STT endpoint cuts its body anywhere): a partial frame is carried into the next chunk.
"""

from __future__ import annotations

import logging

import numpy as np

from rkvoice.errors import Code, RkvoiceError, Stage

log = logging.getLogger(__name__)

TARGET_RATE = 16000
MIN_RATE, MAX_RATE = 8000, 192000
MAX_CHANNELS = 8


def pcm_to_float(data: bytes, width: int, channels: int) -> np.ndarray:
    """Interleaved little-endian PCM, whole frames (AudioIn.convert carries a partial one) -> mono float32
    in [-1, 1] (width 1 is unsigned, as in WAV)."""
    if width == 3:  # 24-bit as 32-bit with a zero low byte: the same value times 256, scaled back exactly
        wide = np.zeros((len(data) // 3, 4), np.uint8)
        wide[:, 1:] = np.frombuffer(data, np.uint8).reshape(-1, 3)
        data, width = wide.tobytes(), 4
    dtype, zero = {1: ("u1", 128.0), 2: ("<i2", 0.0), 4: ("<i4", 0.0)}[width]
    x = (np.frombuffer(data, dtype).astype(np.float32) - zero) / float(1 << (8 * width - 1))
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1)
    return x.astype(np.float32, copy=False)


class AudioIn:
    """One incoming audio stream: format checks, conversion to 16 kHz mono, a length limit."""

    def __init__(self, rate: object, width: object, channels: object, max_s: float) -> None:
        if not (isinstance(rate, int) and MIN_RATE <= rate <= MAX_RATE
                and isinstance(width, int) and width in (1, 2, 3, 4)
                and isinstance(channels, int) and 1 <= channels <= MAX_CHANNELS):
            raise RkvoiceError(
                Stage.WYOMING, "bad-audio-format",
                f"audio format rate={rate!r} width={width!r} channels={channels!r} is not served; send PCM at "
                f"{MIN_RATE}-{MAX_RATE} Hz, width 1-4 bytes, 1-{MAX_CHANNELS} channels",
            )
        self.rate, self.width, self.channels = rate, width, channels
        self.max_s = max_s
        self.seconds = 0.0
        self._carry = b""
        """The bytes of a partial frame at the end of the last chunk, completed by the next one."""
        self._resampler = None
        if self.rate != TARGET_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(self.rate, TARGET_RATE, 1, dtype="float32")

    def convert(self, data: bytes, last: bool = False) -> np.ndarray:
        """One chunk's PCM -> 16 kHz mono float32; RkvoiceError once the stream passes ``max_s``.
        A partial frame at the chunk's end waits for the next chunk."""
        data = self._carry + data
        whole = len(data) - len(data) % (self.width * self.channels)
        data, self._carry = data[:whole], data[whole:]
        x = pcm_to_float(data, self.width, self.channels)
        self.seconds += len(x) / self.rate
        if self.seconds > self.max_s:
            raise RkvoiceError(
                Stage.WYOMING, Code.AUDIO_TOO_LONG,
                f"the audio stream passed {self.max_s:g} s (wyoming.max_audio_s); send shorter requests",
            )
        if self._resampler is None:
            return x
        return np.asarray(self._resampler.resample_chunk(x, last=last), dtype=np.float32)

    def finish(self) -> np.ndarray:
        """What the resampler still holds at the end of the stream; RkvoiceError when the stream
        ended inside a frame."""
        if self._carry:
            frame = self.width * self.channels
            raise RkvoiceError(
                Stage.WYOMING, "bad-audio-chunk",
                f"the audio stream ended inside a frame ({len(self._carry)} of {frame} bytes of a {self.width}-byte "
                f"x {self.channels}-channel frame); send whole frames",
            )
        return self.convert(b"", last=True)
