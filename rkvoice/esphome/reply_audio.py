"""Home Assistant's audio by URL (a reply's TTS, an announcement and its chime): fetched over HTTP and
decoded with soundfile (libsndfile: WAV, FLAC, OGG, and MP3 where the library has it; PyAV for a stream
whose header does not say its length) to 16-bit PCM for the satellite's playback. Blocking: the voice adapter runs it on its own thread. A URL that fails, is too
long or is not audio is an ``AudioFetchError`` (one line for the log: the peer's problem, not ours)."""

from __future__ import annotations

import io
import urllib.error
import urllib.request
from dataclasses import dataclass

import numpy as np

from rkvoice.satellite.http_audio import UNKNOWN_FRAMES

FETCH_TIMEOUT_S = 15.0
MAX_BYTES = 64 << 20
"""Largest audio file taken (a longer one, e.g. a stream that never ends, is refused)."""
MAX_AUDIO_S = 600.0


class AudioFetchError(Exception):
    pass


@dataclass(frozen=True)
class Audio:
    rate: int
    channels: int
    pcm: bytes
    """int16 little-endian, channels interleaved."""

    @property
    def seconds(self) -> float:
        return len(self.pcm) / (2 * self.channels * self.rate)


def fetch(url: str, timeout_s: float = FETCH_TIMEOUT_S) -> bytes:
    if not url.startswith(("http://", "https://")):
        raise AudioFetchError(f"{url!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 -- the scheme is checked
            data = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise AudioFetchError(f"{url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AudioFetchError(f"{url} could not be fetched ({getattr(exc, 'reason', exc)})") from None
    if len(data) > MAX_BYTES:
        raise AudioFetchError(f"{url} is over {MAX_BYTES >> 20} MB")
    return data


def decode(data: bytes, what: str = "the audio") -> Audio:
    import soundfile

    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            if f.frames >= UNKNOWN_FRAMES:  # a stream that does not say its length: libsndfile cannot read it
                return _decode_stream(data, what)
            if f.frames > MAX_AUDIO_S * f.samplerate:
                raise AudioFetchError(f"{what} lasts {f.frames / f.samplerate:.0f} s, over {MAX_AUDIO_S:.0f} s")
            samples = f.read(dtype="int16", always_2d=True)
            rate, channels = int(f.samplerate), int(f.channels)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as exc:
        raise AudioFetchError(f"{what} is not audio this device decodes ({exc})") from None
    if channels > 2:
        samples = samples[:, :2]
        channels = 2
    return Audio(rate, channels, np.ascontiguousarray(samples).astype("<i2").tobytes())


def _decode_stream(data: bytes, what: str) -> Audio:
    """``data`` decoded front to back by PyAV (FFmpeg): 16-bit, its rate, mono or stereo."""
    import av

    try:
        with av.open(io.BytesIO(data), "r") as container:
            stream = container.streams.audio[0]
            rate, channels = int(stream.rate), min(2, int(stream.channels))
            resampler = av.AudioResampler(format="s16", layout="stereo" if channels == 2 else "mono", rate=rate)
            pieces, frames = [], 0
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    pieces.append(out.to_ndarray().reshape(-1))
                    frames += out.samples
                if frames > MAX_AUDIO_S * rate:
                    raise AudioFetchError(f"{what} lasts over {MAX_AUDIO_S:.0f} s")
            pieces += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    except (av.FFmpegError, IndexError) as exc:
        raise AudioFetchError(f"{what} is not audio this device decodes ({exc})") from None
    pcm = np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
    return Audio(rate, channels, pcm.astype("<i2").tobytes())


def fetch_audio(url: str) -> Audio:
    return decode(fetch(url), url)
