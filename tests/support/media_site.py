"""A local HTTP server of generated audio for the media player's tests (tests/test_media_player.py,
tests/test_stop_word.py): a 440 Hz tone as wav, flac, ogg and mp3, ranges served; a 404, an HTML page,
a stream cut and one that stalls mid-way, and a two-hour stream made as it is sent. And a player that
keeps what it plays, at real-time pace."""

from __future__ import annotations

import io
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import soundfile as sf

from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import load_config

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


def streamed_wav(wav: bytes, size: int = 0, tag: bool = False) -> bytes:
    """``wav`` with the RIFF and data sizes set to ``size`` as a streaming writer leaves them: 0 from Home
    Assistant's Wyoming TTS (frames unknown), 0xFFFFFFFF from FFmpeg to a pipe, which also puts a LIST
    chunk (``tag``) before the data."""
    at = wav.index(b"data")
    head, pcm = bytearray(wav[:at + 8]), wav[at + 8:]
    head[4:8] = head[at + 4:at + 8] = struct.pack("<I", size)
    if tag:
        info = b"INFOISFT" + struct.pack("<I", 14) + b"Lavf61.7.100\0\0"
        head[at:at] = b"LIST" + struct.pack("<I", len(info)) + info
    return bytes(head) + pcm


def unsized(flac: bytes) -> bytes:
    """``flac`` with STREAMINFO's total samples 0 (unknown), as a FLAC written to a pipe says it: Home
    Assistant's TTS and ffmpeg proxies."""
    data = bytearray(flac)
    fields = int.from_bytes(data[18:26], "big")  # rate (20 bits), channels, bits, then 36 bits of samples
    data[18:26] = (fields & ~((1 << 36) - 1)).to_bytes(8, "big")
    return bytes(data)


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
        elif path.startswith("/noranges/") and path.removeprefix("/noranges/") in site.files:
            self._send(site.files[path.removeprefix("/noranges/")], "audio/octet-stream", ranges=False)
        else:
            self.send_error(404)

    def _send(self, body: bytes, kind: str, ranges: bool = True) -> None:
        first, last = 0, len(body) - 1
        ranged = self.headers.get("Range", "") if ranges else ""
        if ranged.startswith("bytes="):
            lo, _, hi = ranged[6:].partition("-")
            first, last = int(lo), min(last, int(hi) if hi else last)
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", kind)
        if ranges:
            self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        self.wfile.write(body[first : last + 1])


@contextmanager
def serving(files: dict[str, bytes] | None = None) -> Iterator[tuple[Site, str]]:
    """The server on a free port: (its site, its base URL); the tones of every format and a 4 s wav
    (``long.wav``) unless ``files`` is given."""
    site = Site(files if files is not None else
                {f"tone.{ext}": encoded(ext, 1.0) for ext in FORMATS} | {"long.wav": encoded("wav", 4.0)})
    handler = type("SiteHandler", (Handler,), {"site": site})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
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
