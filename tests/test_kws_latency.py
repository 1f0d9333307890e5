"""The board's keyword spotter in time: at a pause it is fed zeros, so a keyword whose last token
ends a phrase is reported a short silence after the phrase, not a chunk, its right context and two
trailing blanks later. Asserted in audio time (sample counts) on the rigged stand-in, which emits
the tokens of 你好小智 whatever it hears, its last one 0.28 s into a fresh stream: restarting the
stream that long before the phrase's end puts the token on it (bench/wake_latency.py does the same
and measures the wall-clock latency)."""

from __future__ import annotations

import numpy as np
import pytest

from rkvoice.config import ROOT, load_config
from rkvoice.hear.kws import KwsWake
from rkvoice.hear.sources import to_mono_16k
from rkvoice.hear.vad import SAMPLE_RATE, vad_model_path

BOARD = [ROOT / "config.yaml", ROOT / "tests" / "fixtures" / "board-hearing.yaml"]
FRAME = 512
TOKEN_S = 0.28  # the rig's last token in a fresh stream (test_the_rig_puts_its_last_token_at_0_28_s)

pytestmark = pytest.mark.usefixtures("hearing_standins")  # the yaml names .cache/standins/hearing


@pytest.fixture(scope="module")
def phrase(hear_voice):
    """你好小智 said by the portable voice, then 1.5 s of silence; (audio, end of speech in samples)."""
    if not vad_model_path(load_config()).is_file():
        pytest.skip("silero VAD model is absent (run ./install.sh)")
    audio, rate = hear_voice.generate("你好小智")
    said = to_mono_16k(audio, rate)
    loud = np.nonzero(np.abs(said) >= np.abs(said).max() * 10 ** (-35 / 20))[0]
    lead = np.zeros(int(0.6 * SAMPLE_RATE), np.float32)
    return np.concatenate([lead, said, np.zeros(int(1.5 * SAMPLE_RATE), np.float32)]), len(lead) + int(loud[-1]) + 1


def spotter(pad: bool = True) -> KwsWake:
    """The spotter; without ``pad``, no pause watch: it waits for the audio itself, never fed zeros."""
    wake = KwsWake(load_config(files=BOARD))
    wake.load()
    if not pad:
        wake._vad = None
    return wake


def first_hit_after(wake: KwsWake, audio: np.ndarray, cut: int):
    """Feed ``audio`` in 32 ms frames, restarting the stream (audio going on) at sample ``cut``;
    the first detection after the cut and the number of samples fed by then."""
    fed = 0
    for i in range(0, len(audio), FRAME):
        if fed == cut:
            wake.restart(cut)
        hit = wake.accept(audio[i : i + FRAME])
        fed += len(audio[i : i + FRAME])
        if hit is not None and fed > cut:
            return hit, fed
    return None, fed


def test_the_rig_puts_its_last_token_at_0_28_s():
    wake = spotter()
    stream = wake._stream
    stamps = []
    kws = wake._kws
    zeros = np.zeros(FRAME, np.float32)
    for _ in range(40):
        stream.accept_waveform(SAMPLE_RATE, zeros)
        while kws.is_ready(stream):
            kws.decode_stream(stream)
            result = kws.keyword_spotter.get_result(stream)
            if result.keyword:
                stamps.append(list(result.timestamps))
                kws.reset_stream(stream)
    assert stamps[0][-1] == pytest.approx(TOKEN_S, abs=1e-6)


def test_a_phrase_end_is_reported_a_short_pause_after_it(phrase):
    audio, end = phrase
    cut = int(end - TOKEN_S * SAMPLE_RATE) // FRAME * FRAME  # the last token on the phrase's end
    padded, fed = first_hit_after(spotter(), audio, cut)
    assert padded is not None
    lag_s = (fed - end) / SAMPLE_RATE
    assert 0.1 < lag_s <= 0.3  # the pause watch's 0.1 s silence, then the zeros decode at once
    assert padded.end_s <= padded.at_s == fed / SAMPLE_RATE  # dated at where the speech stopped
    assert abs(padded.end_s - end / SAMPLE_RATE) < 0.2
    waited, fed_without = first_hit_after(spotter(pad=False), audio, cut)
    assert waited is not None
    assert (fed_without - end) / SAMPLE_RATE > 0.45  # the next chunk and its right context
    assert waited.end_s == waited.at_s


def test_the_stop_spotter_watches_for_a_shorter_pause_and_reports_sooner(phrase):
    """A stop phrase is said alone: its spotter's pause watch (STOP_PAUSE_S) ends it sooner than the
    wake's (on the bench's 11 voices: 178 against 242 ms of audio at p50)."""
    from rkvoice.satellite.stop_word import STOP_PAUSE_S, KwsStopEngine

    audio, end = phrase
    cut = int(end - TOKEN_S * SAMPLE_RATE) // FRAME * FRAME
    cfg = load_config(files=BOARD)
    stop = KwsStopEngine(cfg, (cfg.hear.wake_phrase,))  # the rig spots only its own phrase
    stop.load()
    assert stop.pause_s == STOP_PAUSE_S < KwsWake.pause_s
    hit, fed_stop = first_hit_after(stop, audio, cut)
    _, fed_wake = first_hit_after(spotter(), audio, cut)
    assert hit is not None and 0.05 < (fed_stop - end) / SAMPLE_RATE <= 0.25
    assert fed_wake - fed_stop >= FRAME  # at least a frame sooner


def test_the_pause_watch_goes_on_over_a_restart_and_starts_afresh_after_a_gap(phrase):
    audio, end = phrase
    cut = int(end - 0.1 * SAMPLE_RATE) // FRAME * FRAME  # 0.1 s of speech left: too short to be speech alone
    hits = {}
    for jump in (0, 10 * SAMPLE_RATE):
        wake = spotter()
        for i in range(0, cut, FRAME):
            wake.accept(audio[i : i + FRAME])
        wake.restart(cut + jump)  # jump 0: the audio goes on; else its time jumps, the speech is forgotten
        fed, hit = cut, None
        while hit is None and fed < len(audio):
            hit = wake.accept(audio[fed : fed + FRAME])
            fed += FRAME
        hits[jump] = hit
    went_on, after_gap = hits[0], hits[10 * SAMPLE_RATE]
    assert went_on is not None and went_on.end_s < went_on.at_s  # the pause ended the phrase heard before
    assert after_gap is not None and after_gap.end_s == after_gap.at_s  # no pause heard: it waited


def test_flush_decodes_the_whole_tail():
    wake = spotter()
    for _ in range(12):  # 0.384 s: not a whole chunk with its right context yet
        assert wake.accept(np.zeros(FRAME, np.float32)) is None
    hit = wake.flush()
    assert hit is not None and hit.end_s == hit.at_s == pytest.approx(12 * FRAME / SAMPLE_RATE)
    assert wake.flush() is None  # nothing left to decode
