"""The Wyoming satellite (rkvoice.satellite) against a scripted client playing Home Assistant's part, in
the order HA sends its events (run-satellite, describe, ping, transcribe ..., synthesize, audio, timer
events, announce, pause-satellite), with scripted engines of the real shapes (tests/fakes.py): a wake
that fires on marker frames, a fake voice, a player that records what it played."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from fakes import FakeVoice, MarkerWake, RecordingPlayer, wait_until
from wyoming.client import AsyncTcpClient
from wyoming.event import Event

from rkvoice.config import load_config
from rkvoice.errors import RkvoiceError
from rkvoice.satellite.file_mode import file_player, serve_file
from rkvoice.satellite.link import RATE, SatelliteLink
from rkvoice.satellite.mic import SatelliteMic
from rkvoice.satellite.playback import Playback, StreamKind
from rkvoice.satellite.run import Satellite
from rkvoice.satellite.timers import FINISHED_WORDS, TimerTable
from rkvoice.stages import Speak
from tests.support.clock import FakeClock

FRAME = 512
WAIT_S = 10.0


def config(**satellite: Any) -> Any:
    """The satellite on a free port; of the device's own sounds only the wake cue (none here: speak_stage
    has cue=False) and the timer's, so what the player got is Home Assistant's audio (and the timers')."""
    cfg = load_config()
    return replace(cfg, satellite=replace(cfg.satellite, uri="tcp://127.0.0.1:0", **{"sounds": "wake,timer", **satellite}))


class FeedMic:
    """A microphone the test feeds frame by frame (``put``); ``end()`` closes it."""

    sample_rate = RATE
    markers = True

    def __init__(self) -> None:
        self.q: queue.Queue[np.ndarray | None] = queue.Queue()

    def put(self, value: float = 0.0, n: int = 1, marker: int = 0) -> None:
        for _ in range(n):
            frame = np.full(FRAME, value, np.float32)
            frame[0] = marker or value
            self.q.put(frame)

    def frames(self) -> Iterator[np.ndarray]:
        while (frame := self.q.get()) is not None:
            yield frame

    def close(self) -> None:
        self.q.put(None)


class StubHear:
    """The hear stage as the satellite reads it: only its wake engine."""

    def __init__(self, wake: Any) -> None:
        self.wake = wake


def speak_stage(cfg: Any, player: Any = None) -> Speak:
    speak = Speak(cfg, player=player or (lambda c: RecordingPlayer(c)), tts=lambda c: FakeVoice(char_s=0.02), cue=False)
    speak.load()
    return speak


@pytest.fixture
def sat() -> Iterator[tuple[Satellite, FeedMic, Speak]]:
    """A satellite on a free port, its microphone fed by the test (marker 1: the phrase alone; 2: with a request)."""
    cfg = config(name="测试卫星", area="客厅")
    speak = speak_stage(cfg)
    satellite = Satellite(cfg, StubHear(MarkerWake(["", "打开客厅灯"] * 5)), speak)  # type: ignore[arg-type]
    satellite.start()
    mic = FeedMic()
    thread = threading.Thread(target=satellite.run, args=(mic, False), daemon=True)
    thread.start()
    yield satellite, mic, speak
    mic.close()
    satellite.close()
    thread.join(5)
    speak.close()


class Ha:
    """The scripted Home Assistant: sends events, reads what the satellite sends (kept in ``got``)."""

    def __init__(self, port: int) -> None:
        self.client = AsyncTcpClient("127.0.0.1", port)
        self.got: list[Event] = []

    async def __aenter__(self) -> Ha:
        await self.client.connect()
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.client.disconnect()

    async def send(self, kind: str, data: dict[str, Any] | None = None, payload: bytes | None = None) -> None:
        await self.client.write_event(Event(kind, data or {}, payload))

    async def expect(self, kind: str, timeout: float = WAIT_S) -> Event:
        """The next event of ``kind`` (others read meanwhile are kept in ``got``)."""
        async with asyncio.timeout(timeout):
            while True:
                event = await self.client.read_event()
                assert event is not None, f"the satellite closed the connection while {kind} was awaited"
                self.got.append(event)
                if event.type == kind:
                    return event

    async def quiet(self, seconds: float) -> list[str]:
        """Event types read within ``seconds``."""
        types = []
        try:
            async with asyncio.timeout(seconds):
                while (event := await self.client.read_event()) is not None:
                    self.got.append(event)
                    types.append(event.type)
        except TimeoutError:
            pass
        return types

    async def reply(self, seconds: float, rate: int = 22050, synthesize: str | None = "客厅灯已打开") -> None:
        """HA's TTS answer (or, without ``synthesize``, an announcement): a tone of ``seconds``."""
        if synthesize is not None:
            await self.send("synthesize", {"text": synthesize, "voice": {"language": "zh-CN"}})
        fmt = {"rate": rate, "width": 2, "channels": 1}
        await self.send("audio-start", {**fmt, "timestamp": 0})
        tone = (8000 * np.sin(np.arange(int(seconds * rate)) * 0.05)).astype("<i2").tobytes()
        for i in range(0, len(tone), 2048):
            await self.send("audio-chunk", fmt, tone[i : i + 2048])
        await self.send("audio-stop")


def played_s(speak: Speak) -> float:
    player = speak.player.player  # type: ignore[union-attr]  # the RecordingPlayer inside the reference tap
    return float(player.samples / player.rate)


def test_describe_ping_and_a_request_through_home_assistants_pipeline(sat):
    satellite, mic, speak = sat

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            await ha.send("run-satellite")
            await ha.send("describe")
            info = (await ha.expect("info")).data
            assert info["satellite"]["name"] == "测试卫星" and info["satellite"]["area"] == "客厅"
            assert info["satellite"]["installed"] is True
            assert not any(info.get(k) for k in ("asr", "tts", "wake", "handle", "intent"))  # HA: a satellite only
            await ha.send("ping", {"text": "p1"})
            assert (await ha.expect("pong")).data.get("text") == "p1"
            assert wait_until(satellite.link.running.is_set)

            mic.put(n=3)
            mic.put(marker=1)  # 小智小智 alone: the request follows
            assert (await ha.expect("detection")).data["name"] == "xiaozhixiaozhi"
            run = (await ha.expect("run-pipeline")).data
            assert (run["start_stage"], run["end_stage"], run["restart_on_end"]) == ("asr", "tts", False)
            assert (await ha.expect("audio-start")).data["rate"] == 16000
            mic.put(0.25, n=20)  # the request
            chunk = await ha.expect("audio-chunk")
            assert chunk.data["rate"] == 16000 and chunk.data["width"] == 2 and chunk.data["channels"] == 1
            await ha.expect("audio-chunk")
            while ha.got[-1].type == "audio-chunk" and np.frombuffer(ha.got[-1].payload or b"", "<i2").max() < 8000:
                await ha.expect("audio-chunk")  # the frames before the request are silence
            assert abs(int(np.median(np.frombuffer(ha.got[-1].payload or b"", "<i2"))) - round(0.25 * 32767)) <= 1

            await ha.send("transcribe", {"language": "zh-CN"})
            await ha.send("voice-started", {"timestamp": 100})
            await ha.send("voice-stopped", {"timestamp": 700})
            await ha.send("transcript", {"text": "打开客厅灯"})
            assert wait_until(lambda: satellite.link.runs[0].over.is_set())
            mic.put(0.25, n=20)  # HA has heard it: the satellite stops streaming at the next frame
            await ha.expect("audio-stop")
            assert "audio-chunk" not in await ha.quiet(0.5)

            await ha.reply(0.5)
            await ha.expect("played")
            assert played_s(speak) == pytest.approx(0.5, abs=0.03)  # at the player's rate, resampled from 22050
            assert speak.played.end_tick is not None  # the echo reference got it too
            runs = satellite.link.runs
            assert len(runs) == 1 and runs[0].transcript == "打开客厅灯" and runs[0].ended == "transcript"
            assert runs[0].reply is not None and runs[0].reply.kind == "reply" and not runs[0].reply.cut

    asyncio.run(scenario())


def test_a_request_said_in_one_breath_is_sent_whole_and_stopped(sat):
    satellite, mic, _speak = sat

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            await ha.send("run-satellite")
            assert wait_until(satellite.link.running.is_set)
            mic.put(marker=1)  # phrase alone: then HA ends it with an error
            await ha.expect("run-pipeline")
            await ha.send("error", {"text": "no speech", "code": "stt-no-text-recognized"})
            assert wait_until(lambda: satellite.link.runs[0].over.is_set())
            mic.put(n=2)
            await ha.expect("audio-stop")
            mic.put(n=2)
            mic.put(marker=2)  # 小智小智，打开客厅灯 in one breath
            await ha.expect("run-pipeline")
            await ha.expect("audio-stop")  # the request is complete: stopped without waiting for HA
            assert satellite.link.runs[0].error == "no speech (stt-no-text-recognized)"
            assert satellite.link.runs[1].audio_stopped

    asyncio.run(scenario())


def test_timer_events_keep_the_table_and_a_finished_timer_is_said_on_the_board(sat):
    satellite, _mic, speak = sat

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            await ha.send("run-satellite")
            await ha.send("timer-started", {"id": "t1", "total_seconds": 300, "start_minutes": 5})
            await ha.send("timer-started", {"id": "t2", "total_seconds": 10, "name": "煮蛋", "start_seconds": 10})
            await ha.send("timer-updated", {"id": "t1", "is_active": False, "total_seconds": 240})
            await ha.send("timer-cancelled", {"id": "t1"})
            await ha.send("ping")
            await ha.expect("pong")
            assert satellite.timers.ids() == ["t2"]
            satellite.link.core.ringer.max_s = 0.5  # nobody stops it: it rings its longest (15 min in the product)
            await ha.send("timer-finished", {"id": "t2"})
            await ha.send("ping")
            await ha.expect("pong")

    asyncio.run(scenario())
    assert wait_until(lambda: satellite.playback.said == [f"煮蛋，{FINISHED_WORDS}"] and not satellite.link.core.ringer.ringing
                      and not satellite.playback.playing)
    assert satellite.timers.ids() == []
    voice = speak.tts
    assert voice is not None and voice.said  # type: ignore[attr-defined]  # rkvoice's own voice said it
    assert played_s(speak) > 0.1


def test_an_announcement_plays_and_is_acknowledged(sat):
    satellite, _mic, speak = sat

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            await ha.send("run-satellite")
            await ha.reply(0.3, synthesize=None)  # assist_satellite.announce: audio with no synthesize
            await ha.expect("played")

    asyncio.run(scenario())
    assert [s.kind for s in satellite.playback.streams] == ["announce"]
    assert played_s(speak) == pytest.approx(0.3, abs=0.03)


def test_audio_ha_never_announced_gets_one_warning_and_nothing_hangs(sat, caplog):
    satellite, _mic, speak = sat
    caplog.set_level(logging.WARNING, logger="rkvoice.satellite")

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            fmt = {"rate": 16000, "width": 2, "channels": 1}
            for _ in range(3):  # microphone audio sent to the satellite, no audio-start
                await ha.send("audio-chunk", fmt, bytes(640))
            await ha.send("audio-stop")
            await ha.send("timer-started", {"total_seconds": 5})  # malformed: no id
            await ha.send("audio-start", {"rate": 16000, "width": 4, "channels": 1})  # a format it cannot play
            await ha.send("audio-chunk", {"rate": 16000, "width": 4, "channels": 1}, bytes(640))
            await ha.send("audio-stop")
            await ha.send("ping", {"text": "still here"})
            assert (await ha.expect("pong")).data["text"] == "still here"
            assert "played" not in [e.type for e in ha.got]

    asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert sum("outside an audio-start" in m for m in lines) == 1, lines
    assert sum("malformed timer-started" in m for m in lines) == 1, lines
    assert sum("only 16-bit" in m for m in lines) == 1, lines
    assert len(lines) == 3, lines
    assert played_s(speak) == 0.0


def test_pause_stops_streaming_and_a_wake_while_paused_is_dropped(sat, caplog):
    satellite, mic, _speak = sat
    caplog.set_level(logging.WARNING, logger="rkvoice.satellite")

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            await ha.send("run-satellite")
            assert wait_until(satellite.link.running.is_set)
            mic.put(marker=1)
            await ha.expect("run-pipeline")
            mic.put(0.1, n=5)
            await ha.expect("audio-chunk")
            await ha.send("pause-satellite")  # the mute switch
            assert wait_until(lambda: satellite.link.runs[0].over.is_set())
            mic.put(0.1, n=10)
            await ha.expect("audio-stop")
            mic.put(marker=1)
            types = await ha.quiet(0.5)
            assert "audio-chunk" not in types and "run-pipeline" not in types
            assert satellite.link.runs[0].ended == "paused"

    asyncio.run(scenario())
    assert any("not running the satellite (paused)" in r.getMessage() for r in caplog.records)


def test_home_assistant_reconnects_and_a_barge_in_cuts_the_reply(sat):
    satellite, mic, speak = sat

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            await ha.send("run-satellite")
            await ha.send("describe")
            await ha.expect("info")
        assert wait_until(lambda: not satellite.link.connected.is_set())
        async with Ha(satellite.link.port) as ha:  # HA comes back
            await ha.send("run-satellite")
            await ha.send("describe")
            await ha.expect("info")
            assert wait_until(satellite.link.running.is_set)
            mic.put(marker=1)
            await ha.expect("run-pipeline")
            await ha.send("transcript", {"text": "给我讲个故事"})
            assert wait_until(lambda: satellite.link.runs[0].over.is_set())
            mic.put(n=2)
            await ha.expect("audio-stop")
            await ha.reply(3.0, synthesize="从前有座山")
            assert wait_until(lambda: played_s(speak) > 0.2)
            mic.put(n=2)
            mic.put(marker=1)  # the wake phrase while the reply plays: barge-in
            await ha.expect("run-pipeline")  # a new run, and the cut reply is over (in either order)
            if "played" not in [e.type for e in ha.got]:
                await ha.expect("played")

    asyncio.run(scenario())
    assert satellite.link.connections == 2
    reply = satellite.link.runs[0].reply
    assert reply is not None and reply.cut
    player = speak.player.player  # type: ignore[union-attr]
    heard = sum(end - start for start, end in player.segments)  # cut by the clear at its moment
    assert heard < 2.5, player.segments  # the player was cleared before the 3 s reply played out


def test_streaming_ends_in_audio_time_without_an_answer():
    """The request's audio stops after max_request_s of audio, and with no transcript the wake listens
    again answer_wait_s later (counted in samples: no clock)."""
    cfg = config()
    clock = FakeClock()
    player = RecordingPlayer(cfg, clock)
    link = SatelliteLink(cfg, Playback(player, None, clock=clock), TimerTable(clock), clock)
    link.running.set()  # as after run-satellite; with no connection the events go nowhere
    wake = MarkerWake(["", ""])
    mic = SatelliteMic(wake, link, link.playback, max_request_s=1.0, answer_wait_s=2.0)
    frame = np.zeros(FRAME, np.float32)
    marker = frame.copy()
    marker[0] = 1
    mic.accept(marker)
    run = mic.run
    assert run is not None
    for _ in range(int(1.0 * RATE / FRAME) + 1):
        mic.accept(frame)
    assert run.audio_stopped and not run.over.is_set()
    assert run.sent_s == pytest.approx(1.0, abs=2 * FRAME / RATE)
    for _ in range(int(2.0 * RATE / FRAME) + 1):
        mic.accept(frame)
    assert run.over.is_set() and run.ended == "no transcript" and mic.run is None
    marker[0] = 2
    mic.accept(marker)  # listening for the wake again
    assert mic.run is not None and mic.run is not run


def test_timer_table_counts_down_on_its_clock():
    clock = FakeClock()
    table = TimerTable(clock)
    table.started("a", 60)
    clock.advance(15)
    assert table.remaining_s("a") == pytest.approx(45)
    table.updated("a", False, 40)  # paused with 40 s left
    clock.advance(100)
    assert table.remaining_s("a") == pytest.approx(40)
    table.updated("a", True, 40)
    clock.advance(10)
    assert table.remaining_s("a") == pytest.approx(30)
    assert table.finished("a") == FINISHED_WORDS and table.remaining_s("a") is None
    assert table.finished("unknown") == FINISHED_WORDS  # started before we connected: still said


def _marked_wav(path: Any, seconds: float, marker_at_frame: int | None) -> None:
    audio = np.zeros(int(seconds * RATE), np.float32)
    if marker_at_frame is not None:
        audio[marker_at_frame * FRAME] = 1.0  # MarkerWake: script item 1
    sf.write(path, audio, RATE, subtype="FLOAT")


def test_file_mode_writes_the_reply_and_returns_after_played(tmp_path):
    cfg = config()
    out = tmp_path / "reply.wav"
    speak = speak_stage(cfg, player=file_player(cfg, str(out)))
    _marked_wav(tmp_path / "rec.wav", 1.0, 5)
    result: dict[str, Any] = {}

    async def home_assistant(port: int) -> None:
        async with Ha(port) as ha:
            await ha.send("run-satellite")
            await ha.expect("run-pipeline")
            await ha.send("transcribe", {"language": "zh-CN"})
            await ha.expect("audio-chunk")
            await ha.send("transcript", {"text": "打开客厅灯"})
            await ha.reply(0.4)
            await ha.expect("played")
            result["played"] = True

    def ready(s: Satellite) -> None:
        threading.Thread(target=lambda: asyncio.run(home_assistant(s.link.port)), daemon=True).start()

    run = serve_file(cfg, "tcp://127.0.0.1:0", str(tmp_path / "rec.wav"), str(out), pipeline_wait_s=10,
                     ready=ready, stages=(StubHear(MarkerWake([""])), speak))  # type: ignore[arg-type]
    speak.close()  # closes the player: the WAV appears
    assert run.transcript == "打开客厅灯" and run.reply is not None
    assert wait_until(lambda: result.get("played", False))
    audio, rate = sf.read(out)
    assert len(audio) / rate == pytest.approx(0.4, abs=0.03)


def test_file_mode_fails_in_one_line_when_home_assistant_never_runs_the_pipeline(tmp_path):
    cfg = config()
    speak = speak_stage(cfg)
    _marked_wav(tmp_path / "rec.wav", 0.5, None)  # no wake phrase in it

    async def home_assistant(port: int) -> None:
        async with Ha(port) as ha:
            await ha.send("run-satellite")
            await ha.quiet(3.0)

    def ready(s: Satellite) -> None:
        threading.Thread(target=lambda: asyncio.run(home_assistant(s.link.port)), daemon=True).start()

    with pytest.raises(RkvoiceError) as err:
        serve_file(cfg, "tcp://127.0.0.1:0", str(tmp_path / "rec.wav"), None, pipeline_wait_s=1.0, ready=ready,
                   stages=(StubHear(MarkerWake([""])), speak))  # type: ignore[arg-type]
    speak.close()
    assert err.value.code == "no-pipeline"
    assert "within 1 s" in str(err.value) and "no wake phrase" in str(err.value) and "\n" not in str(err.value)


def test_a_taken_port_is_one_clear_error():
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        cfg = config()
        speak = speak_stage(cfg)
        satellite = Satellite(replace(cfg), StubHear(MarkerWake([])), speak,  # type: ignore[arg-type]
                              uri=f"tcp://127.0.0.1:{held.getsockname()[1]}")
        with pytest.raises(RkvoiceError, match="cannot listen on .*pick a free port"):
            satellite.start()
        satellite.close()
        speak.close()


def test_check_says_whether_the_satellite_port_is_free():
    import socket

    from rkvoice.cli.check import check_pipeline
    from rkvoice.satellite.info import port_note

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        cfg = replace(config(area="客厅"), satellite=replace(config().satellite, uri=f"tcp://127.0.0.1:{port}"))
        assert "cannot be bound now" in port_note(cfg)
    assert "is free" in port_note(cfg)
    line = [c for c in check_pipeline(cfg) if c.stage == "satellite"]
    assert len(line) == 1 and line[0].engine == f"tcp://127.0.0.1:{port}" and line[0].ok
    assert not [c for c in check_pipeline(load_config()) if c.stage == "satellite"]  # off: no line


def test_the_daemon_hands_the_microphones_requests_to_home_assistant(tmp_path):
    """satellite.uri set: the daemon's microphone loop is the satellite's (a wake goes to HA's pipeline,
    the local assistant is not asked); SIGTERM's path closes the port."""
    from fakes import ScriptedLlm

    from rkvoice.answer.assistant import Assistant
    from rkvoice.daemon.sdnotify import Notifier
    from rkvoice.daemon.service import EXIT_OK, Daemon
    from rkvoice.stages import Hear, Plan, StageSpecs, answer_spec, hear_spec, speak_spec

    class MarkerHear(Hear):
        def load(self) -> None:
            self.wake = MarkerWake(["", ""])

        def close(self) -> None:
            pass

    cfg = load_config([{"daemon": {"lock_file": str(tmp_path / "lock")}, "state": {"dir": str(tmp_path / "state")},
                        "hear": {"ack": "none"}, "satellite": {"uri": "tcp://127.0.0.1:0", "area": "客厅"}}])
    llm, mic = ScriptedLlm(), FeedMic()
    plan = Plan(stages=StageSpecs(hear_spec(MarkerHear), answer_spec(lambda c: Assistant(c, llm=llm)),
                                  speak_spec(lambda c: Speak(c, player=lambda cc: RecordingPlayer(cc),
                                                             tts=lambda cc: FakeVoice(char_s=0.005)))),
                source=lambda c: mic)
    daemon = Daemon(cfg, plan, lambda: cfg, notifier=Notifier(socket_name=""))
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(daemon.run(handle_signals=False)), daemon=True)
    thread.start()
    assert wait_until(lambda: getattr(daemon.listener, "satellite", None) is not None)
    port = daemon.listener.satellite.link.port  # type: ignore[union-attr]

    async def scenario() -> None:
        async with Ha(port) as ha:
            await ha.send("run-satellite")
            await ha.send("describe")
            assert (await ha.expect("info")).data["satellite"]["area"] == "客厅"
            assert wait_until(lambda: daemon.listener.satellite.link.running.is_set())  # type: ignore[union-attr]
            mic.put(n=2)
            mic.put(marker=1)
            await ha.expect("run-pipeline")
            await ha.send("transcript", {"text": "打开大灯"})
            link = daemon.listener.satellite.link  # type: ignore[union-attr]
            assert wait_until(lambda: link.runs[0].over.is_set())
            mic.put(n=2)  # the next frame ends the streaming
            await ha.expect("audio-stop")
            await ha.reply(0.2)
            await ha.expect("played")

    async def describe(port: int) -> None:
        async with Ha(port) as ha:
            await ha.send("describe")
            await ha.expect("info")

    try:
        asyncio.run(scenario())
        first = daemon.listener
        daemon.request_reload()  # SIGHUP: the satellite is closed and served again on the new stages
        assert wait_until(lambda: daemon.listener is not first and getattr(daemon.listener, "satellite", None)
                          and daemon.listener.satellite.link.port)  # type: ignore[union-attr]
        second = daemon.listener.satellite.link.port  # type: ignore[union-attr]
        asyncio.run(describe(second))
    finally:
        daemon.request_stop()
        thread.join(10)
    assert code == [EXIT_OK]
    assert llm.calls == [] and daemon.turns == 0  # nothing was answered locally
    import socket

    for closed in (port, second):  # the first satellite's port closed at the reload, the second's at the exit
        with socket.socket() as sock, pytest.raises(OSError):
            sock.settimeout(2)
            sock.connect(("127.0.0.1", closed))


def test_a_barge_in_also_drops_the_audio_of_the_cut_stream_still_to_come():
    """HA streams its reply in chunks over time: the ones that arrive after the clear are not played."""
    cfg = config()
    player = RecordingPlayer(cfg)
    done: list[Any] = []
    playback = Playback(player, None, on_played=done.append)
    playback.start()
    stream = playback.begin(22050, 2, 1, StreamKind.REPLY)
    assert stream is not None
    tone = (8000 * np.sin(np.arange(22050) * 0.05)).astype("<i2").tobytes()  # 1 s
    playback.chunk(stream, tone)
    assert wait_until(lambda: player.samples > 0)
    playback.clear("barge-in")
    written = player.samples
    for _ in range(3):
        playback.chunk(stream, tone)  # the rest of the reply, still arriving
    playback.end(stream)
    assert wait_until(lambda: done == [stream])
    assert stream.cut and player.samples == written
    nxt = playback.begin(22050, 2, 1, StreamKind.REPLY)  # the next reply plays whole
    assert nxt is not None
    playback.chunk(nxt, tone[:4410])
    playback.end(nxt)
    assert wait_until(lambda: done == [stream, nxt]) and not nxt.cut
    assert player.samples - written == pytest.approx(0.1 * player.rate, abs=player.rate // 100)
    playback.close()


def test_the_boards_vad_ends_the_request_without_waiting_for_home_assistant():
    """With a segmenter, ``audio-stop`` goes out when the board's VAD closes the speech after the wake
    (in audio time), not at max_request_s."""
    from fakes import ScriptedSegmenter

    cfg = config()
    clock = FakeClock()
    link = SatelliteLink(cfg, Playback(RecordingPlayer(cfg, clock), None, clock=clock), TimerTable(clock), clock)
    link.running.set()
    vad = ScriptedSegmenter([(0.5, 1.0), (2.0, 3.0)], silence_s=0.5)  # noise before the wake, the request
    mic = SatelliteMic(MarkerWake([""]), link, link.playback, segmenter=vad)
    frame = np.zeros(FRAME, np.float32)
    marker = frame.copy()
    marker[0] = 1
    for _ in range(int(1.7 * RATE / FRAME)):
        mic.accept(frame)
    mic.accept(marker)  # the wake at ~1.7 s: speech before it is not the request
    run = mic.run
    assert run is not None
    while not run.audio_stopped and mic.now_s < 10:
        mic.accept(frame)
    assert run.audio_stopped and 3.5 <= mic.now_s < 3.5 + 2 * FRAME / RATE  # the request's end + 0.5 s silence
    assert not run.over.is_set()  # still waiting for HA's transcript


@pytest.mark.parametrize(("argv", "says"), [
    (["--satellite", "http://x:1"], "error: config: satellite.uri 'http://x:1' is not tcp://HOST:PORT"),
    (["--satellite", "tcp://127.0.0.1:1", "--file", "/nonexistent.wav"], "error: hear: audio file /nonexistent.wav"),
])
def test_bad_satellite_command_lines_are_one_line_and_a_non_zero_exit(argv, says):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "assistant.py"), *argv], capture_output=True, text=True,
                          timeout=120, cwd=root)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(says) and done.stdout == ""


def test_a_wake_home_assistant_will_hear_plays_the_acknowledgement():
    cfg = config()
    player = RecordingPlayer(cfg)
    playback = Playback(player, None)
    playback.start()
    link = SatelliteLink(cfg, playback, TimerTable())
    cue = np.full(player.rate // 10, 0.1, np.float32)
    mic = SatelliteMic(MarkerWake(["", ""]), link, playback, cue=cue)
    marker = np.zeros(FRAME, np.float32)
    marker[0] = 1
    mic.accept(marker)  # HA not running the satellite: dropped, no cue
    assert mic.run is None and player.samples == 0
    link.running.set()
    marker[0] = 2
    mic.accept(marker)
    assert mic.run is not None
    assert wait_until(lambda: player.samples == len(cue))
    playback.close()


def test_an_answer_streamed_before_its_synthesize_is_still_the_runs_reply(sat):
    """HA starts streaming TTS at intent-progress (an agent streaming its text): audio-start comes before
    synthesize; it is the run's reply, and the CLI's --file mode waits for it."""
    satellite, mic, _speak = sat

    async def scenario() -> None:
        async with Ha(satellite.link.port) as ha:
            await ha.send("run-satellite")
            assert wait_until(satellite.link.running.is_set)
            mic.put(marker=1)
            await ha.expect("run-pipeline")
            await ha.send("transcribe", {"language": "zh-CN"})
            await ha.send("transcript", {"text": "讲个故事"})
            await ha.reply(0.2, synthesize=None)  # the streamed answer
            await ha.send("synthesize", {"text": "从前有座山"})  # what it was, told afterwards
            await ha.expect("played")
            await ha.reply(0.2, synthesize=None)  # later audio with no run waiting: an announcement
            await ha.expect("played")

    asyncio.run(scenario())
    run = satellite.link.runs[0]
    assert run.reply is not None and run.reply.kind == "reply"
    assert [s.kind for s in satellite.playback.streams] == ["reply", "announce"]


def test_a_stream_whose_audio_is_all_with_the_player_is_still_playing():
    """Everything HA sent so far was handed to the player (the queue is empty) but HA has not ended the
    stream: a wake now is a barge-in (the race that let a reply play on, 1 run in 15)."""
    cfg = config()
    player = RecordingPlayer(cfg)
    playback = Playback(player, None)
    playback.start()
    stream = playback.begin(22050, 2, 1, StreamKind.REPLY)
    assert stream is not None
    playback.chunk(stream, (8000 * np.sin(np.arange(22050) * 0.05)).astype("<i2").tobytes())
    assert wait_until(lambda: player.samples > player.rate // 2)  # (soxr holds a little back until the end)
    time.sleep(0.05)  # the chunk item is done: nothing is queued
    assert playback.playing
    playback.end(stream)
    assert wait_until(stream.ended.is_set) and not playback.playing
    playback.close()
