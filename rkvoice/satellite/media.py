"""The satellite's media player: what Home Assistant's ``media_player`` entity drives on the board.

``play(url, announcement)`` streams an HTTP(S) URL (music, or an announcement over it), decodes it as it
arrives (``decoded``: libsndfile for wav, flac and ogg, PyAV for mp3), resamples it to the player's
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

import enum
import http.client
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .http_audio import HttpBody, MediaError, decoded, reason
from .playback import Playback
from .state import SatelliteState

log = logging.getLogger(__name__)


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
            for track in tracks:  # set under the lock: a track waiting for its pieces sees it when notified
                track.stopped.set()
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
        """Stop, and wait for the tracks' threads; before the playback's own ``close`` (a track waiting
        for its last pieces to play is then let go)."""
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
                    log.warning("media: %s: %s; stopped", track.url[:200], reason(exc))  # the URL's fault
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
            raise MediaError(f"the stream ended early ({reason(body.error)})")

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
