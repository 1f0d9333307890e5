"""The ESPHome device's media player (rkvoice.esphome.media_entity) driven by Home Assistant's own client
(aioesphomeapi's APIClient, as HA's esphome media_player does) against a local HTTP server of generated
audio: the entity is listed with what HA needs, play_media of a URL reaches the board's player (playing,
then idle at its end), pause/resume/stop/volume/mute change the state HA sees, an announcement plays over
the music, the music waits while the satellite hears a request, the stop word ends it, a 404 is one line
and the state goes back to idle; no media thread is left."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
from aioesphomeapi import (
    APIClient,
    MediaPlayerCommand,
    MediaPlayerEntityFeature,
    MediaPlayerEntityState,
    MediaPlayerFormatPurpose,
    MediaPlayerInfo,
    MediaPlayerState,
)
from aioesphomeapi.model import APIVersion
from fakes import RecordingPlayer, wait_until
from test_esphome_api import connected, esphome_device, until_async as until, warnings
from test_esphome_voice import E, get, home_assistant

from rkvoice.esphome.media_entity import MEDIA_KEY
from rkvoice.hear.wake import WakeHit
from rkvoice.satellite.state import Heard, SatelliteState
from tests.support.media_site import serving

S = MediaPlayerState


def paced(cfg: Any) -> RecordingPlayer:
    """The board's player at real-time pace (music takes its time, as on a sound card)."""
    return RecordingPlayer(cfg, max_ahead_s=0.1)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serving() as (_site, url):
        yield url


@pytest.fixture
def device(tmp_path) -> Iterator[Any]:
    with esphome_device(tmp_path, player=paced) as (satellite, mic, speak):
        yield satellite, mic, speak.player.player  # the RecordingPlayer inside the echo reference tap
    assert wait_until(lambda: not [t for t in threading.enumerate() if t.name == "rkvoice-media"])


class Home:
    """HA's side of the media player: its client and the states it was sent, in order."""

    def __init__(self, cli: APIClient) -> None:
        self.cli = cli
        self.states: list[MediaPlayerEntityState] = []
        cli.subscribe_states(lambda s: self.states.append(s) if isinstance(s, MediaPlayerEntityState) else None)

    @property
    def now(self) -> MediaPlayerEntityState:
        return self.states[-1]

    def seen(self) -> list[MediaPlayerState]:
        """The states in the order they came, repeats dropped."""
        return [s for i, s in enumerate(st.state for st in self.states) if i == 0 or self.states[i - 1].state != s]

    def command(self, **kwargs: Any) -> None:
        self.cli.media_player_command(MEDIA_KEY, **kwargs)


@contextlib.asynccontextmanager
async def home(satellite: Any) -> AsyncIterator[Home]:
    cli = await connected(satellite)
    try:
        ha = Home(cli)
        await until(lambda: ha.states and ha.now.state is S.IDLE)
        yield ha
    finally:
        await cli.disconnect()


def test_the_media_player_is_listed_as_home_assistant_needs_it(device):
    satellite, _mic, player = device

    async def scenario() -> None:
        cli = await connected(satellite)
        try:
            entities, _ = await cli.list_entities_services()
        finally:
            await cli.disconnect()
        [media] = [e for e in entities if isinstance(e, MediaPlayerInfo)]
        assert media.key == MEDIA_KEY and media.object_id == "media_player" and media.supports_pause
        old = MediaPlayerEntityFeature(media.feature_flags_compat(APIVersion(1, 10)))  # the device's API
        new = MediaPlayerEntityFeature(media.feature_flags_compat(APIVersion(1, 14)))
        for flags in (old, new):
            for feature in ("PLAY_MEDIA", "PAUSE", "PLAY", "STOP", "VOLUME_SET", "VOLUME_MUTE", "MEDIA_ANNOUNCE"):
                assert MediaPlayerEntityFeature[feature] in flags, (feature, flags)
        # replies and announcements as WAV at any rate (a WAV voice's reply needs no ffmpeg); music as it is
        assert [(f.format, f.sample_rate, f.num_channels, f.sample_bytes, f.purpose) for f in media.supported_formats] \
            == [("wav", 0, 1, 2, MediaPlayerFormatPurpose.ANNOUNCEMENT)]

    asyncio.run(scenario())


def test_play_media_of_a_url_reaches_the_player_then_goes_idle(device, site):
    satellite, _mic, player = device

    async def scenario() -> None:
        async with home(satellite) as ha:
            ha.command(media_url=f"{site}/tone.flac")
            await until(lambda: ha.now.state is S.PLAYING)
            await until(lambda: ha.now.state is S.IDLE and len(ha.states) > 2)
            assert ha.seen() == [S.IDLE, S.PLAYING, S.IDLE]
            assert ha.now.volume == 1.0 and not ha.now.muted

    asyncio.run(scenario())
    assert abs(player.samples / player.rate - 1.0) < 0.1  # the 1 s tone, whole


def test_pause_resume_volume_mute_and_stop_change_what_home_assistant_sees(device, site):
    satellite, _mic, player = device

    async def scenario() -> None:
        async with home(satellite) as ha:
            ha.command(media_url=f"{site}/long.wav")
            await until(lambda: player.samples > 0.3 * player.rate)
            ha.command(command=MediaPlayerCommand.PAUSE)
            await until(lambda: ha.now.state is S.PAUSED)
            await until(lambda: not satellite.playback.playing)
            held = player.samples
            assert not await asyncio.to_thread(wait_until, lambda: player.samples > held, 0.4)
            ha.command(command=MediaPlayerCommand.PLAY)
            await until(lambda: ha.now.state is S.PLAYING and player.samples > held)
            ha.command(volume=0.3)
            await until(lambda: abs(ha.now.volume - 0.3) < 1e-6)
            ha.command(command=MediaPlayerCommand.MUTE)
            await until(lambda: ha.now.muted)
            ha.command(command=MediaPlayerCommand.UNMUTE)
            await until(lambda: not ha.now.muted and abs(ha.now.volume - 0.3) < 1e-6)
            ha.command(command=MediaPlayerCommand.STOP)
            await until(lambda: ha.now.state is S.IDLE)
            await until(lambda: not satellite.playback.playing)
            stopped = player.samples
            assert not await asyncio.to_thread(wait_until, lambda: player.samples > stopped, 0.4)
            assert stopped < 3.0 * player.rate  # well before the end of the 4 s
            assert ha.seen() == [S.IDLE, S.PLAYING, S.PAUSED, S.PLAYING, S.IDLE]

    asyncio.run(scenario())


def test_an_announcement_plays_over_the_music_which_goes_on_after(device, site):
    satellite, _mic, player = device

    async def scenario() -> None:
        async with home(satellite) as ha:
            ha.command(media_url=f"{site}/long.wav")
            await until(lambda: player.samples > 0.3 * player.rate)
            ha.command(media_url=f"{site}/tone.wav", announcement=True)
            await until(lambda: player.samples > 2.4 * player.rate)  # 1 s of announcement, and more music
            await until(lambda: ha.now.state is S.IDLE)
            assert ha.seen() == [S.IDLE, S.PLAYING, S.IDLE]

    asyncio.run(scenario())
    assert abs(player.samples / player.rate - 5.0) < 0.2  # the 4 s of music and the 1 s announcement, whole


def test_the_music_waits_while_the_satellite_hears_a_request_and_goes_on_after(device, site):
    satellite, mic, player = device
    core = satellite.link.core

    async def scenario() -> None:
        async with home_assistant(satellite) as va, home(satellite) as ha:
            ha.command(media_url=f"{site}/long.wav")
            await until(lambda: player.samples > 0.3 * player.rate)
            mic.put(marker=1)  # the wake phrase: the request streams
            await get(va.starts)
            await until(lambda: core.state is SatelliteState.STREAMING and not satellite.playback.playing)
            held = player.samples
            assert not await asyncio.to_thread(wait_until, lambda: player.samples > held, 0.4)
            assert ha.now.state is S.PLAYING  # held, not paused: HA still shows it playing
            va.event(E.VOICE_ASSISTANT_RUN_START)
            va.event(E.VOICE_ASSISTANT_ERROR, code="stt-no-text-recognized", message="nothing heard")
            va.event(E.VOICE_ASSISTANT_RUN_END)
            await until(lambda: core.state is SatelliteState.IDLE and player.samples > held + 0.3 * player.rate)

    asyncio.run(scenario())


def test_the_stop_word_ends_the_music(device, site):
    satellite, _mic, player = device
    core = satellite.link.core

    async def scenario() -> None:
        async with home(satellite) as ha:
            ha.command(media_url=f"{site}/long.wav")
            await until(lambda: player.samples > 0.3 * player.rate)
            stop = Heard(0, np.zeros(512, np.float32), stop=WakeHit(0.5, 0.4, "别说了"))
            core.post(core.on_heard, stop)  # what the hear thread posts when the stop word is heard
            await until(lambda: ha.now.state is S.IDLE)
            await until(lambda: not satellite.playback.playing)
            stopped = player.samples
            assert not await asyncio.to_thread(wait_until, lambda: player.samples > stopped, 0.4)
            assert stopped < 3.0 * player.rate

    asyncio.run(scenario())


def test_a_url_that_is_missing_is_one_line_and_the_player_goes_back_to_idle(device, site, caplog):
    caplog.set_level(logging.INFO, logger="rkvoice")
    satellite, _mic, player = device

    async def scenario() -> None:
        async with home(satellite) as ha:
            ha.command(media_url=f"{site}/missing")
            await until(lambda: ha.now.state is S.IDLE and len(ha.states) > 2)
            assert ha.seen() == [S.IDLE, S.PLAYING, S.IDLE]
            ha.command(media_url=f"{site}/tone.wav")  # the device goes on
            await until(lambda: player.samples > 0.9 * player.rate)

    asyncio.run(scenario())
    lines = warnings(caplog)
    assert len(lines) == 1 and "404" in lines[0], lines
