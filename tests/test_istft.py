import numpy as np
import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.npu.istft import StftConfig, istft, istft_mag_xy, make_window

CFG = StftConfig(n_fft=1024, hop_length=256, win_length=1024, window="hann", center=True)


def stft(signal: np.ndarray, cfg: StftConfig) -> np.ndarray:
    """Complex STFT [bins, frames] of a 1-D signal: the forward transform ``istft`` inverts."""
    x = np.asarray(signal, dtype=np.float64)
    if cfg.center:
        x = np.pad(x, (cfg.n_fft // 2, cfg.n_fft // 2), mode="reflect")
    frames = 1 + (len(x) - cfg.n_fft) // cfg.hop_length
    idx = np.arange(cfg.n_fft)[None, :] + cfg.hop_length * np.arange(frames)[:, None]
    spec = np.fft.rfft(x[idx] * make_window(cfg)[None, :], axis=1)
    return (spec / np.sqrt(cfg.n_fft) if cfg.normalized else spec).T


def istft_mag_phase(mag: np.ndarray, phase: np.ndarray, cfg: StftConfig) -> np.ndarray:
    """ISTFT from magnitude and phase (radians): what istft_mag_xy takes as cos/sin of the phase."""
    return istft(np.asarray(mag) * np.exp(1j * np.asarray(phase)), cfg)


def _signal(n: int, sr: int = 16000) -> np.ndarray:
    t = np.arange(n) / sr
    rng = np.random.default_rng(0)
    return (0.5 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 1375.3 * t)
            + 0.05 * rng.standard_normal(n))


@pytest.mark.parametrize("cfg", [CFG, StftConfig(n_fft=512, hop_length=128, win_length=400),
                                 StftConfig(n_fft=1024, hop_length=256, win_length=1024, normalized=True),
                                 StftConfig(n_fft=800, hop_length=300, win_length=800)])
def test_reconstructs_known_signal_from_magnitude_and_phase(cfg):
    frames = 60
    x = _signal(cfg.hop_length * (frames - 1))
    spec = stft(x, cfg)
    assert spec.shape == (cfg.bins, frames)
    y = istft_mag_phase(np.abs(spec), np.angle(spec), cfg)
    assert y.dtype == np.float32
    assert len(y) == cfg.hop_length * (frames - 1) == len(x)
    assert np.max(np.abs(y - x)) < 1e-4


def test_mag_xy_equals_mag_phase_and_accepts_batch_dim():
    x = _signal(256 * 99)
    spec = stft(x, CFG)
    mag, ph = np.abs(spec), np.angle(spec)
    a = istft_mag_phase(mag, ph, CFG)
    b = istft_mag_xy(mag[None], np.cos(ph)[None], np.sin(ph)[None], CFG)
    assert np.max(np.abs(a - b)) < 1e-6
    assert np.max(np.abs(b - x)) < 1e-4


def test_hop_alignment_impulse_lands_on_its_sample():
    n = 256 * 40
    for pos in (0, 1, 255, 256, 5000, n - 1):
        x = np.zeros(n)
        x[pos] = 1.0
        y = istft(stft(x, CFG), CFG)
        assert int(np.argmax(np.abs(y))) == pos
        assert abs(y[pos] - 1.0) < 1e-4


def test_dropping_leading_frames_shifts_output_by_whole_hops():
    x = _signal(256 * 79)
    spec = stft(x, CFG)
    assert spec.shape[1] == 80
    k = 10
    y = istft(spec[:, k:], CFG)
    # frame k is centred on sample k*hop; with centre trimming the output starts there
    # (the first n_fft//2 samples lack full overlap, so compare from there on)
    ref = x[k * 256:]
    half = CFG.n_fft // 2
    assert len(y) == 256 * (80 - k - 1)
    assert np.max(np.abs(y[half:] - ref[half:len(y)])) < 1e-4


def test_matches_naive_overlap_add_on_arbitrary_spectrum():
    cfg = StftConfig(n_fft=64, hop_length=16, win_length=48, center=False)
    rng = np.random.default_rng(1)
    spec = rng.standard_normal((33, 12)) + 1j * rng.standard_normal((33, 12))
    spec[0].imag = 0
    spec[-1].imag = 0
    win = make_window(cfg)
    total = cfg.n_fft + cfg.hop_length * 11
    out = np.zeros(total)
    env = np.zeros(total)
    for t in range(12):
        frame = np.fft.irfft(spec[:, t], n=64) * win
        out[t * 16:t * 16 + 64] += frame
        env[t * 16:t * 16 + 64] += win ** 2
    ok = env > 1e-11
    out[ok] /= env[ok]
    out[~ok] = 0
    y = istft(spec, cfg)
    assert len(y) == total
    assert np.max(np.abs(y - out)) < 1e-5


def test_from_metadata_reads_vocos_keys_and_rejects_junk():
    cfg = StftConfig.from_metadata({"n_fft": "512", "hop_length": "128", "win_length": "512",
                                    "window_type": "hann", "center": "1", "normalized": "0"})
    assert (cfg.n_fft, cfg.hop_length, cfg.win_length, cfg.center) == (512, 128, 512, True)
    assert StftConfig.from_metadata({}) == StftConfig()
    with pytest.raises(RkvoiceError, match="hop_length"):
        StftConfig.from_metadata({"hop_length": "x"})
    with pytest.raises(RkvoiceError, match="window"):
        StftConfig(window="kaiser")


def test_wrong_bin_count_names_n_fft():
    with pytest.raises(RkvoiceError, match="n_fft=1024"):
        istft(np.zeros((257, 10), complex), CFG)
