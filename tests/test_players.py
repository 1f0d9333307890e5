"""Players: paced null sink, WAV file, aplay (against a fake aplay script), sounddevice (fake stream)."""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import types
import wave

import numpy as np
import pytest
from fakes import RecordingPlayer, heard_until, wait_until

from rkvoice.audio import players
from rkvoice.audio.device_players import AplayPlayer, SounddevicePlayer
from rkvoice.audio.sinks import NullPlayer, TeePlayer, WavPlayer
from rkvoice.clock import MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from tests.support import FakeClock, ManualClock

CFG = Config()
RATE = CFG.audio.output_rate
BLOCK = RATE // 50  # 20 ms


def block(value: int = 1000) -> np.ndarray:
    return np.full(BLOCK, value, dtype=np.int16)


# -- null ----------------------------------------------------------------------------------

def test_null_player_keeps_real_time_accounting():
    clock = FakeClock()
    p = RecordingPlayer(CFG, clock)
    for _ in range(50):  # 1 s of audio handed over at once
        p.write(block())
    assert clock.now() == 0.0  # unbounded: handing over does not wait
    assert p.segments == [pytest.approx([0.0, 1.0])]
    clock.advance(2.0)
    p.write(block())  # after the device ran dry: a new segment
    assert p.segments[-1] == pytest.approx([2.0, 2.02])
    p.drain()
    assert clock.now() == pytest.approx(2.02)


def test_null_player_clear_cuts_what_is_heard():
    clock = FakeClock()
    p = RecordingPlayer(CFG, clock)
    for _ in range(100):
        p.write(block())
    clock.advance(0.3)
    p.clear()
    assert heard_until(p) == pytest.approx(0.3)
    p.drain()  # nothing left to wait for
    assert clock.now() == pytest.approx(0.3)


def test_paced_null_player_stays_at_most_max_ahead():
    clock = FakeClock()
    p = NullPlayer(CFG, clock, max_ahead_s=0.1)
    for _ in range(50):
        p.write(block())
        assert p.dry_at - clock.now() <= 0.1 + 0.02 + 1e-9
    assert clock.now() == pytest.approx(1.0 - 0.1 - 0.02, abs=1e-6)


def test_clear_wakes_a_paced_writer_on_the_real_clock():
    p = NullPlayer(CFG, MonotonicClock(), max_ahead_s=0.0)
    p.write(np.zeros(RATE * 30, dtype=np.int16))  # 30 s queued
    done = threading.Event()

    def writer():
        p.write(block())  # would wait ~30 s for the device
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    assert not done.wait(0.1)
    p.clear()
    assert done.wait(2.0)
    t.join()


def test_a_block_whose_wait_a_clear_cut_is_dropped():
    clock = ManualClock()
    p = NullPlayer(CFG, clock, max_ahead_s=0.0)
    p.write(np.zeros(RATE, dtype=np.int16))  # 1 s queued
    t = threading.Thread(target=p.write, args=(block(),), name="writer")  # waits for the device
    t.start()
    assert wait_until(lambda: clock.blocked("writer"))
    p.clear()  # a barge-in
    t.join(2.0)
    assert not t.is_alive()
    assert p.dry_at == 0.0  # the block was not booked after the clear: nothing plays


# -- wav -----------------------------------------------------------------------------------

def test_wav_player_renames_a_complete_file_on_close(tmp_path):
    out = tmp_path / "x.wav"
    p = WavPlayer(CFG, path=out)
    p.open()
    p.write(block(100))
    p.write(block(-100))
    assert not out.exists()  # nothing at the final path while writing
    p.close()
    with wave.open(str(out)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, RATE)
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert len(data) == 2 * BLOCK and data[0] == 100 and data[-1] == -100
    assert os.listdir(tmp_path) == ["x.wav"]


def test_wav_player_abort_leaves_nothing(tmp_path):
    out = tmp_path / "x.wav"
    p = WavPlayer(CFG, path=out)
    p.open()
    p.write(block())
    p.abort()
    assert os.listdir(tmp_path) == []


def test_wav_player_unwritable_path_is_a_clear_error(tmp_path):
    with pytest.raises(RkvoiceError, match="cannot write .*writable path"):
        WavPlayer(CFG, path=tmp_path / "no" / "such" / "x.wav").open()
    with pytest.raises(RkvoiceError, match="is a directory"):
        WavPlayer(CFG, path=tmp_path).open()


def test_tee_feeds_both_and_aborts_the_recorder(tmp_path):
    clock = FakeClock()
    null = RecordingPlayer(CFG, clock)
    wav = WavPlayer(CFG, path=tmp_path / "t.wav")
    tee = TeePlayer(null, wav)
    tee.open()
    tee.write(block())
    assert null.samples == wav.samples == BLOCK
    tee.abort()
    assert not (tmp_path / "t.wav").exists()


# -- aplay ---------------------------------------------------------------------------------

FAKE_APLAY = """#!{python}
import os, sys
log = {log!r}
try:  # the first instance may be told to die, later ones play everything
    os.close(os.open(os.path.join(log, "first"), os.O_CREAT | os.O_EXCL))
    first = True
except FileExistsError:
    first = False
pid = os.getpid()
open(os.path.join(log, "%d.argv" % pid), "w").write(" ".join(sys.argv[1:]))
total = 0
die_after = {die_after}
while True:
    data = sys.stdin.buffer.read(640)
    if not data:
        break
    total += len(data)
    open(os.path.join(log, "%d.bytes" % pid), "w").write(str(total))
    if first and die_after and total >= die_after:
        sys.stderr.write("aplay: main:831: audio open error: Device or resource busy\\n")
        sys.exit(1)
"""


def fake_aplay(tmp_path, die_after: int = 0):
    log = tmp_path / "log"
    log.mkdir()
    script = tmp_path / "aplay"
    script.write_text(FAKE_APLAY.format(python=sys.executable, log=str(log), die_after=die_after))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def run_bytes(log, pid):
    path = log / f"{pid}.bytes"
    return int(path.read_text()) if path.exists() else 0


def aplay(script, clock=None, max_ahead_s=0.25, **attrs):
    """An AplayPlayer running ``script`` (its command and retry_s are class attributes)."""
    p = type("TestAplay", (AplayPlayer,), {"command": (str(script),), **attrs})(CFG, clock)
    p.max_ahead_s = max_ahead_s
    return p


def test_aplay_gets_raw_pcm_with_explicit_format(tmp_path):
    script, log = fake_aplay(tmp_path)
    p = aplay(script, FakeClock())
    p.open()
    for _ in range(10):
        p.write(block())
    pid = p._proc.pid
    p.close()
    argv = (log / f"{pid}.argv").read_text().split()
    assert argv == ["-q", "-t", "raw", "-f", "S16_LE", "-r", str(RATE), "-c", "1", "-D", CFG.audio.device]
    assert run_bytes(log, pid) == 10 * BLOCK * 2


def test_dying_aplay_is_reported_and_reopened(tmp_path, caplog):
    script, log = fake_aplay(tmp_path, die_after=BLOCK * 2 * 3)
    clock = FakeClock()
    p = aplay(script, clock, retry_s=0.5, max_ahead_s=None)
    p.open()
    with caplog.at_level(logging.WARNING, logger="rkvoice.audio.device_players"):
        for _ in range(3):
            p.write(block())
        first = p._proc.pid
        p._proc.wait(5)  # the fake device gave up after three blocks
        for _ in range(5):  # writes into the dead pipe: reported once, then dropped while retrying
            p.write(block())
        clock.advance(1.0)  # retry time has passed
        for _ in range(4):
            p.write(block())
        second = p._proc.pid
    p.close()
    exits = [r for r in caplog.records if "exited (" in r.getMessage()]
    assert len(exits) == 1  # reported once
    assert "exited (code 1: aplay: main:831: audio open error: Device or resource busy)" in exits[0].getMessage()
    assert run_bytes(log, first) == 3 * BLOCK * 2
    assert run_bytes(log, second) == 4 * BLOCK * 2


def test_aplay_clear_kills_the_process_and_next_write_restarts(tmp_path, caplog):
    script, log = fake_aplay(tmp_path)
    p = aplay(script, FakeClock(), max_ahead_s=None)
    p.open()
    p.write(block())
    first = p._proc
    with caplog.at_level(logging.WARNING, logger="rkvoice.audio.device_players"):
        p.clear()
        assert first.poll() is not None  # killed: its buffered audio is gone
        p.write(block())
    second = p._proc.pid
    p.close()
    assert second != first.pid
    assert not caplog.records  # a clear is not a death
    assert run_bytes(log, second) == BLOCK * 2


def test_missing_aplay_is_a_clear_error():
    with pytest.raises(RkvoiceError, match="not found: install alsa-utils"):
        aplay("definitely-not-aplay-xyz").open()


# -- sounddevice (fake stream) -------------------------------------------------------------

class FakeStream:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.started = False

    def start(self):
        self.started = True

    def die(self):
        self.started = False
        self.kwargs["finished_callback"]()

    def pull(self, frames):
        out = np.zeros((frames, 1), dtype=np.int16)
        self.kwargs["callback"](out, frames, None, None)
        return out[:, 0]

    def stop(self):
        self.started = False

    def close(self):
        pass


def sounddevice_player(monkeypatch, factory):
    """A SounddevicePlayer whose streams ``factory`` makes: a stand-in ``sounddevice`` module is imported."""
    monkeypatch.setitem(sys.modules, "sounddevice", types.SimpleNamespace(OutputStream=factory))
    return SounddevicePlayer(CFG)


def test_sounddevice_player_feeds_callback_and_clear_drops_queue(monkeypatch):
    streams = []

    def factory(**kw):
        streams.append(FakeStream(**kw))
        return streams[-1]

    p = sounddevice_player(monkeypatch, factory)
    p.open()
    s = streams[0]
    assert s.started and s.kwargs["samplerate"] == RATE and s.kwargs["dtype"] == "int16"
    p.write(block(7))
    p.write(block(9))
    out = s.pull(BLOCK + 10)
    assert np.all(out[:BLOCK] == 7) and np.all(out[BLOCK:] == 9)
    p.clear()
    assert np.all(s.pull(BLOCK) == 0)  # nothing left after clear: silence
    # a writer blocked on a full queue is released by clear()
    p.max_ahead = 0
    p.write(block())
    released = threading.Event()
    t = threading.Thread(target=lambda: (p.write(block()), released.set()))
    t.start()
    assert not released.wait(0.1)
    p.clear()
    assert released.wait(2.0)
    t.join()


def test_sounddevice_stream_that_stops_is_reported_and_reopened(monkeypatch, caplog):
    streams = []

    def factory(**kw):
        streams.append(FakeStream(**kw))
        return streams[-1]

    p = sounddevice_player(monkeypatch, factory)
    p.open()
    p.write(block(5))
    p.max_ahead = 0
    blocked = threading.Event()
    released = threading.Event()

    def writer():
        blocked.set()
        p.write(block(6))  # waits for room on the device...
        released.set()

    t = threading.Thread(target=writer)
    t.start()
    assert blocked.wait(2.0) and not released.wait(0.1)
    with caplog.at_level(logging.WARNING, logger="rkvoice.audio.device_players"):
        streams[0].die()  # ...which goes away (unplugged)
        assert released.wait(2.0)  # the writer is not stuck
        t.join()
        p.write(block(7))
    assert len(streams) == 2 and streams[1].started
    assert [r.getMessage() for r in caplog.records] == ["sound device default stopped; opening it again"]
    assert np.all(streams[1].pull(BLOCK) == 7)
    p.close()
    assert not streams[1].started


@pytest.mark.parametrize("daemon, without_device", [(True, "null"), (False, "wav")])
def test_auto_player_is_the_device_else_null_for_the_daemon_and_wav_for_the_cli(monkeypatch, caplog, daemon,
                                                                                without_device):
    monkeypatch.setattr(players, "has_sound_device", lambda: None)
    with caplog.at_level(logging.WARNING, logger="rkvoice.audio.players"):
        assert players.choose_player(Config(), daemon=daemon) == without_device
    assert any("not played" in r.getMessage() for r in caplog.records) == daemon
    monkeypatch.setattr(players, "has_sound_device", lambda: "aplay")
    assert players.choose_player(Config(), daemon=daemon) == "aplay"
    assert players.choose_player(Config(), daemon=daemon, device=lambda: "sounddevice") == "sounddevice"


@pytest.mark.parametrize("name", ["aplay", "sounddevice", "wav", "null"])
def test_explicit_player_is_kept_with_or_without_a_device(name):
    from dataclasses import replace

    cfg = replace(Config(), audio=replace(Config().audio, player=name))
    for daemon in (True, False):
        assert players.choose_player(cfg, daemon=daemon, device=lambda: None) == name


def test_created_players_come_from_their_modules():
    from rkvoice.audio import device_players, sinks

    assert isinstance(players.PLAYERS.create("null", Config()), sinks.NullPlayer)
    assert isinstance(players.PLAYERS.create("aplay", Config()), device_players.AplayPlayer)


def test_unknown_player_names_the_choices():
    from dataclasses import replace

    cfg = Config()
    cfg = replace(cfg, audio=replace(cfg.audio, player="speakers"))
    with pytest.raises(RkvoiceError, match="choose one of: aplay, null, sounddevice, wav"):
        players.choose_player(cfg, daemon=False)
