"""Pure pieces of rkvoice.hear: pinyin wake matching, CER, audio sources, mic fault recovery, cue."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest
import soundfile as sf

from rkvoice.config import load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.hear.cue import ack_cue, chime
from rkvoice.hear.pinyin_match import PhraseMatcher
from rkvoice.hear.sources import (
    DeviceError,
    MicSource,
    WavFileSource,
    microphone,
    read_wav,
)
from tests.support import FakeClock, RealtimeSource, cer


@pytest.mark.parametrize(
    "text, remainder",
    [
        ("小智小智", ""),
        ("小志小志。", ""),
        ("小知，小知", ""),
        ("晓智晓智，现在几点？", "现在几点？"),
        ("嗯，小智小智打开灯", "打开灯"),
        ("小只小智今天天气怎么样", "今天天气怎么样"),
    ],
)
def test_wake_phrase_and_near_homophones_match(text, remainder):
    found = PhraseMatcher("小智小智").match(text)
    assert found is not None and found.remainder == remainder


@pytest.mark.parametrize(
    "text", ["", "今天天气怎么样", "小智", "小时小时", "我们明天一起去公园散步吧", "谢谢观看", "好的，今天小智小智"]
)
def test_unrelated_text_does_not_match(text):
    assert PhraseMatcher("小智小智").match(text) is None


def test_fuzzy_initials_and_finals_cost_nothing_but_other_syllables_do():
    m = PhraseMatcher("金星", tolerance=0.0)
    assert m.match("京星") is not None  # in/ing
    assert m.match("金心") is not None  # x/x, ing/in
    assert m.match("金山") is None


def test_cer_ignores_punctuation_and_reads_digits():
    assert cer("帮我设置一个明天早上七点的闹钟", "帮我设置一个明天早上7点的闹钟。") == 0.0
    assert cer("今天天气怎么样", "今天天汽怎么样") == pytest.approx(1 / 7)
    assert cer("", "") == 0.0 and cer("", "嗯") == 1.0


def test_cer_verbatim_scores_digits_as_written():
    assert cer("早上七点", "早上7点。", read_digits=False) == pytest.approx(1 / 4)
    assert cer("早上七点", "早上七点。", read_digits=False) == 0.0


def test_wav_source_downmixes_and_resamples_once(tmp_path, caplog):
    t = np.arange(44100) / 44100
    stereo = np.stack([np.sin(2 * np.pi * 440 * t), np.zeros_like(t)], axis=1) * 0.5
    path = tmp_path / "stereo.wav"
    sf.write(path, stereo, 44100)
    with caplog.at_level(logging.INFO, logger="rkvoice.hear.sources"):
        src = WavFileSource(path)
    assert src.samples.dtype == np.float32 and src.samples.ndim == 1
    assert abs(len(src.samples) - 16000) <= 2
    assert 0.2 < np.abs(src.samples).max() < 0.3  # mean of a 0.5 tone and silence
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "2 channels -> mono" in notes[0] and "44100 Hz -> 16000 Hz" in notes[0]
    frames = list(src.frames())
    assert all(len(f) == 512 for f in frames[:-1]) and sum(map(len, frames)) == len(src.samples)


def test_corrupt_and_missing_files_are_clear_errors(tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("this is not audio")
    with pytest.raises(RkvoiceError) as err:
        read_wav(bad)
    assert err.value.code == "bad-audio" and "notes.wav" in str(err.value) and "WAV" in str(err.value)
    with pytest.raises(RkvoiceError) as err:
        read_wav(tmp_path / "missing.wav")
    assert err.value.code == "no-file"
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    with pytest.raises(RkvoiceError) as err:
        read_wav(empty)
    assert err.value.code == "bad-audio"


def test_realtime_source_paces_frames_on_the_clock():
    clock = FakeClock(100.0)
    src = RealtimeSource(np.zeros(16000, np.float32), clock=clock, tail_s=0.5)
    seen = []
    for frame in src.frames():
        seen.append((clock.now(), len(frame)))
    total = sum(n for _, n in seen)
    assert total == 24000
    assert seen[0][0] == pytest.approx(100.0 + 0.032)
    assert seen[-1][0] == pytest.approx(100.0 + 1.5, abs=0.033)


class FlakyStream:
    def __init__(self, frames_before_fault: int) -> None:
        self.left = frames_before_fault
        self.closed = False

    def read(self) -> np.ndarray:
        if self.left == 0:
            raise DeviceError("device unplugged")
        self.left -= 1
        return np.zeros(512, np.float32)

    def close(self) -> None:
        self.closed = True


def test_mic_faults_are_retried_with_backoff_and_recover(caplog):
    script: Iterator[str | int] = iter(["missing", "busy", 3, 2, "missing"])
    opened = []

    def opener():
        step = next(script)
        if isinstance(step, str):
            raise DeviceError(f"device {step}")
        opened.append(FlakyStream(step))
        return opened[-1]

    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) >= 5

    mic = MicSource(opener, "test", backoff=(0.5, 2.0), wait=wait)
    with caplog.at_level(logging.WARNING, logger="rkvoice.hear.sources"):
        got = list(mic.frames())
    assert len(got) == 5  # 3 frames, unplugged, reopened, 2 frames, unplugged, gone
    assert waits == [0.5, 1.0, 0.5, 0.5, 1.0]  # grows while failing, resets after a good read
    assert all(s.closed for s in opened)
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 5
    assert any("busy" in r.getMessage() and "retrying" in r.getMessage() for r in caplog.records)


def test_mic_source_stops_when_closed_during_backoff():
    def opener():
        raise DeviceError("no microphone")

    mic = MicSource(opener, "none", wait=lambda s: True)
    assert list(mic.frames()) == []


def test_arecord_without_device_is_retried_not_fatal(caplog):
    mic = microphone(load_config([parse_override("audio.input=arecord"), parse_override("audio.input_device=hw:99,0")]))
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) >= 2

    mic._wait = wait
    with caplog.at_level(logging.WARNING, logger="rkvoice.hear.sources"):
        assert list(mic.frames()) == []
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 2


def test_unknown_microphone_kind_names_the_choices():
    with pytest.raises(RkvoiceError, match="arecord, sounddevice"):
        microphone(load_config([parse_override("audio.input=pulse")]))


def test_chime_is_short_and_clean():
    c = chime(16000)
    assert 0.15 < len(c) / 16000 < 0.25 and np.abs(c).max() <= 0.31
    assert abs(c[0]) < 1e-3 and abs(c[-1]) < 0.01  # faded, no click


class Voice:
    """A loaded TtsEngine at 24 kHz that records what it was asked to say."""

    name = "recording"
    languages: tuple[str, ...] = ("zh",)
    sample_rate = 24000

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.loads = 0

    def load(self) -> None:
        self.loads += 1

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        self.calls.append(text)
        return np.full(2400, 0.1, np.float32), 24000


def test_voice_cue_is_said_once_at_load_by_the_loaded_voice():
    voice = Voice()
    cfg = load_config([parse_override("hear.ack=voice")])
    cue = ack_cue(cfg, voice, 16000)
    assert voice.calls == ["我在"] and abs(len(cue) - 1600) <= 2  # 0.1 s resampled to 16 kHz
    assert voice.loads == 0  # the answers' voice, already loaded: no second engine is made or loaded
    assert cue.dtype == np.float32


def test_chime_and_no_cue_do_not_use_the_voice():
    voice = Voice()
    assert np.array_equal(ack_cue(load_config([parse_override("hear.ack=chime")]), voice, 16000), chime(16000))
    assert len(ack_cue(load_config([parse_override("hear.ack=none")]), voice, 16000)) == 0
    assert voice.calls == []


def test_player_cue_hands_int16_blocks_to_the_player():
    import threading

    from rkvoice.turn_loop import player_cue

    class Recorder:
        name = "recorder"
        rate = 16000

        def __init__(self) -> None:
            self.blocks: list[np.ndarray] = []
            self.done = threading.Event()

        def open(self) -> None:
            pass

        def write(self, block: np.ndarray) -> None:
            self.blocks.append(block)
            if sum(map(len, self.blocks)) >= 2880:  # the 180 ms chime
                self.done.set()

        def drain(self) -> None:
            pass

        def clear(self) -> None:
            pass

        def close(self) -> None:
            pass

    player = Recorder()
    player_cue(player)(chime(16000))
    assert player.done.wait(5)
    assert all(b.dtype == np.int16 and len(b) == 320 for b in player.blocks)
    pcm = np.concatenate(player.blocks)
    assert 0.25 * 32767 < np.abs(pcm).max() <= 0.31 * 32767
