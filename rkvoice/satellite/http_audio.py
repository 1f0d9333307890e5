"""Audio from an HTTP(S) URL, decoded as it arrives, in bounded memory: ``HttpBody`` (the streamed body
as the file a decoder reads) and ``decoded`` (mono float32 pieces at a rate). The media player's input
(rkvoice.satellite.media)."""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urljoin, urlsplit

import numpy as np

from rkvoice.satellite.wav_stream import read_header, streamed_pcm

HEAD_KEEP = 256 * 1024
"""The body's first bytes, kept: a decoder comes back to its header after probing the end."""
WINDOW = 256 * 1024
"""The newest bytes kept (a decoder's short seeks back)."""
SKIP_MAX = 1 << 20
"""A forward seek up to this is read through; a farther one is a probe of the end (``HttpBody._probe``)."""
PROBE_BYTES = 64 * 1024
"""Bytes fetched by one ranged request of the end."""
UNKNOWN_SIZE = 2**31 - 1
"""The length told to the decoder when the server gives none (a live stream)."""
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)


class MediaError(Exception):
    """The URL gave no audio body (one line for the log)."""


class HttpBody:
    """A streamed HTTP(S) GET as the file libsndfile reads (``read``/``seek``/``tell``), in bounded memory:
    the first ``HEAD_KEEP`` and the last ``WINDOW`` bytes received are kept, a short seek forward reads
    through, a far one (a decoder probing the end for its length or tags) is a ranged request when the
    server takes them, else zeros. ``read`` never raises (libsndfile calls it through cffi): a failure
    ends the body and is kept in ``error``. ``abort()`` (any thread) ends a read blocked on the network."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.error: BaseException | None = None
        self.pos = 0
        self.received = 0
        """Bytes of the body read from the network."""
        self._head = bytearray()
        self._window = bytearray()
        self._window_at = 0
        self._probe_at, self._probed = -1, b""
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._aborted = False
        self._conn, self._resp = self._get(url)
        length = self._resp.getheader("Content-Length")
        self.size = int(length) if length and length.isdigit() else UNKNOWN_SIZE
        self.ranges = self.size != UNKNOWN_SIZE and self._resp.getheader("Accept-Ranges", "") == "bytes"

    def _get(self, url: str, first: int | None = None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """An open response (a redirect followed); MediaError for anything but the body asked for."""
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise MediaError(f"not an http(s) URL: {url[:200]!r}")
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = kind(parts.hostname, parts.port, timeout=self.timeout_s)
            try:
                conn.connect()
                self._track(conn.sock)
                headers = {"User-Agent": "rkvoice", "Accept": "audio/*, */*"}
                if first is not None:
                    headers["Range"] = f"bytes={first}-{first + PROBE_BYTES - 1}"
                conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
                resp = conn.getresponse()
            except BaseException:
                conn.close()
                raise
            location = resp.getheader("Location")
            if resp.status in REDIRECTS and location:
                resp.close()
                conn.close()
                url = urljoin(url, location)
                continue
            if resp.status != (200 if first is None else 206):
                resp.close()
                conn.close()
                raise MediaError(f"HTTP {resp.status} {resp.reason}")
            return conn, resp
        raise MediaError(f"more than {MAX_REDIRECTS} redirects")

    def _track(self, sock: socket.socket | None) -> None:
        with self._lock:
            if sock is not None:
                self._socks.append(sock)
            if self._aborted:
                self._shutdown()

    def _shutdown(self) -> None:
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            self._shutdown()

    def close(self) -> None:
        self._resp.close()
        self._conn.close()

    # -- the file libsndfile reads ---------------------------------------------------------------

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self.pos, self.size)[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = PROBE_BYTES if n < 0 else n
        out = bytearray()
        while len(out) < n:
            try:
                part = self._read_some(self.pos, n - len(out))
            except Exception as exc:  # the network's fault, not ours: the body ends here
                if self.error is None:
                    self.error = exc
                part = b""
            if not part:
                break
            out += part
            self.pos += len(part)
        return bytes(out)

    def _read_some(self, pos: int, n: int) -> bytes:
        if pos < self.received:
            if pos < len(self._head):
                return bytes(self._head[pos : pos + n])
            if pos >= self._window_at:
                return bytes(self._window[pos - self._window_at : pos - self._window_at + n])
            return self._probe(pos, n)
        if self.error is not None or pos >= self.size:
            return b""
        if pos - self.received > SKIP_MAX:
            return self._probe(pos, n)
        while self.received < pos:
            if not self._pull(pos - self.received):
                return b""
        return self._pull(n)

    def _pull(self, n: int) -> bytes:
        data = self._resp.read1(min(n, PROBE_BYTES))
        if not data and self.received < self.size != UNKNOWN_SIZE:  # http.client's read1 does not tell
            raise MediaError(f"the server closed the stream after {self.received} of {self.size} bytes")
        if len(self._head) < HEAD_KEEP:
            self._head += data[: HEAD_KEEP - len(self._head)]
        self._window += data
        if len(self._window) > 2 * WINDOW:
            drop = len(self._window) - WINDOW
            del self._window[:drop]
            self._window_at += drop
        self.received += len(data)
        return data

    def _probe(self, pos: int, n: int) -> bytes:
        """Bytes far from what was received: fetched by a ranged request, else zeros (an mp3's ID3v1 tag
        is then absent; an ogg is then decoded by PyAV front to back: ``decoded``)."""
        if pos >= self.size:
            return b""
        if not self.ranges:
            return bytes(min(n, self.size - pos, PROBE_BYTES))
        if not self._probe_at <= pos < self._probe_at + len(self._probed):
            conn, resp = self._get(self.url, pos)
            try:
                self._probe_at, self._probed = pos, resp.read(PROBE_BYTES)
            finally:
                resp.close()
                conn.close()
                with self._lock:
                    self._socks = [s for s in self._socks if s is not conn.sock]
        if not self._probed:
            return b""
        return self._probed[pos - self._probe_at : pos - self._probe_at + n]


UNKNOWN_FRAMES = 2**63 - 1
"""libsndfile's frame count of a stream whose header does not say its length (SF_COUNT_MAX): the FLAC of
Home Assistant's TTS and ffmpeg proxies, written to a pipe. libsndfile's FLAC reader fails to read one
("Internal psf_fseek() failed": its seek after each read); PyAV decodes it."""


def is_mp3(head: bytes) -> bool:
    """An ID3v2 tag or an MPEG audio frame's sync word."""
    return head.startswith(b"ID3") or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0)


def decoded(body: HttpBody, rate: int, piece_ms: int, stopped: threading.Event) -> Iterator[np.ndarray]:
    """``body`` decoded as it arrives: mono float32 at ``rate``, about ``piece_ms`` at a time, until its
    end or ``stopped``. libsndfile decodes wav, flac and ogg; PyAV (FFmpeg) decodes mp3 (libsndfile 1.2's
    mp3 reader garbles a VBR file read in pieces: mpg123 "part2_3_length too large"), an ogg from a
    server that takes no ranges (libsndfile reads an ogg's length from its last page: without it, it
    stops at the last page it found near the start), and a stream that does not say its length (HA's
    proxied FLAC: ``UNKNOWN_FRAMES``); a WAV whose header does not say its length (a streamed reply) is
    read to the body's end (rkvoice.satellite.wav_stream)."""
    head = body.read(4)
    body.seek(0)
    if head == b"RIFF":
        fmt = read_header(body)
        if fmt is not None and fmt.streamed:  # HA's streamed TTS, FFmpeg to a pipe: libsndfile reads 0 frames
            yield from streamed_pcm(body, fmt, rate, piece_ms, stopped)
            return
        body.seek(0)
    if is_mp3(head) or (head.startswith(b"OggS") and not body.ranges and has_av()):
        yield from _av_decoded(body, rate, stopped)
        return
    import soundfile
    import soxr

    try:
        snd = soundfile.SoundFile(body)
    except soundfile.LibsndfileError as exc:
        raise MediaError(f"not playable audio ({exc.error_string})") from exc
    if snd.frames >= UNKNOWN_FRAMES and has_av():  # libsndfile's reader fails on it after its first read
        snd.close()
        body.seek(0)
        yield from _av_decoded(body, rate, stopped)
        return
    with snd:
        resampler = soxr.ResampleStream(snd.samplerate, rate, 1, dtype="float32") if snd.samplerate != rate else None
        buf = np.empty((max(1, snd.samplerate * piece_ms // 1000), snd.channels), np.float32)
        while not stopped.is_set():
            got = snd.read(out=buf)
            x = got.mean(axis=1) if len(got) else np.zeros(0, np.float32)
            yield x if resampler is None else resampler.resample_chunk(x, last=not len(got))
            if not len(got):
                return


class Forward:
    """``body`` read front to back only: FFmpeg then streams it as it does a pipe (no probe of the end)."""

    def __init__(self, body: HttpBody) -> None:
        self.body = body

    def read(self, n: int = -1) -> bytes:
        return self.body.read(n)


def has_av() -> bool:
    return importlib.util.find_spec("av") is not None


def _av_decoded(body: HttpBody, rate: int, stopped: threading.Event) -> Iterator[np.ndarray]:
    try:
        import av
    except ImportError as exc:
        raise MediaError("mp3 needs PyAV (pip install av)") from exc
    try:
        with av.open(Forward(body), "r") as container:
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            for frame in container.decode(audio=0):
                if stopped.is_set():
                    return
                for out in resampler.resample(frame):
                    yield out.to_ndarray().reshape(-1)
            for out in resampler.resample(None):
                yield out.to_ndarray().reshape(-1)
    except av.FFmpegError as exc:
        raise MediaError(f"not playable audio ({exc})") from exc


def reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the server stalled"
    return str(exc) or type(exc).__name__
