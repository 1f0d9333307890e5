"""A WAV stream that does not say its length, decoded as it arrives.

Home Assistant streams a reply's speech as WAV: its Wyoming text-to-speech writes the header first with
a frame count of 0 ("streaming, length unknown") and then the PCM as the voice makes it, and FFmpeg
writing WAV to a pipe leaves the sizes it cannot go back to fill in at 0 or 0xFFFFFFFF. libsndfile
takes such a header at its word (0 frames: nothing played), so this reads the header itself and the
PCM up to the end of the body.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

HEADER_MAX = 64 * 1024
"""Most bytes of chunks before ``data`` looked through (a LIST/INFO tag, a fact chunk...)."""
UNSET_SIZES = (0, 0xFFFFFFFF)
"""A data chunk's size written by a streaming writer: not the real length."""
PCM, FLOAT, EXTENSIBLE = 1, 3, 0xFFFE


class Readable(Protocol):
    def read(self, n: int = -1) -> bytes: ...


@dataclass(frozen=True)
class WavFormat:
    rate: int
    channels: int
    bits: int
    float_samples: bool
    data_size: int

    @property
    def frame_bytes(self) -> int:
        return self.channels * self.bits // 8

    @property
    def streamed(self) -> bool:
        """The header does not say how long the audio is: read to the end of the body."""
        return self.data_size in UNSET_SIZES


def _exact(body: Readable, n: int) -> bytes:
    out = b""
    while len(out) < n:
        part = body.read(n - len(out))
        if not part:
            break
        out += part
    return out


def read_header(body: Readable) -> WavFormat | None:
    """The format of a RIFF/WAVE body of integer or float PCM, read up to the start of its samples;
    None when it is not one this reader decodes (another codec: libsndfile's)."""
    riff = _exact(body, 12)
    if len(riff) < 12 or riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
        return None
    fmt: tuple[int, int, int, int] | None = None
    seen = 0
    while seen < HEADER_MAX:
        head = _exact(body, 8)
        if len(head) < 8:
            return None
        kind, size = head[:4], struct.unpack("<I", head[4:])[0]
        if kind == b"data":
            if fmt is None:
                return None
            tag, channels, rate, bits = fmt
            return WavFormat(rate, channels, bits, tag == FLOAT, size)
        if size > HEADER_MAX:
            return None
        payload = _exact(body, size + (size & 1))
        seen += 8 + len(payload)
        if kind == b"fmt " and len(payload) >= 16:
            tag, channels, rate, _byte_rate, _align, bits = struct.unpack("<HHIIHH", payload[:16])
            if tag == EXTENSIBLE and len(payload) >= 26:
                tag = struct.unpack("<H", payload[24:26])[0]  # the sub-format GUID's first two bytes
            ok = (tag == PCM and bits in (8, 16, 24, 32)) or (tag == FLOAT and bits == 32)
            if not ok or channels < 1 or rate < 1:
                return None
            fmt = (tag, channels, rate, bits)
    return None


def samples(raw: bytes, fmt: WavFormat) -> np.ndarray:
    """Whole frames of ``raw`` as mono float32 (channels averaged)."""
    if fmt.float_samples:
        x = np.frombuffer(raw, "<f4").astype(np.float32)
    elif fmt.bits == 8:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif fmt.bits == 16:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif fmt.bits == 24:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / 8388608.0
    else:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    return x.reshape(-1, fmt.channels).mean(axis=1).astype(np.float32)


def streamed_pcm(body: Readable, fmt: WavFormat, rate: int, piece_ms: int,
                 stopped: threading.Event) -> Iterator[np.ndarray]:
    """The samples after the header, to the end of ``body`` (or ``stopped``): mono float32 at ``rate``,
    about ``piece_ms`` at a time; a last partial frame is dropped."""
    import soxr

    resampler = soxr.ResampleStream(fmt.rate, rate, 1, dtype="float32") if fmt.rate != rate else None
    want = max(1, fmt.rate * piece_ms // 1000) * fmt.frame_bytes
    left = b""
    while not stopped.is_set():
        part = body.read(want - len(left))
        raw = left + part
        whole = len(raw) - len(raw) % fmt.frame_bytes
        left = raw[whole:]
        x = samples(raw[:whole], fmt)
        if resampler is not None:
            x = resampler.resample_chunk(x, last=not part)
        if len(x) or not part:
            yield x
        if not part:
            return
