"""The ESPHome device plays Home Assistant's audio by URL as it arrives (rkvoice.esphome.reply_stream):
every format HA sends (its TTS as mp3, its ffmpeg proxy's FLAC written to a pipe, wav, ogg) at the
player's rate; the first audio before the download has ended; a streaming answer from RUN_START's URL
as soon as INTENT_PROGRESS says the TTS streams, played once; bad URLs one line each."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import soundfile as sf
from fakes import RecordingPlayer
from test_esphome_api import esphome_device, warnings
from test_esphome_voice import E, get, home_assistant, played_s

from rkvoice.esphome.reply_stream import ReplyStreamer
from rkvoice.satellite.playback import StreamKind
from rkvoice.satellite.state import SatelliteState
from tests.support.media_site import FORMATS, TONE_AMP, encoded, serving, streamed_wav, unsized


def streamed(satellite, urls: list[str]) -> tuple[bool, list[int]]:
    """``urls`` played by the link's streamer on its own loop, until the last stream has played out:
    (the last gave audio, the ids of the streams the last one's hook saw)."""
    link = satellite.link
    hooked: list = []

    async def play() -> bool:
        assert link._pool is not None
        return await ReplyStreamer(link._pool, link.core, link.playback).play(urls, hooked.append)

    ok = asyncio.run_coroutine_threadsafe(play(), link._loop).result(30)
    assert all(stream.ended.wait(10) for stream in hooked)
    return ok, [stream.id for stream in hooked]


class KeepingRecorder(RecordingPlayer):
    """A RecordingPlayer (audio taken at once) that keeps what it was given."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.kept: list[np.ndarray] = []

    def write(self, block: np.ndarray) -> None:
        super().write(block)
        self.kept.append(np.array(block, copy=True))


def recorded(speak) -> np.ndarray:
    player = speak.player.player  # the KeepingRecorder inside the echo reference tap
    return np.concatenate(player.kept).astype(np.float32) / 32767.0 if player.kept else np.zeros(0, np.float32)


@pytest.mark.parametrize("name", [*FORMATS, "unsized.flac", "streamed.wav", "piped.wav"])
def test_each_format_home_assistant_sends_plays_whole_at_the_player_s_rate(tmp_path, name):
    files = {f"tone.{ext}": encoded(ext, 1.0) for ext in FORMATS if ext.upper() in map(str.upper, sf.available_formats())}
    files["unsized.flac"] = unsized(encoded("flac", 1.0))  # HA's proxies write FLAC to a pipe: no length
    files["streamed.wav"] = streamed_wav(encoded("wav", 1.0))  # HA's Wyoming TTS reply: 0 frames said
    files["piped.wav"] = streamed_wav(encoded("wav", 1.0), 0xFFFFFFFF, tag=True)  # its ffmpeg proxy's WAV
    if name in FORMATS and f"tone.{name}" not in files:
        pytest.skip(f"this libsndfile has no {name}")
    with esphome_device(tmp_path, player=KeepingRecorder) as (satellite, _mic, speak), serving(files) as (_site, www):
        assert wait_for_loop(satellite)
        ok, hooked = streamed(satellite, [f"{www}/{name if '.' in name else 'tone.' + name}"])
        assert ok and len(hooked) == 1
        assert played_s(speak) == pytest.approx(1.0, abs=0.06)
        level = float(np.abs(recorded(speak)).max())
        assert level == pytest.approx(TONE_AMP, abs=0.05)


def test_the_first_audio_plays_before_the_download_has_ended(tmp_path):
    with esphome_device(tmp_path) as (satellite, _mic, speak), serving({}) as (site, www):
        assert wait_for_loop(satellite)
        link = satellite.link

        async def play() -> bool:
            assert link._pool is not None
            return await ReplyStreamer(link._pool, link.core, link.playback).play([f"{www}/stall.wav"], lambda s: None)

        done = asyncio.run_coroutine_threadsafe(play(), link._loop)
        # the server sent 0.3 s and waits: that much has played while the download goes on
        assert wait_until_true(lambda: played_s(speak) >= 0.25) and not done.done()
        site.release.set()  # the rest never comes: the body ends short, what came has played
        assert done.result(20) is True


def test_bad_urls_are_one_line_each_and_nothing_plays(tmp_path, caplog):
    with esphome_device(tmp_path) as (satellite, _mic, speak), serving({}) as (_site, www):
        assert wait_for_loop(satellite)
        for bad in ("missing", "page", "nothing-here.wav"):
            ok, hooked = streamed(satellite, [f"{www}/{bad}"])
            assert not ok and hooked == []
        assert played_s(speak) == 0.0
    lines = [w for w in warnings(caplog) if "Home Assistant's audio" in w]
    assert len(lines) == 3 and sum("HTTP 404" in w for w in lines) == 2 and sum("not playable" in w for w in lines) == 1


@pytest.mark.parametrize("continues", [False, True])
def test_a_streaming_answer_plays_from_run_start_s_url_once_before_tts_end(tmp_path, continues):
    """HA's RUN_START carries the answer's URL; with a streaming TTS, INTENT_PROGRESS says
    tts_start_streaming and the device plays it then. INTENT_END (whether the conversation goes on)
    comes after that start; TTS_END's URL is the same answer and is not played again."""
    files = {"answer.wav": encoded("wav", 0.5)}
    with esphome_device(tmp_path) as (satellite, mic, speak), serving(files) as (_site, www):
        core = satellite.link.core

        async def scenario() -> None:
            async with home_assistant(satellite) as ha:
                mic.put(marker=1)
                await get(ha.starts)
                url = f"{www}/answer.wav"
                ha.event(E.VOICE_ASSISTANT_RUN_START, url=url)
                ha.event(E.VOICE_ASSISTANT_STT_START)
                ha.event(E.VOICE_ASSISTANT_STT_END, text="讲个笑话")
                ha.event(E.VOICE_ASSISTANT_INTENT_START)
                ha.event(E.VOICE_ASSISTANT_INTENT_PROGRESS, tts_start_streaming="1")
                await until_true(lambda: played_s(speak) > 0)  # before TTS_END was sent
                ha.event(E.VOICE_ASSISTANT_INTENT_END, conversation_id="c", continue_conversation="1" if continues else "0")
                ha.event(E.VOICE_ASSISTANT_TTS_START, text="从前有座山")
                ha.event(E.VOICE_ASSISTANT_TTS_END, url=url)
                ha.event(E.VOICE_ASSISTANT_RUN_END)
                assert await get(ha.finished) is True
                if continues:
                    assert await get(ha.starts) == ("c", None)
                else:
                    await until_true(lambda: core.state is SatelliteState.IDLE)
                replies = [s for s in satellite.link.playback.streams if s.kind is StreamKind.REPLY]
                assert len(replies) == 1 and replies[0] is core.runs[-1 if not continues else -2].reply  # played once
                assert replies[0].samples / replies[0].rate == pytest.approx(0.5, abs=0.01)

        asyncio.run(scenario())


def wait_for_loop(satellite, timeout: float = 10.0) -> bool:
    return wait_until_true(lambda: satellite.link._loop is not None and satellite.link._pool is not None, timeout)


def wait_until_true(cond, timeout: float = 10.0) -> bool:
    from fakes import wait_until

    return wait_until(cond, timeout)


async def until_true(cond, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met")
