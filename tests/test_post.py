"""Post-processing on synthetic signals: trims, resampling, fades, blocks."""

from __future__ import annotations

import numpy as np
import pytest

from rkvoice.audio import post

RATE = 16000


def tone(seconds: float, amp: float = 0.3, freq: float = 220.0, rate: int = RATE) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def silence(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(round(seconds * rate), dtype=np.float32)


def noise(seconds: float, amp: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (amp * rng.uniform(-1, 1, round(seconds * RATE))).astype(np.float32)


# -- leading trim ------------------------------------------------------------------------

def test_trim_lead_keeps_40ms_before_first_loud_sample():
    x = np.concatenate([noise(0.5, 0.005), tone(0.5)])
    # the tone's first sample is 0; the first one above 1 % of full scale comes a few samples in
    first_loud = int(np.flatnonzero(np.abs(x) > 0.01)[0])
    y = post.trim_lead(x, RATE)
    assert len(y) == len(x) - (first_loud - 640)
    assert np.array_equal(y, x[first_loud - 640 :])


def test_trim_lead_leaves_speech_at_the_start_alone():
    x = tone(0.3, amp=0.5, freq=1000.0)
    x[0] = 0.2
    assert np.array_equal(post.trim_lead(x, RATE), x)


def test_trim_lead_of_silence_is_empty():
    assert len(post.trim_lead(noise(0.3, 0.009), RATE)) == 0


# -- tail trim ---------------------------------------------------------------------------

def test_trim_tail_removes_trailing_silence_keeping_150ms():
    x = np.concatenate([tone(1.0), silence(1.0)])
    y = post.trim_tail(x, RATE)
    assert len(y) == int(1.15 * RATE)


def test_trim_tail_removes_loud_noise_burst_after_silence():
    speech = tone(1.2, amp=0.1)
    burst = noise(0.15, amp=0.6)  # far louder than the speech, but short
    x = np.concatenate([speech, silence(0.8), burst, silence(0.3)])
    y = post.trim_tail(x, RATE)
    assert len(y) == int(1.35 * RATE)
    assert np.abs(y).max() <= 0.1 + 1e-6  # the burst is gone


def test_trim_tail_removes_burst_longer_than_a_window_with_absolute_threshold():
    speech = tone(1.0, amp=0.05)
    x = np.concatenate([speech, silence(0.5), noise(0.3, 0.108), silence(0.2)])
    y = post.trim_tail(x, RATE, threshold=0.01)
    assert len(y) == int(1.15 * RATE)


def test_trim_tail_never_cuts_trailing_speech():
    # speech up to the very end, with short pauses between "syllables"
    parts = []
    for i in range(6):
        parts += [tone(0.25, amp=0.2, freq=200 + 30 * i), silence(0.08)]
    parts.append(tone(0.3, amp=0.05))  # a quiet last syllable, right at the end
    x = np.concatenate(parts)
    y = post.trim_tail(x, RATE)
    assert len(y) == len(x)


def test_trim_tail_keeps_last_word_after_a_short_pause():
    x = np.concatenate([tone(1.0), silence(0.1), tone(0.2), silence(0.6)])
    y = post.trim_tail(x, RATE)
    # the word after a one-window pause joins the speech run and survives
    assert len(y) >= int(1.3 * RATE)
    assert len(y) <= int(1.3 * RATE) + int(0.25 * RATE)


def test_trim_tail_leaves_short_clips_alone():
    x = np.concatenate([tone(0.3), silence(0.5)])  # no run of 0.4 s: nothing to anchor on
    assert np.array_equal(post.trim_tail(x, RATE), x)


# -- resampling --------------------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [(22050, 16000), (24000, 16000), (16000, 48000)])
def test_resample_keeps_duration_and_pitch(src, dst):
    x = tone(1.0, amp=0.5, freq=440.0, rate=src)
    y = post.resample(x, src, dst)
    assert y.dtype == np.float32
    assert abs(len(y) - dst) <= 2
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    peak_hz = np.argmax(spectrum) * dst / len(y)
    assert abs(peak_hz - 440.0) < 2.0
    assert 0.45 < np.abs(y[len(y) // 4 : -len(y) // 4]).max() < 0.55


def test_resample_same_rate_is_identity():
    x = tone(0.1)
    assert post.resample(x, RATE, RATE) is not None
    assert np.array_equal(post.resample(x, RATE, RATE), x)


# -- seams and blocks --------------------------------------------------------------------

def test_fade_edges_starts_and_ends_near_zero_and_keeps_the_middle():
    x = np.full(1600, 0.5, dtype=np.float32)
    y = post.fade_edges(x, RATE, ms=10.0)
    assert abs(y[0]) < 0.01 and abs(y[-1]) < 0.01
    assert np.all(np.diff(y[:160]) >= 0)
    assert np.array_equal(y[160:-160], x[160:-160])
    assert np.max(np.abs(np.diff(y))) < 0.02  # no step anywhere


def test_to_blocks_zero_pads_the_last_block():
    x = np.arange(1, 51, dtype=np.float32)
    b = post.to_blocks(x, 20)
    assert b.shape == (3, 20)
    assert np.array_equal(b.reshape(-1)[:50], x)
    assert np.all(b[2, 10:] == 0)
    assert post.to_blocks(x[:40], 20).shape == (2, 20)
    assert post.to_blocks(x[:0], 20).shape == (0, 20)


def test_to_pcm16_clips():
    y = post.to_pcm16(np.array([0.0, 0.5, 1.5, -2.0], dtype=np.float32))
    assert y.dtype == np.int16
    assert list(y) == [0, 16384, 32767, -32767]


def test_prepare_piece_end_to_end():
    x = np.concatenate([np.zeros(7200, np.float32), tone(1.0, rate=24000), np.zeros(24000, np.float32)])
    blocks = post.prepare_piece(x, 24000, 16000, block=320)
    assert blocks.dtype == np.int16 and blocks.shape[1] == 320
    # 40 ms pre-roll + 1 s tone + 150 ms tail (+ up to one 100 ms window), in 20 ms blocks
    low = (0.04 + 1.0 + 0.15) * 16000 / 320
    assert low <= blocks.shape[0] <= low + 0.1 * 16000 / 320 + 1
    assert abs(int(blocks[0, 0])) < 50  # faded in


# -- a piece in parts -------------------------------------------------------------------------

@pytest.mark.parametrize("cuts", [[], [3072, 9216, 20000], [100, 200, 30000], [8000]])
@pytest.mark.parametrize("fade_ms", [10.0, 0.0])
def test_stream_post_joined_is_prepare_piece_of_the_whole(cuts: list[int], fade_ms: float):
    """Lead silence, speech, a click after it (the tail trim drops it): pushed in parts at 22.05 kHz,
    the blocks joined are the whole piece's prepare_piece blocks, sample for sample (no zero-padded
    gap, no fade at a seam); nothing goes out before the sound starts."""
    rate = 22050
    x = np.concatenate([noise(0.2, 0.002)[: round(0.2 * rate)], tone(1.4, rate=rate), silence(0.3, rate)])
    x[round(1.9 * rate):round(1.92 * rate)] = 0.5
    ref = post.prepare_piece(x, rate, 16000, 320, fade_ms)
    sp = post.StreamPost(rate, 16000, 320, fade_ms)
    edges = [0, *cuts, len(x)]
    parts = [sp.push(x[a:b], last=b == len(x)) for a, b in zip(edges, edges[1:])]
    assert np.array_equal(np.concatenate(parts), ref)
    if cuts[:1] == [100]:
        assert len(parts[0]) == len(parts[1]) == 0  # all quiet so far


def test_stream_post_of_silence_is_nothing():
    sp = post.StreamPost(RATE, RATE, 320)
    assert sp.push(silence(0.5)).shape == (0, 320) and sp.push(silence(0.5), last=True).shape == (0, 320)
