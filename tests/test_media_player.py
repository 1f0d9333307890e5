"""The satellite's media player (rkvoice.satellite.media) against a local HTTP server: generated wav,
flac, ogg and mp3 files reach the player decoded, at its rate and level; volume and mute scale what
comes next; pause, resume, stop; the music waits while a reply plays and goes on after; a 404, a body
that is not audio, a stream cut or stalled mid-way each end the track with one warning; a two-hour stream
is read at the pace it plays; nothing is left running afterwards."""

from __future__ import annotations

import io
import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from fakes import wait_until

from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import load_config
from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.media import MediaPlayer, MediaSettings, MediaState
from rkvoice.satellite.playback import Playback
from rkvoice.satellite.state import SatelliteState
from tests.support.stop_rig import Port

TONE_RATE = 22050
TONE_HZ = 440.0
TONE_AMP = 0.5
FORMATS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "ogg": ("OGG", "VORBIS"),
           "mp3": ("MP3", "MPEG_LAYER_III")}


def tone(seconds: float, rate: int = TONE_RATE, amp: float = TONE_AMP) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * TONE_HZ * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


def encoded(ext: str, seconds: float) -> bytes:
    buf = io.BytesIO()
    fmt, subtype = FORMATS[ext]
    sf.write(buf, tone(seconds), TONE_RATE, format=fmt, subtype=subtype)
    return buf.getvalue()


def wav_header(rate: int, seconds: float) -> bytes:
    data = int(rate * seconds) * 2
    return (b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data))


@dataclass
class Site:
    """What the server serves, and what it saw."""

    files: dict[str, bytes] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)


class Handler(BaseHTTPRequestHandler):
    site: Site

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        site, path = self.site, self.path
        if path == "/missing":
            self.send_error(404)
        elif path == "/page":
            self._send(b"<html><body>" + b"not audio " * 2000 + b"</body></html>", "text/html")
        elif path == "/cut.wav":  # says 2 s, sends 0.5 s and closes
            body = wav_header(16000, 2.0) + (tone(0.5, 16000) * 32767).astype("<i2").tobytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(wav_header(16000, 2.0)) + 2 * 32000))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/stall.wav":  # says 10 s, sends 0.3 s and waits
            self.send_response(200)
            self.send_header("Content-Length", str(44 + 10 * 32000))
            self.end_headers()
            self.wfile.write(wav_header(16000, 10.0) + (tone(0.3, 16000) * 32767).astype("<i2").tobytes())
            self.wfile.flush()
            site.release.wait(10)
        elif path == "/endless.wav":  # two hours, made as it is sent
            self.send_response(200)
            self.end_headers()
            piece = (tone(0.5, 16000, 0.3) * 32767).astype("<i2").tobytes()
            site.sent[path] = 0
            try:
                self.wfile.write(wav_header(16000, 7200.0))
                while site.sent[path] < 7200 * 32000:
                    self.wfile.write(piece)
                    site.sent[path] += len(piece)
            except OSError:  # the player went away
                pass
        elif path.lstrip("/") in site.files:
            self._send(site.files[path.lstrip("/")], "audio/octet-stream")
        else:
            self.send_error(404)

    def _send(self, body: bytes, kind: str) -> None:
        first, last = 0, len(body) - 1
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            lo, _, hi = ranged[6:].partition("-")
            first, last = int(lo), min(last, int(hi) if hi else last)
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", kind)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        self.wfile.write(body[first : last + 1])


@pytest.fixture(scope="module")
def site() -> Iterator[tuple[Site, str]]:
    site = Site({f"tone.{ext}": encoded(ext, 1.0) for ext in FORMATS} | {"long.wav": encoded("wav", 4.0)})
    handler = type("SiteHandler", (Handler,), {"site": site})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    site.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


class KeepingPlayer(NullPlayer):
    """A null player at real-time pace that keeps what it was given."""

    def __init__(self) -> None:
        super().__init__(load_config(), max_ahead_s=0.1)
        self.blocks: list[np.ndarray] = []

    def write(self, block: np.ndarray) -> None:
        super().write(block)
        self.blocks.append(block.copy())

    def audio(self, first: int = 0) -> np.ndarray:
        blocks = self.blocks[first:]
        return np.concatenate(blocks).astype(np.float32) / 32767.0 if blocks else np.zeros(0, np.float32)


@dataclass
class Rig:
    player: KeepingPlayer
    playback: Playback
    media: MediaPlayer
    states: list[MediaState]

    def wait_idle(self, timeout: float = 10.0) -> None:
        assert wait_until(lambda: self.media.state is MediaState.IDLE, timeout), self.states


@pytest.fixture
def rig() -> Iterator[Rig]:
    player = KeepingPlayer()
    playback = Playback(player, None)
    playback.start()
    states: list[MediaState] = []
    media = MediaPlayer(playback, MediaSettings(stall_s=0.5), on_state=states.append)
    yield Rig(player, playback, media, states)
    media.close()
    playback.close()


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


@pytest.mark.parametrize("ext", list(FORMATS))
def test_each_format_reaches_the_player_at_its_rate_and_level(rig, site, ext):
    _, url = site
    rig.media.play(f"{url}/tone.{ext}")
    assert rig.media.state is MediaState.PLAYING
    rig.wait_idle()
    rate = rig.player.rate
    heard = rig.player.audio()
    assert abs(len(heard) / rate - 1.0) < 0.08, len(heard) / rate
    middle = heard[int(0.1 * rate) : int(0.9 * rate)]
    assert abs(peak_hz(middle, rate) - TONE_HZ) < 3.0
    assert abs(rms(middle) - TONE_AMP / np.sqrt(2)) < 0.03, rms(middle)
    assert rig.states == [MediaState.PLAYING, MediaState.IDLE]


def test_volume_and_mute_scale_what_comes_next(rig, site):
    _, url = site
    rig.media.set_volume(0.25)
    rig.media.play(f"{url}/tone.wav")
    rig.wait_idle()
    quarter = rig.player.audio()
    assert abs(rms(quarter[1600:-1600]) - 0.25 * TONE_AMP / np.sqrt(2)) < 0.01
    rig.media.set_volume(1.0)
    rig.media.set_muted(True)
    first = len(rig.player.blocks)
    rig.media.play(f"{url}/tone.wav")
    rig.wait_idle()
    muted = rig.player.audio(first)
    assert len(muted) > 0.9 * rig.player.rate and not np.any(muted)


def test_pause_resume_and_stop(rig, site):
    _, url = site
    rig.media.play(f"{url}/long.wav")
    assert wait_until(lambda: len(rig.player.blocks) > 10)
    rig.media.pause()
    assert rig.media.state is MediaState.PAUSED
    assert wait_until(lambda: rig.playback.playing is False)  # the pieces queued play out, no more come
    held = len(rig.player.blocks)
    assert not wait_until(lambda: len(rig.player.blocks) > held, 0.4)
    rig.media.resume()
    assert rig.media.state is MediaState.PLAYING
    assert wait_until(lambda: len(rig.player.blocks) > held + 10)
    rig.media.stop()
    assert rig.media.state is MediaState.IDLE
    assert wait_until(lambda: rig.playback.playing is False)
    stopped = len(rig.player.blocks)
    assert stopped * 0.02 < 3.0  # well before the end of the 4 s
    assert not wait_until(lambda: len(rig.player.blocks) > stopped, 0.4)
    assert rig.states == [MediaState.PLAYING, MediaState.PAUSED, MediaState.PLAYING, MediaState.IDLE]


def test_music_waits_while_a_reply_plays_and_goes_on_after(rig, site):
    """The reply's audio plays whole, with no music in it; the music comes back after it."""
    _, url = site
    core = SatelliteCore(Port(), rig.playback)
    core.on_state = rig.media.follow
    core.run_satellite()
    rig.media.play(f"{url}/long.wav")
    assert wait_until(lambda: len(rig.player.blocks) > 20)
    core.answering("好的")
    stream = core.stream_start(16000, 2, 1)
    assert stream is not None and core.state is SatelliteState.RESPONDING
    reply = np.full(8000, 12000, "<i2")  # 0.5 s at a level the tone never holds
    rig.playback.chunk(stream, reply.tobytes())
    rig.playback.end(stream)
    assert wait_until(lambda: core.state is SatelliteState.IDLE)
    after = len(rig.player.blocks)
    assert wait_until(lambda: len(rig.player.blocks) > after + 10)  # the music goes on
    rig.media.stop()
    is_reply = [bool(np.all(b == 12000)) for b in rig.player.blocks]
    first, last = is_reply.index(True), len(is_reply) - 1 - is_reply[::-1].index(True)
    assert all(is_reply[first : last + 1]) and (last - first + 1) * 320 == 8000
    assert any(np.any(b) for b in rig.player.blocks[last + 1 :])
    assert rig.media.state is MediaState.IDLE


def test_an_announcement_holds_the_music_and_it_goes_on_after(rig, site):
    _, url = site
    rig.media.play(f"{url}/long.wav")
    assert wait_until(lambda: len(rig.player.blocks) > 10)
    rig.media.play(f"{url}/tone.wav", announcement=True)
    assert wait_until(lambda: len(rig.player.blocks) > 100)  # the 1 s announcement has played (and more)
    assert rig.media.state is MediaState.PLAYING
    rig.media.stop()
    rig.wait_idle()
    assert rig.states == [MediaState.PLAYING, MediaState.IDLE]


@pytest.mark.parametrize("path, why", [("/missing", "HTTP 404"), ("/page", "Format not recognised"),
                                       ("/cut.wav", "closed the stream"), ("/stall.wav", "stalled"),
                                       ("ftp://127.0.0.1/x.wav", "not an http(s) URL")])
def test_bad_input_is_one_warning_and_the_player_goes_back_to_idle(rig, site, caplog, path, why):
    _, url = site
    caplog.set_level(logging.WARNING, logger="rkvoice.satellite.media")
    rig.media.play(path if "://" in path else url + path)
    rig.wait_idle()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and why in warnings[0].getMessage(), [r.getMessage() for r in warnings]
    assert rig.states == [MediaState.PLAYING, MediaState.IDLE]


def test_a_two_hour_stream_is_read_as_it_plays(rig, site):
    served, url = site
    rig.media.play(f"{url}/endless.wav")
    assert wait_until(lambda: len(rig.player.blocks) > 75)  # 1.5 s played
    assert served.sent["/endless.wav"] < 4 * 1024 * 1024  # socket buffers and a few pieces, not 460 MB
    rig.media.stop()
    rig.wait_idle()


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_nothing_is_left_running(site):
    """Good and bad tracks, stopped and played out: no thread or socket stays once the player is closed."""
    served, url = site
    threads, files = threading.active_count(), fds()
    player = KeepingPlayer()
    playback = Playback(player, None)
    playback.start()
    media = MediaPlayer(playback, MediaSettings(stall_s=0.5))
    for path in ("/tone.ogg", "/missing", "/page", "/cut.wav", "/stall.wav"):
        media.play(url + path)
        assert wait_until(lambda: media.state is MediaState.IDLE)
    media.play(f"{url}/endless.wav")
    media.play(f"{url}/tone.mp3", announcement=True)
    assert wait_until(lambda: len(player.blocks) > 20)
    media.close()
    playback.close()
    served.release.set()  # the stalled request's handler ends
    assert wait_until(lambda: threading.active_count() <= threads and fds() <= files), (
        threading.enumerate(), fds(), files)
