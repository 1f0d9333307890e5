"""A WAV that does not say its length (rkvoice.satellite.wav_stream): the header read through the chunks
before the data, every PCM width and float, channels averaged, read to the body's end at the player's
rate; what it does not decode is left to libsndfile."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
import soundfile as sf

from rkvoice.satellite.wav_stream import read_header, streamed_pcm
from tests.support.media_site import streamed_wav


def wav(x: np.ndarray, rate: int, subtype: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format="WAV", subtype=subtype)
    return buf.getvalue()


def played(body: bytes, rate: int) -> np.ndarray:
    f = io.BytesIO(body)
    fmt = read_header(f)
    assert fmt is not None and fmt.streamed
    return np.concatenate(list(streamed_pcm(f, fmt, rate, 100, threading.Event())))


@pytest.mark.parametrize(("subtype", "tol"), [("PCM_16", 1e-4), ("PCM_24", 1e-6), ("PCM_32", 1e-6),
                                              ("FLOAT", 1e-7), ("PCM_U8", 1e-2)])
def test_every_pcm_width_and_float_with_two_channels_averaged(subtype: str, tol: float) -> None:
    t = np.arange(4800) / 24000
    left, right = 0.5 * np.sin(2 * np.pi * 440 * t), 0.25 * np.sin(2 * np.pi * 660 * t)
    x = played(streamed_wav(wav(np.stack([left, right], axis=1), 24000, subtype)), 24000)
    assert len(x) == 4800
    assert np.allclose(x, (left + right) / 2, atol=tol)


def test_read_to_the_end_at_the_player_s_rate_with_chunks_before_the_data() -> None:
    x = (0.4 * np.sin(np.arange(22050) * 0.05)).astype(np.float32)
    body = streamed_wav(wav(x, 22050, "PCM_16"), 0xFFFFFFFF, tag=True)
    y = played(body, 48000)
    assert abs(len(y) - 48000) <= 48  # one second, resampled
    assert float(np.abs(y).max()) == pytest.approx(0.4, abs=0.01)


def test_a_body_cut_mid_frame_keeps_the_whole_frames() -> None:
    x = np.full(1000, 0.25, np.float32)
    body = streamed_wav(wav(x, 16000, "PCM_16"))[:-1]
    assert len(played(body, 16000)) == 999


def test_what_it_does_not_decode_is_left_to_libsndfile() -> None:
    x = np.zeros(1600, np.float32)
    sized = wav(x, 16000, "PCM_16")
    assert read_header(io.BytesIO(sized)) is not None and not read_header(io.BytesIO(sized)).streamed
    adpcm = wav(x, 16000, "IMA_ADPCM")
    assert read_header(io.BytesIO(adpcm)) is None
    assert read_header(io.BytesIO(b"OggS" + bytes(60))) is None
    assert read_header(io.BytesIO(b"RIFF\0\0\0\0WAVE")) is None  # no chunks at all
    assert read_header(io.BytesIO(b"RIFF\0\0\0\0WAVEdata\0\0\0\0")) is None  # data before any fmt


def test_stopped_ends_the_read() -> None:
    body = streamed_wav(wav(np.zeros(16000, np.float32), 16000, "PCM_16"))
    f = io.BytesIO(body)
    fmt = read_header(f)
    assert fmt is not None
    stop = threading.Event()
    pieces = streamed_pcm(f, fmt, 16000, 100, stop)
    assert len(next(pieces)) == 1600
    stop.set()
    assert list(pieces) == []
