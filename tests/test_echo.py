"""Echo cancellation: the cancellers on a synthetic echo, the delay estimate, the reference tap, the
mute fallback, the live source's timeline and the config key. Deterministic: seeded signals, FakeClock."""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fakes import RecordingPlayer

from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import DEFAULT_CONFIG, load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.hear import aec, speexdsp
from rkvoice.hear.echo import EchoCancelledSource, EchoFilter, PlayedAudio, ReferenceTap, echo_filter
from tests.support import FakeClock
from tests.support.echo import erle_db

RATE = 16000


def talk(seconds: float, seed: int) -> np.ndarray:
    """Speech-like audio: voiced harmonics with a wandering pitch and noisy bursts, syllable-rate
    envelope with pauses."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    t = np.arange(n) / RATE
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 20))
    noise = np.convolve(rng.standard_normal(n), np.ones(4) / 4, "same")
    syllable = np.clip(np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 6)), 0, None) ** 0.5
    pauses = np.repeat(rng.uniform(size=int(seconds * 2) + 1) > 0.2, RATE // 2)[:n]
    x = (voiced + 0.3 * noise) * syllable * pauses
    return (0.1 * x / np.sqrt(np.mean(x**2))).astype(np.float32)


def room(delay_s: float, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(0.08 * RATE)
    h = rng.standard_normal(n) * np.exp(-np.arange(n) / (0.015 * RATE)) * 0.1
    h[0] = 1.0
    return np.concatenate([np.zeros(int(delay_s * RATE)), h])


def run_filter(f: EchoFilter, mic: np.ndarray, start_tick: int, frame: int = 512) -> np.ndarray:
    return np.concatenate([f.process(mic[i : i + frame], start_tick + i) for i in range(0, len(mic), frame)])


def make(kind: str) -> aec.Canceller:
    if kind == "system-speexdsp" and not aec.system_speexdsp():
        pytest.skip("libspeexdsp is not installed (apt-get install libspeexdsp1)")
    package = {"webrtc": "livekit", "pyaec-speex": "pyaec", "pyaec-wrapper": "pyaec"}.get(kind)
    if package is not None and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    return {"webrtc": aec.WebrtcCanceller, "pyaec-speex": lambda: speexdsp.SpeexDspCanceller("pyaec"),
            "pyaec-wrapper": speexdsp.PyaecWrapperCanceller,
            "system-speexdsp": lambda: speexdsp.SpeexDspCanceller("system")}[kind]()


@pytest.mark.parametrize(("kind", "at_least"), [("webrtc", 20.0), ("pyaec-speex", 20.0), ("pyaec-wrapper", 20.0),
                                                ("system-speexdsp", 20.0)])
def test_canceller_removes_a_synthetic_echo(kind: str, at_least: float) -> None:
    ref = talk(8.0, seed=1)
    echo = np.convolve(ref, room(0.06))[: len(ref)].astype(np.float32)
    noise = (np.random.default_rng(9).standard_normal(len(ref)) * 1e-4).astype(np.float32)
    played = PlayedAudio()
    played.push(50_000, ref)
    f = EchoFilter(played, make(kind))
    out = run_filter(f, echo + noise, 50_000)
    assert f.delay is not None and abs(f.delay - int(0.06 * RATE)) <= 16  # found, not assumed
    settled = slice(4 * RATE, len(ref))
    assert erle_db(echo[settled], out[settled]) >= at_least


def test_delay_estimate_finds_the_lag_and_refuses_unrelated_audio() -> None:
    ref = talk(2.0, seed=2)
    mic = np.concatenate([np.zeros(1234, np.float32), ref])[: len(ref)] * 0.5
    lag, prominence = aec.estimate_delay(mic, ref, 8000)
    assert lag == 1234 and prominence > aec.DELAY_TRUST
    _lag, weak = aec.estimate_delay(talk(2.0, seed=5), ref, 8000)
    assert weak < aec.DELAY_TRUST
    assert aec.estimate_delay(mic, np.zeros_like(ref), 8000) == (0, 0.0)


def test_the_filter_follows_a_change_of_delay() -> None:
    class Passthrough:
        name = "id"
        resets = 0

        def process(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
            return mic

        def reset(self) -> None:
            self.resets += 1

    ref = talk(8.0, seed=4)
    mic = np.concatenate([np.convolve(ref[: 4 * RATE], room(0.03))[: 4 * RATE],
                          np.convolve(ref, room(0.11))[4 * RATE : len(ref)]]).astype(np.float32)
    played = PlayedAudio()
    played.push(0, ref)
    canceller = Passthrough()
    f = EchoFilter(played, canceller)
    run_filter(f, mic[: 4 * RATE], 0)
    assert f.delay is not None and abs(f.delay - 480) <= 8
    run_filter(f, mic[4 * RATE :], 4 * RATE)
    assert abs(f.delay - 1760) <= 8
    assert canceller.resets == 2  # the canceller is reset on each change of delay


def test_mute_fallback_silences_playback_and_the_echo_tail_only() -> None:
    played = PlayedAudio()
    played.push(RATE, np.full(RATE, 0.1, np.float32))  # plays from 1 s to 2 s
    f = EchoFilter(played, None, tail_s=0.3)
    f.delay = int(0.05 * RATE)  # the mute path never estimates it (that takes a canceller)
    mic = np.full(4 * RATE, 0.2, np.float32)
    out = run_filter(f, mic, 0, frame=160)
    assert f.canceller is None  # the mute
    assert np.all(out[: RATE - 160] == 0.2)  # before playback: heard
    assert np.all(out[RATE : int(2.35 * RATE) - 160] == 0.0)  # playing + delay + tail: muted
    assert np.all(out[int(2.35 * RATE) + 160 :] == 0.2)  # after the tail: heard again
    assert np.count_nonzero(out == 0.0) / RATE == pytest.approx(1.35, abs=0.02)  # the time muted


def test_reference_tap_places_blocks_when_heard_and_clear_erases_the_unheard() -> None:
    clock = FakeClock(10.0)
    cfg = load_config(files=[DEFAULT_CONFIG])
    inner = RecordingPlayer(replace(cfg, audio=replace(cfg.audio, output_rate=RATE)), clock)
    played = PlayedAudio()
    tap = ReferenceTap(inner, played, clock)
    block = np.full(320, 16384, np.int16)  # 20 ms at 0.5
    for _ in range(10):
        tap.write(block)
    assert inner.blocks == 10  # the player got every block
    start = 10 * RATE
    assert played.end_tick == start + 3200
    assert np.allclose(played.read(start - 100, 100), 0.0)
    assert np.allclose(played.read(start, 3200), 0.5)
    clock.advance(0.1)  # half of it heard, then a barge-in
    tap.clear()
    assert played.end_tick == start + 1600
    assert np.allclose(played.read(start + 1600, 1600), 0.0)
    assert inner.segments[-1][1] == pytest.approx(10.1)  # the player was cleared too
    tap.write(block)  # the next answer starts now, not after the dropped audio
    assert played.read(round(10.1 * RATE), 1)[0] == pytest.approx(0.5)


def test_reference_tap_resamples_to_16k() -> None:
    clock = FakeClock(0.0)
    cfg = load_config(files=[DEFAULT_CONFIG])
    played = PlayedAudio()
    tap = ReferenceTap(NullPlayer(replace(cfg, audio=replace(cfg.audio, output_rate=24000)), clock), played, clock)
    for _ in range(50):
        tap.write(np.full(480, 8192, np.int16))
    ref = played.read(0, RATE)
    assert 15000 <= (played.end_tick or 0) <= 16000
    assert abs(float(np.median(ref[2000:14000])) - 0.25) < 0.01


def test_live_source_anchors_on_the_earliest_arrival() -> None:
    clock = FakeClock(100.0)
    seen: list[int] = []

    class Recorder(EchoFilter):
        def process(self, frame: np.ndarray, start_tick: int) -> np.ndarray:
            seen.append(start_tick)
            return frame

    class Mic:
        sample_rate = RATE

        def frames(self):  # type: ignore[no-untyped-def]
            for late in (0.0, 0.0, 0.05, 0.0, 0.2):  # some reads come late, none early
                clock.advance(0.032 + late)
                yield np.zeros(512, np.float32)

        def close(self) -> None:
            pass

    src = EchoCancelledSource(Mic(), Recorder(PlayedAudio(), None), clock)
    list(src.frames())
    assert seen == [100 * RATE + 512 * i for i in range(5)]  # contiguous: lateness does not shift them


def test_config_key_is_validated_and_the_check_names_the_canceller(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_config([parse_override("hear.aec=off")], files=[DEFAULT_CONFIG]).hear.aec == "off"
    with pytest.raises(RkvoiceError, match=r"hear\.aec.*one of: auto, webrtc, speex, off, external"):
        load_config([parse_override("hear.aec=xmos")], files=[DEFAULT_CONFIG])
    name, problems, notes = aec.describe("off", 300)
    assert (name, problems) == ("off", []) and "muted" in notes[0] and "300 ms" in notes[0]
    monkeypatch.setattr(aec, "installed", lambda n: n == "speex")
    assert aec.resolve("auto") == "speex"
    name, problems, _notes = aec.describe("webrtc", 300)
    assert name == "webrtc" and "livekit" in problems[0]
    monkeypatch.setattr(aec, "installed", lambda n: False)
    assert aec.resolve("auto") == "off" and aec.create_canceller("auto") is None
    cfg = load_config([parse_override("hear.aec=auto")], files=[DEFAULT_CONFIG])
    f = echo_filter(cfg, PlayedAudio())
    assert f is not None and f.canceller is None  # nothing installed: the safe fallback, the mute
    external = load_config([parse_override("hear.aec=external")], files=[DEFAULT_CONFIG])
    assert echo_filter(external, PlayedAudio()) is None  # the sound server cancels: the mic as it is
    assert aec.describe("external", 300)[0] == "external"


def test_file_replay_with_a_reference_cancels_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import soundfile as sf

    from rkvoice.cli.modes import reference_source
    from rkvoice.hear.sources import WavFileSource

    ref = talk(3.0, seed=6)
    sf.write(tmp_path / "ref.wav", ref, RATE, subtype="FLOAT")
    cfg = load_config([parse_override("hear.aec=off")], files=[DEFAULT_CONFIG])
    mic = WavFileSource(np.full(4 * RATE, 0.2, np.float32))
    assert reference_source(mic, argparse.Namespace(reference=None), cfg) is mic
    src = reference_source(mic, argparse.Namespace(reference=str(tmp_path / "ref.wav")), cfg)
    out = np.concatenate(list(src.frames()))
    assert np.all(out[: 3 * RATE] == 0.0) and np.all(out[-RATE // 8 :] == 0.2)  # muted while it played


def test_reference_needs_file(capsys: pytest.CaptureFixture[str]) -> None:
    from rkvoice.cli.entry import main

    assert main(["--reference", "ref.wav", "--say", "你好"]) == 2
    assert "--reference only applies to --file" in capsys.readouterr().err


def test_the_speak_stage_taps_its_player(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from fakes import FakeVoice

    from rkvoice.stages import Speak

    cfg = load_config([{"hear": {"ack": "none"}}], files=[DEFAULT_CONFIG])
    inner: list[RecordingPlayer] = []
    speak = Speak(cfg, player=lambda c: inner.append(RecordingPlayer(c)) or inner[0], tts=lambda c: FakeVoice())
    speak.load()
    try:
        assert isinstance(speak.player, ReferenceTap) and speak.player.player is inner[0]
        speak.player.write(np.full(320, 1000, np.int16))
        assert speak.played.end_tick is not None and inner[0].blocks == 1
    finally:
        speak.close()


def test_check_names_the_canceller_or_the_mute() -> None:
    import io

    from rkvoice.cli.check import PROBE, run_check

    for setting, expect in (("off", "muted while the speaker plays"), ("external", "the sound server")):
        cfg = load_config([parse_override(f"hear.aec={setting}")], files=[DEFAULT_CONFIG])
        out = io.StringIO()
        run_check(cfg, out, probe=replace(PROBE, sound_output=lambda: None, microphone=lambda: False))
        line = next(x for x in out.getvalue().splitlines() if "] echo" in x)
        assert line.split()[-1] == setting and expect in out.getvalue()


def test_pyaec_build_is_driven_like_the_system_library(tmp_path: Path) -> None:
    """pyaec's libaec.so exports only its wrapper: the speexdsp functions are found in its symbol
    table, and the canceller is told 16 kHz (its rate fields hold speexdsp's 16 kHz constants)."""
    if importlib.util.find_spec("pyaec") is None:
        pytest.skip("pyaec is not installed")
    symbols = speexdsp.elf_functions(speexdsp.load_pyaec()[1])
    assert {"AecNew", *speexdsp.FUNCTIONS} <= set(symbols)
    c = speexdsp.SpeexDspCanceller("pyaec")
    ints = ctypes.cast(c._echo, ctypes.POINTER(ctypes.c_int32))
    shorts = ctypes.cast(c._echo + 40, ctypes.POINTER(ctypes.c_int16))  # type: ignore[operator]
    assert (ints[0], ints[9]) == (aec.FRAME, RATE)
    assert (shorts[0], shorts[1], shorts[2]) == ((160 << 15) // RATE, (160 << 16) // RATE, (160 << 14) // RATE)
    notch = ctypes.cast(c._echo + speexdsp.NOTCH_AT, ctypes.POINTER(ctypes.c_int16))  # type: ignore[operator]
    assert (notch[0], notch[1]) == (speexdsp.Q15_0_9, speexdsp.Q15_0_982)  # preemph kept, the 16 kHz notch
    c.reset()  # a fresh state is set again (speexdsp starts it at 8 kHz)
    assert ctypes.cast(c._echo, ctypes.POINTER(ctypes.c_int32))[9] == RATE
    (tmp_path / "not-elf.so").write_bytes(b"#!/bin/sh\n")
    assert speexdsp.elf_functions(tmp_path / "not-elf.so") == {}


def test_speex_falls_back_to_pyaecs_wrapper_when_its_symbols_are_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("pyaec") is None:
        pytest.skip("pyaec is not installed")
    monkeypatch.setattr(aec, "system_speexdsp", lambda: None)
    c = aec.speex()
    assert isinstance(c, speexdsp.SpeexDspCanceller) and c.build == "pyaec"
    monkeypatch.setattr(speexdsp, "elf_functions", lambda path: {"AecNew": 1})
    assert type(aec.speex()) is speexdsp.PyaecWrapperCanceller
    monkeypatch.undo()
    monkeypatch.setattr(aec, "system_speexdsp", lambda: None)
    monkeypatch.setattr(speexdsp, "NOTCH_AT", 280)  # the fields checked are not where speexdsp 1.2.1 has them
    assert type(aec.speex()) is speexdsp.PyaecWrapperCanceller
