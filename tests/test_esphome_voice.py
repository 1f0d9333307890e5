"""The ESPHome device's voice assistant (rkvoice.esphome.voice) driven from Home Assistant's side by the
real aioesphomeapi APIClient (subscribe_voice_assistant, as HA's esphome assist_satellite does): a turn
woken on the board, its audio and HA's events, the reply fetched from an HTTP server and played; a
conversation that continues without the wake phrase once the reply has played; a pipeline that sends no
event; announcements (and start_conversation) by URL; timers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from aioesphomeapi import APIClient, VoiceAssistantEventType, VoiceAssistantTimerEventType
from fakes import wait_until
from test_esphome_api import connected, esphome_device, until_async as until, warnings

from rkvoice.satellite.state import SatelliteState
from rkvoice.satellite.timers import FINISHED_WORDS

FRAME = 512
E = VoiceAssistantEventType


@contextlib.contextmanager
def audio_server(root: Path) -> Iterator[str]:
    """Home Assistant's media URLs: ``root`` served on loopback; yields the base URL."""
    root.mkdir(exist_ok=True)
    sf.write(root / "reply.wav", 0.3 * np.sin(np.arange(int(0.5 * 22050)) * 0.05), 22050, subtype="PCM_16")
    sf.write(root / "chime.flac", 0.3 * np.sin(np.arange(int(0.2 * 16000)) * 0.1), 16000)
    (root / "notes.txt").write_text("not audio\n" * 100)
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the base class's name
        pass


class HomeAssistant:
    """HA's side of the voice assistant, as its esphome assist_satellite subscribes: what the device asked
    and sent, in order (``log``), and the events HA sends back."""

    def __init__(self, cli: APIClient, satellite: Any) -> None:
        self.cli = cli
        self.satellite = satellite
        self.log: list[tuple[str, Any]] = []
        self.audio = bytearray()
        self.starts: asyncio.Queue[tuple[str, str | None]] = asyncio.Queue()
        self.finished: asyncio.Queue[bool] = asyncio.Queue()
        self.stops: asyncio.Queue[bool] = asyncio.Queue()
        self.unsubscribe = cli.subscribe_voice_assistant(handle_start=self.start, handle_stop=self.stop,
                                                         handle_audio=self.heard,
                                                         handle_announcement_finished=self.announced)

    async def start(self, conversation_id: str, flags: int, settings: Any, phrase: str | None) -> int:
        runs = self.satellite.link.core.runs
        replied = [bool(r.reply is not None and r.reply.ended.is_set()) for r in runs[:-1]]
        self.log.append(("start", (conversation_id, phrase, replied)))
        await self.starts.put((conversation_id, phrase))
        return 0  # the audio comes over the API connection

    async def stop(self, abort: bool) -> None:
        self.log.append(("stop", abort))
        await self.stops.put(abort)

    async def heard(self, data: bytes) -> None:
        self.audio += data

    async def announced(self, msg: Any) -> None:
        self.log.append(("finished", msg.success))
        await self.finished.put(msg.success)

    def event(self, kind: VoiceAssistantEventType, **data: str) -> None:
        self.cli.send_voice_assistant_event(kind, data or None)

    def samples(self) -> np.ndarray:
        return np.frombuffer(bytes(self.audio), "<i2")


@contextlib.asynccontextmanager
async def home_assistant(satellite: Any, key: str | None = None) -> AsyncIterator[HomeAssistant]:
    """HA connected (with ``key``) and running the voice assistant, the satellite idle, until the block ends."""
    cli = await connected(satellite, key)
    ha = HomeAssistant(cli, satellite)
    try:
        await until(lambda: satellite.link.core.state is SatelliteState.IDLE)
        yield ha
    finally:
        await cli.disconnect()


async def get(q: asyncio.Queue[Any], timeout: float = 10.0) -> Any:
    return await asyncio.wait_for(q.get(), timeout)


def played_s(speak: Any) -> float:
    player = speak.player.player  # the RecordingPlayer inside the echo reference tap
    return float(player.samples / player.rate)


def answer(ha: HomeAssistant, url: str, text: str = "打开客厅灯", continues: bool = False) -> None:
    """HA's events for a request it heard as ``text``, answered by the audio at ``url``."""
    ha.event(E.VOICE_ASSISTANT_STT_VAD_END)
    ha.event(E.VOICE_ASSISTANT_STT_END, text=text)
    ha.event(E.VOICE_ASSISTANT_INTENT_START)
    ha.event(E.VOICE_ASSISTANT_INTENT_END, conversation_id="conv-1", continue_conversation="1" if continues else "0")
    ha.event(E.VOICE_ASSISTANT_TTS_START, text="好的")
    ha.event(E.VOICE_ASSISTANT_TTS_END, url=url)
    ha.event(E.VOICE_ASSISTANT_RUN_END)


@pytest.mark.parametrize("key", ["", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="], ids=["plain", "noise"])
def test_a_voice_turn_woken_on_the_board(tmp_path, key):
    with esphome_device(tmp_path / "state", key) as (satellite, mic, speak), audio_server(tmp_path / "www") as www:
        core = satellite.link.core
        states: list[str] = []
        core.on_state = lambda state: states.append(state.value)

        async def scenario() -> None:
            async with home_assistant(satellite, key or None) as ha:
                mic.put(marker=1)  # the wake phrase
                assert await get(ha.starts) == ("", "小智小智")
                ha.event(E.VOICE_ASSISTANT_RUN_START)
                ha.event(E.VOICE_ASSISTANT_STT_START)
                mic.put(0.1, n=3)  # the request
                await until(lambda: int(np.sum(ha.samples() == 3277)) >= 3 * FRAME)
                answer(ha, f"{www}/reply.wav")
                assert await get(ha.finished) is True
            run = core.runs[-1]
            assert run.transcript == "打开客厅灯" and run.reply is not None and run.reply.ended.is_set()
            assert played_s(speak) == pytest.approx(0.5, abs=0.03)  # at the player's rate, from 22050 Hz
            assert [k for k, _ in ha.log] == ["start", "finished"]

        asyncio.run(scenario())
        assert states[:5] == ["idle", "streaming", "idle", "responding", "idle"], states


def test_a_conversation_that_continues_reopens_the_microphone_after_the_reply(tmp_path):
    with esphome_device(tmp_path / "state") as (satellite, mic, speak), audio_server(tmp_path / "www") as www:
        core = satellite.link.core

        async def scenario() -> None:
            async with home_assistant(satellite) as ha:
                mic.put(marker=1)
                await get(ha.starts)
                ha.event(E.VOICE_ASSISTANT_STT_START)
                mic.put(0.1, n=2)
                await until(lambda: len(ha.samples()) >= 2 * FRAME)
                answer(ha, f"{www}/reply.wav", text="几点提醒我", continues=True)
                assert await get(ha.finished) is True
                # no wake phrase, the same conversation, and only once the reply had played
                assert await get(ha.starts) == ("conv-1", None)
                assert ha.log[-1] == ("start", ("conv-1", None, [True]))
                await until(lambda: core.state is SatelliteState.STREAMING)  # (the request leaves before the state is set)
                assert len(core.runs) == 2
                before = len(ha.samples())
                mic.put(0.2, n=3)  # the answer to the question goes to HA without a wake
                await until(lambda: int(np.sum(ha.samples()[before:] == 6553)) >= 3 * FRAME)
                ha.event(E.VOICE_ASSISTANT_STT_START)
                answer(ha, f"{www}/reply.wav", text="八点")
                assert await get(ha.finished) is True
                await until(lambda: core.state is SatelliteState.IDLE)
            assert [r.transcript for r in core.runs] == ["几点提醒我", "八点"]
            assert [k for k, _ in ha.log] == ["start", "finished", "start", "finished"]
            assert played_s(speak) == pytest.approx(1.0, abs=0.05)

        asyncio.run(scenario())


def test_a_pipeline_that_sends_no_event_times_out_with_one_line(tmp_path, caplog):
    """A pipeline without speech-to-text takes the request and then says nothing: the run fails, HA is
    told the request is over, the satellite listens for the wake phrase again."""
    with esphome_device(tmp_path) as (satellite, mic, _speak):
        core = satellite.link.core
        satellite.link.event_wait_s = 0.3  # type: ignore[attr-defined]

        async def scenario() -> None:
            async with home_assistant(satellite) as ha:
                mic.put(marker=1)
                await get(ha.starts)
                mic.put(0.1, n=2)
                assert await get(ha.stops) is True  # aborted (VoiceAssistantRequest(start=False))
                await until(lambda: core.state is SatelliteState.IDLE)

        asyncio.run(scenario())
        run = core.runs[-1]
        assert run.ended == "error" and "no event" in (run.error or "")
    assert len([w for w in warnings(caplog) if "no event" in w]) == 1


def test_announcements_play_their_chime_and_media_then_finish(tmp_path, caplog):
    with esphome_device(tmp_path / "state") as (satellite, _mic, speak), audio_server(tmp_path / "www") as www:
        core = satellite.link.core

        async def scenario() -> None:
            async with home_assistant(satellite) as ha:
                done = await ha.cli.send_voice_assistant_announcement_await_response(
                    f"{www}/reply.wav", 10, text="开饭了", preannounce_media_id=f"{www}/chime.flac")
                assert done.success
                assert played_s(speak) == pytest.approx(0.7, abs=0.05)
                for bad in ("missing.wav", "notes.txt"):  # a 404, and a file that is not audio: one line each
                    done = await ha.cli.send_voice_assistant_announcement_await_response(f"{www}/{bad}", 10)
                    assert done.success
                assert played_s(speak) == pytest.approx(0.7, abs=0.05)
                # start_conversation: the microphone opens without the wake phrase once it has played
                await ha.cli.send_voice_assistant_announcement_await_response(f"{www}/chime.flac", 10,
                                                                           start_conversation=True)
                assert await get(ha.starts) == ("", None)
                await until(lambda: core.state is SatelliteState.STREAMING)

        asyncio.run(scenario())
    lines = warnings(caplog)
    assert len([w for w in lines if "HTTP 404" in w]) == 1 and len([w for w in lines if "not playable audio" in w]) == 1, lines


def test_timers_are_kept_and_a_finished_one_rings_until_a_wake(tmp_path):
    with esphome_device(tmp_path) as (satellite, mic, _speak):
        core = satellite.link.core
        states: list[str] = []
        core.on_state = lambda state: states.append(state.value)
        T = VoiceAssistantTimerEventType

        async def scenario() -> None:
            async with home_assistant(satellite) as ha:
                ha.cli.send_voice_assistant_timer_event(T.VOICE_ASSISTANT_TIMER_STARTED, "t1", "面条", 300, 300, True)
                ha.cli.send_voice_assistant_timer_event(T.VOICE_ASSISTANT_TIMER_STARTED, "t2", None, 60, 60, True)
                await until(lambda: sorted(satellite.timers.ids()) == ["t1", "t2"])
                ha.cli.send_voice_assistant_timer_event(T.VOICE_ASSISTANT_TIMER_UPDATED, "t1", "面条", 300, 120, False)
                await until(lambda: satellite.timers.remaining_s("t1") == 120)
                ha.cli.send_voice_assistant_timer_event(T.VOICE_ASSISTANT_TIMER_CANCELLED, "t2", None, 60, 50, False)
                ha.cli.send_voice_assistant_timer_event(T.VOICE_ASSISTANT_TIMER_FINISHED, "t1", "面条", 300, 0, False)
                await until(lambda: satellite.playback.said == [f"面条，{FINISHED_WORDS}"])
                ring = core.ringer.last
                await until(lambda: ring.rings >= 2)  # the timer sound again after the gap
                assert core.state is SatelliteState.RINGING
                mic.put(marker=1)  # the wake phrase ends it
                await get(ha.starts)
                await until(lambda: not core.ringer.ringing and not ring.thread.is_alive())

        asyncio.run(scenario())
        assert satellite.timers.ids() == [] and satellite.playback.said == [f"面条，{FINISHED_WORDS}"]
        assert states[:2] == ["idle", "ringing"] and "streaming" in states, states


def test_home_assistant_leaving_mid_request_ends_the_run_and_the_next_connection_runs_it_again(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rkvoice")
    with esphome_device(tmp_path) as (satellite, mic, _speak):
        core = satellite.link.core

        async def scenario() -> None:
            cli = await connected(satellite)
            ha = HomeAssistant(cli, satellite)
            await until(lambda: core.state is SatelliteState.IDLE)
            mic.put(marker=1)
            await get(ha.starts)
            mic.put(0.1, n=2)
            await cli.disconnect()
            await until(lambda: core.state is SatelliteState.MUTED and not satellite.link.connected.is_set())
            assert core.runs[-1].ended == "disconnected"
            async with home_assistant(satellite):  # (it waits for the satellite idle again)
                assert satellite.link.running.is_set()

        asyncio.run(scenario())


def test_the_daemon_serves_the_esphome_device_and_answers_locally_while_home_assistant_is_away(tmp_path):
    """satellite.protocol esphome in the daemon: the one core under the ESPHome link, the local assistant
    answering while no Home Assistant runs the voice assistant, HA's pipeline while one does."""
    from fakes import ScriptedLlm
    from test_satellite_core import satellite_daemon

    from rkvoice.esphome.voice import EsphomeLink
    from rkvoice.satellite.run import Mode

    llm = ScriptedLlm()
    with satellite_daemon(tmp_path, ["讲个笑话", "打开大灯"], llm=llm,
                          satellite={"protocol": "esphome", "esphome": {"port": 0, "zeroconf": False}}) as (daemon, mic):
        listener = daemon.listener
        satellite = listener.satellite
        assert isinstance(satellite.link, EsphomeLink)
        assert wait_until(lambda: listener.mode is Mode.LOCAL)
        mic.put(n=3)
        mic.put(marker=1)  # 小智小智，讲个笑话: answered on the board
        assert wait_until(lambda: daemon.turns == 1) and len(llm.calls) == 1

        async def home_assistant_runs_the_voice_assistant() -> None:
            cli = await connected(satellite)
            ha = HomeAssistant(cli, satellite)
            try:
                await until(lambda: listener.mode is Mode.SATELLITE and satellite.link.running.is_set())
                mic.put(n=3)
                mic.put(marker=2)  # 小智小智，打开大灯: to HA's pipeline
                assert (await get(ha.starts))[1] == "小智小智"
                ha.event(E.VOICE_ASSISTANT_STT_START)
                ha.event(E.VOICE_ASSISTANT_STT_END, text="打开大灯")
                ha.event(E.VOICE_ASSISTANT_RUN_END)
                assert await get(ha.finished) is True
            finally:
                await cli.disconnect()

        asyncio.run(home_assistant_runs_the_voice_assistant())
        assert daemon.turns == 1 and len(llm.calls) == 1  # HA's, not the local assistant's
        assert satellite.link.core.runs[-1].transcript == "打开大灯"
        assert wait_until(lambda: listener.mode is Mode.LOCAL)  # HA left: local again
        mic.put(n=3)
        mic.put(marker=1)
        assert wait_until(lambda: daemon.turns == 2) and len(llm.calls) == 2


def test_pipeline_events_from_a_client_that_does_not_run_the_voice_assistant_are_one_line(tmp_path, caplog):
    with esphome_device(tmp_path) as (satellite, mic, _speak):
        core = satellite.link.core

        async def scenario() -> None:
            async with home_assistant(satellite) as ha:
                other = await connected(satellite)  # e.g. a second client: a dashboard, a probe
                try:
                    mic.put(marker=1)
                    await get(ha.starts)
                    other.send_voice_assistant_event(E.VOICE_ASSISTANT_STT_END, {"text": "不是我的"})
                    await other.device_info()  # (its event was handled before this answer)
                    assert core.runs[-1].transcript is None and core.state is SatelliteState.STREAMING
                    ha.event(E.VOICE_ASSISTANT_STT_START)
                    ha.event(E.VOICE_ASSISTANT_STT_END, text="打开客厅灯")
                    await until(lambda: core.runs[-1].transcript == "打开客厅灯")
                finally:
                    await other.disconnect()

        asyncio.run(scenario())
    assert len([w for w in warnings(caplog) if "does not run the voice assistant" in w]) == 1
