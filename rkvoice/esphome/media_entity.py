"""The device's media player, as Home Assistant's ``media_player.*`` entity (an ``Entity``: listed,
its state said, its commands taken), over the satellite's MediaPlayer (rkvoice.satellite.media).

- ListEntitiesMediaPlayerResponse: pause, stop, volume, mute, play_media and announcements. One supported
  format, for announcements: WAV, mono, 16-bit, at any rate (sample rate 0). HA asks its text-to-speech
  for WAV alone, so a voice that makes WAV (a Wyoming one: rkvoice's own) streams its reply to the board
  as it is, with no FFmpeg between: a FLAC at the player's rate cost each reply an FFmpeg process and its
  encoder's delay (rkvoice.satellite.wav_stream reads the streamed header). An announcement's media goes
  through HA's FFmpeg proxy to WAV at its own rate. None for music: HA sends the URL as it is and the
  board decodes it (mp3, flac, wav, ogg... with PyAV or libsndfile), so a two-hour stream is read at the
  pace it plays instead of being transcoded by Home Assistant.
- MediaPlayerStateResponse: idle / playing / paused, the volume (0..1) and mute; sent after each command
  and whenever the player changes by itself (a track that ended, a URL that failed).
- MediaPlayerCommandRequest: a URL (``announcement``: over the music, which waits), PLAY (resume),
  PAUSE, STOP, MUTE, UNMUTE, TOGGLE, VOLUME_UP/DOWN, a volume. Other commands (playlists, power): one
  line each, ignored.

The satellite's state drives the rest (rkvoice.esphome.voice): the music is held while the assistant
hears a request or speaks (``follow``), and the stop word ends it (``stop``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aioesphomeapi.api_pb2 import (  # type: ignore[attr-defined]
    ListEntitiesMediaPlayerResponse,
    MediaPlayerCommandRequest,
    MediaPlayerStateResponse,
    MediaPlayerSupportedFormat,
)
from aioesphomeapi.model import (
    MediaPlayerCommand as Command,
    MediaPlayerEntityFeature as Feature,
    MediaPlayerFormatPurpose,
    MediaPlayerState,
)
from google.protobuf.message import Message

from rkvoice.satellite.media import MediaPlayer, MediaSettings, MediaState
from rkvoice.satellite.playback import Playback

from .entities import Entity

log = logging.getLogger(__name__)

MEDIA_KEY = 2
FEATURES = (Feature.PLAY_MEDIA | Feature.PLAY | Feature.PAUSE | Feature.STOP | Feature.VOLUME_SET
            | Feature.VOLUME_MUTE | Feature.VOLUME_STEP | Feature.MEDIA_ANNOUNCE)
"""What HA offers for it (API 1.11 and later; before, HA derives them from ``supports_pause``)."""
VOLUME_STEP = 0.1
STATES = {MediaState.IDLE: MediaPlayerState.IDLE, MediaState.PLAYING: MediaPlayerState.PLAYING,
          MediaState.PAUSED: MediaPlayerState.PAUSED}


class MediaPlayerEntity:
    """The media player on ``playback`` (``player``: its MediaPlayer, made here); ``changed(self)`` is told
    from any thread when the player's state changed by itself."""

    def __init__(self, playback: Playback, changed: Callable[[Entity], None], key: int = MEDIA_KEY,
                 settings: MediaSettings | None = None) -> None:
        self.key = key
        self.rate = playback.player.rate
        self.player = MediaPlayer(playback, settings, on_state=lambda _state: changed(self))

    def describe(self) -> Message:
        announcement = MediaPlayerSupportedFormat(format="wav", sample_rate=0, num_channels=1,
                                                  purpose=MediaPlayerFormatPurpose.ANNOUNCEMENT, sample_bytes=2)
        return ListEntitiesMediaPlayerResponse(object_id="media_player", key=self.key, name="Media player",
                                               icon="mdi:speaker", supports_pause=True, feature_flags=int(FEATURES),
                                               supported_formats=[announcement])

    def state(self) -> Message:
        return MediaPlayerStateResponse(key=self.key, state=STATES[self.player.state], volume=self.player.volume,
                                        muted=self.player.muted)

    def command(self, msg: Message) -> bool:
        if not isinstance(msg, MediaPlayerCommandRequest) or msg.key != self.key:
            return False
        if msg.has_media_url:
            self.player.play(msg.media_url, announcement=bool(msg.has_announcement and msg.announcement))
        if msg.has_command:
            self._command(msg.command)
        if msg.has_volume:
            self.player.set_volume(msg.volume)
            log.info("media: volume %.0f %%", 100 * self.player.volume)
        return True

    def _command(self, value: int) -> None:
        try:
            command = Command(value)
        except ValueError:
            log.warning("media: Home Assistant sent media player command %d, which this device does not know; "
                        "ignored", value)
            return
        player = self.player
        if command is Command.PLAY:
            player.resume()
        elif command is Command.PAUSE:
            player.pause()
        elif command is Command.TOGGLE and player.state is MediaState.PLAYING:
            player.pause()
        elif command is Command.TOGGLE:
            player.resume()
        elif command is Command.STOP:
            player.stop()
        elif command in (Command.MUTE, Command.UNMUTE):
            player.set_muted(command is Command.MUTE)
            log.info("media: %s", "muted" if player.muted else "unmuted")
        elif command in (Command.VOLUME_UP, Command.VOLUME_DOWN):
            player.set_volume(player.volume + (VOLUME_STEP if command is Command.VOLUME_UP else -VOLUME_STEP))
            log.info("media: volume %.0f %%", 100 * player.volume)
        else:
            log.warning("media: Home Assistant's %s is not something this media player does; ignored", command.name)
