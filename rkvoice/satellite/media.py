"""The satellite's media player: what Home Assistant's ``media_player`` entity drives on the board.

``play(url, announcement)`` streams an HTTP(S) URL (music, or an announcement over it), decodes it with
libsndfile (``soundfile``: wav, flac, ogg vorbis/opus, mp3) as it arrives, resamples it to the player's
rate and hands it to the satellite's ``Playback`` a few pieces at a time (``Playback.cue(..., done)``),
so memory stays bounded for a two-hour stream and whatever the satellite plays next (a reply, the
board's words) waits behind at most ``ahead`` pieces. ``hold(True)`` (``follow(state)``: the satellite
streams a request or plays something) keeps the music back until it is released; an announcement holds
the music the same way and the music goes on after it. ``pause``/``resume``/``stop``, ``set_volume``
(0..1) and ``set_muted`` act on what comes next. ``on_state(state)`` is told of every change of
``state`` (idle / playing / paused), from the caller's thread or the track's.

Bad input (a URL that fails or is not audio, a body that is cut or stalls) is one warning line; the
track ends and the state goes back to what it was without it (idle).
"""

from __future__ import annotations

import contextlib
import enum
import http.client
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import numpy as np

from .playback import Playback
from .state import SatelliteState

log = logging.getLogger(__name__)

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
        is then absent; an ogg's length may be read from an earlier page)."""
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


class MediaState(enum.StrEnum):
    IDLE = "idle"
    PLAYING = "playing"
    PAUSED = "paused"


@dataclass(frozen=True)
class MediaSettings:
    piece_ms: int = 100
    """Audio handed to the playback at a time."""
    ahead: int = 3
    """Pieces queued on the playback at most (what comes next waits behind them)."""
    stall_s: float = 10.0
    """Longest wait for the server (connecting, each read): a stream that stalls longer ends."""


@dataclass(eq=False)
class Track:
    """One URL being played."""

    url: str
    announcement: bool
    stopped: threading.Event = field(default_factory=threading.Event)
    queued: int = 0
    """Pieces with the playback, not yet played."""
    played_s: float = 0.0
    """Audio handed to the playback."""
    body: HttpBody | None = None
    thread: threading.Thread | None = None

    def stop(self) -> None:
        self.stopped.set()
        if self.body is not None:
            self.body.abort()


class MediaPlayer:
    """Music and announcements from URLs, on ``playback`` (started, at its player's rate)."""

    def __init__(self, playback: Playback, settings: MediaSettings | None = None,
                 on_state: Callable[[MediaState], None] | None = None) -> None:
        self.playback = playback
        self.settings = settings or MediaSettings()
        self.on_state = on_state
        self.rate = playback.player.rate
        self.state = MediaState.IDLE
        self.volume = 1.0
        self.muted = False
        self._cond = threading.Condition()
        self._music: Track | None = None
        self._announcement: Track | None = None
        self._paused = False
        self._held = False
        self._state_lock = threading.RLock()  # one state change told at a time, in order
        self._threads: list[threading.Thread] = []

    # -- what Home Assistant asks ------------------------------------------------------------

    def play(self, url: str, announcement: bool = False) -> None:
        """Play ``url``: as the music (replacing it), or as an announcement over it (the music waits)."""
        track = Track(url, announcement)
        with self._cond:
            if announcement:
                old, self._announcement = self._announcement, track
            else:
                old, self._music, self._paused = self._music, track, False
            track.thread = threading.Thread(target=self._run, args=(track,), name="rkvoice-media", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [track.thread]
            self._cond.notify_all()
        if old is not None:
            old.stop()
        log.info("media: playing %s%s", url[:200], " (announcement)" if announcement else "")
        self._update()
        track.thread.start()

    def pause(self) -> None:
        with self._cond:
            self._paused = self._music is not None
        self._update()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()
        self._update()

    def stop(self) -> None:
        """Stop the music and any announcement (what is queued on the playback still plays out)."""
        with self._cond:
            tracks = [t for t in (self._music, self._announcement) if t is not None]
            self._music = self._announcement = None
            self._paused = False
            self._cond.notify_all()
        for track in tracks:
            track.stop()
        self._update()

    def set_volume(self, volume: float) -> None:
        self.volume = min(1.0, max(0.0, float(volume)))

    def set_muted(self, muted: bool) -> None:
        self.muted = bool(muted)

    def hold(self, on: bool) -> None:
        """Keep everything back while ``on`` (something else plays, or the satellite hears a request)."""
        with self._cond:
            self._held = on
            self._cond.notify_all()

    def follow(self, state: SatelliteState) -> None:
        """The satellite's state (its ``on_state``): held while it streams a request or plays anything."""
        self.hold(state not in (SatelliteState.IDLE, SatelliteState.MUTED))

    def close(self, timeout_s: float = 5.0) -> None:
        self.stop()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads = []

    # -- the track's thread ------------------------------------------------------------------

    def _current(self, track: Track) -> bool:
        return track is self._music or track is self._announcement

    def _update(self) -> None:
        with self._state_lock:
            with self._cond:
                if self._announcement is not None or (self._music is not None and not self._paused):
                    state = MediaState.PLAYING
                else:
                    state = MediaState.PAUSED if self._music is not None else MediaState.IDLE
            if state is self.state:
                return
            self.state = state
            log.info("media: %s", state)
            if self.on_state is not None:
                self.on_state(state)

    def _run(self, track: Track) -> None:
        try:
            self._decode(track)
            with self._cond:  # the last pieces play out (or the track is stopped)
                self._cond.wait_for(lambda: track.queued == 0 or track.stopped.is_set())
        except Exception as exc:
            if not track.stopped.is_set():
                if isinstance(exc, (MediaError, OSError, http.client.HTTPException, RuntimeError)):
                    log.warning("media: %s: %s; stopped", track.url[:200], _reason(exc))  # the URL's fault
                else:
                    log.exception("media: playing %s failed", track.url[:200])
        finally:
            if track.body is not None:
                track.body.close()
            with self._cond:
                if track is self._music:
                    self._music, self._paused = None, False
                if track is self._announcement:
                    self._announcement = None
                self._cond.notify_all()
            self._update()
            log.info("media: %s ended (%.1f s played)", track.url[:200], track.played_s)

    def _decode(self, track: Track) -> None:
        body = HttpBody(track.url, self.settings.stall_s)
        track.body = body
        for samples in decoded(body, self.rate, self.settings.piece_ms, track.stopped):
            self._feed(track, samples)
        if body.error is not None and not track.stopped.is_set():
            raise MediaError(f"the stream ended early ({_reason(body.error)})")

    def _feed(self, track: Track, samples: np.ndarray) -> None:
        """Hand ``samples`` to the playback in pieces, waiting while the track may not play."""
        piece = max(1, self.rate * self.settings.piece_ms // 1000)
        for i in range(0, len(samples), piece):
            with self._cond:
                self._cond.wait_for(lambda: track.stopped.is_set() or self._may_queue(track))
                if track.stopped.is_set():
                    return
                track.queued += 1
            gain = 0.0 if self.muted else self.volume
            self.playback.cue(samples[i : i + piece] * gain, done=lambda: self._done(track))
            track.played_s += len(samples[i : i + piece]) / self.rate

    def _may_queue(self, track: Track) -> bool:
        if self._held or track.queued >= self.settings.ahead or not self._current(track):
            return False
        return track.announcement or (not self._paused and self._announcement is None)

    def _done(self, track: Track) -> None:
        with self._cond:
            track.queued -= 1
            self._cond.notify_all()


def is_mp3(head: bytes) -> bool:
    """An ID3v2 tag or an MPEG audio frame's sync word."""
    return head.startswith(b"ID3") or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0)


def decoded(body: HttpBody, rate: int, piece_ms: int, stopped: threading.Event) -> Iterator[np.ndarray]:
    """``body`` decoded as it arrives: mono float32 at ``rate``, about ``piece_ms`` at a time, until its
    end or ``stopped``. libsndfile decodes everything but mp3, which PyAV (FFmpeg) decodes: libsndfile
    1.2's mp3 reader garbles a VBR file read in pieces (mpg123 "part2_3_length too large")."""
    head = body.read(4)
    body.seek(0)
    if is_mp3(head):
        yield from _av_decoded(body, rate, stopped)
        return
    import soundfile
    import soxr

    try:
        snd = soundfile.SoundFile(body)
    except soundfile.LibsndfileError as exc:
        raise MediaError(f"not playable audio ({exc.error_string})") from exc
    with snd:
        resampler = soxr.ResampleStream(snd.samplerate, rate, 1, dtype="float32") if snd.samplerate != rate else None
        buf = np.empty((max(1, snd.samplerate * piece_ms // 1000), snd.channels), np.float32)
        while not stopped.is_set():
            got = snd.read(out=buf)
            x = got.mean(axis=1) if len(got) else np.zeros(0, np.float32)
            yield x if resampler is None else resampler.resample_chunk(x, last=not len(got))
            if not len(got):
                return


def _av_decoded(body: HttpBody, rate: int, stopped: threading.Event) -> Iterator[np.ndarray]:
    try:
        import av
    except ImportError as exc:
        raise MediaError("mp3 needs PyAV (pip install av)") from exc
    try:
        with av.open(body, "r") as container:
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


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the server stalled"
    return str(exc) or type(exc).__name__
