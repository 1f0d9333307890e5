"""The satellite's core, below the protocol: which audio a request sends (never more than the user meant),
the run state kept by one owner (transcripts credited to their own run, ends and beginnings in any
order), and the faults on the link's edge (a disconnect, our own errors against the peer's bad input)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from fakes import RecordingPlayer, wait_until
from test_satellite import FeedMic, Ha, StubHear, speak_stage
from wyoming.event import Event

from rkvoice.config import load_config
from rkvoice.hear.vad import Segment
from rkvoice.hear.wake import WakeHit
from rkvoice.satellite import link as link_module
from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.link import RATE, SatelliteLink
from rkvoice.satellite.mic import SatelliteMic
from rkvoice.satellite.playback import Playback
from rkvoice.satellite.run import LINK_DOWN
from rkvoice.satellite.state import Heard, SatelliteState
from rkvoice.satellite.timers import TimerTable
from tests.support.clock import FakeClock

FRAME = 512


def config() -> Any:
    cfg = load_config()
    return replace(cfg, satellite=replace(cfg.satellite, uri="tcp://127.0.0.1:0"))


class SentLink(SatelliteLink):
    """The link with HA running the satellite and no connection: what it would send is kept."""

    def __init__(self) -> None:
        cfg = config()
        clock = FakeClock()
        super().__init__(cfg, Playback(RecordingPlayer(cfg, clock), None, clock=clock), TimerTable(clock), clock)
        self.sent: list[Event] = []
        self.running.set()

    def send(self, event: Event) -> None:
        self.sent.append(event)

    def chunks(self) -> list[np.ndarray]:
        return [np.frombuffer(e.payload or b"", "<i2") for e in self.sent if e.type == "audio-chunk"]


class SegmentWake:
    """Wakes at frame ``at_frame``; the segment it tells of (``on_segment``, as asr-match does) spans
    ``seg_s`` (start, end) of stream time; the hit ends at ``end_s`` (its own frame's end when None)."""

    def __init__(self, at_frame: int, seg_s: tuple[float, float], request: str = "打开客厅灯",
                 end_s: float | None = None) -> None:
        self.at_frame, self.seg_s, self.request, self.end_s = at_frame, seg_s, request, end_s
        self.frames: list[np.ndarray] = []
        self.on_segment: Any = None

    def load(self) -> None:
        pass

    def restart(self, at_sample: int) -> None:
        pass

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        self.frames.append(frame)
        if len(self.frames) != self.at_frame:
            return None
        start, end = self.seg_s
        heard = np.concatenate(self.frames)[round(start * RATE): round(end * RATE)]
        self.on_segment(Segment(heard, start, end, len(self.frames) * FRAME / RATE))
        end_s = self.end_s if self.end_s is not None else len(self.frames) * FRAME / RATE
        return WakeHit(len(self.frames) * FRAME / RATE, end_s, "小智小智" + self.request, self.request)

    def flush(self) -> WakeHit | None:
        return None


def level(k: int) -> float:
    """Frame k's value: each frame of the room is told apart by its first sample once sent as int16."""
    return (k % 1000 + 1) / 2000.0


def pcm(value: float) -> int:
    return round(value * 32767.0)


def feed(mic: SatelliteMic, n: int, first: int = 0) -> None:
    for k in range(first, first + n):
        mic.accept(np.full(FRAME, level(k), np.float32))


@pytest.mark.parametrize("request_text", ["打开客厅灯", ""])
def test_a_request_whose_segment_does_not_line_up_starts_at_the_wake_phrases_end(request_text):
    """20 s of room audio, then a wake whose segment closed 2 s before the hit's end (they do not line up):
    the first sample sent is the one at the wake phrase's end, never the room audio before it (the 30 s
    behind the wake were sent before)."""
    link = SentLink()
    at = 625  # 20 s of frames
    wake = SegmentWake(at, (15.0, 18.0), request=request_text)
    mic = SatelliteMic(wake, link, link.playback)
    feed(mic, at)
    assert mic.run is not None
    end_frame = at  # the hit ends at its own frame's end: the next frame is the first after the phrase
    feed(mic, 3, first=at)
    first = next(c[0] for c in link.chunks() if len(c))
    if request_text:  # said in one breath: its audio is lost with the segment; a little silence, and audio-stop
        assert first == 0 and link.sent[-1].type == "audio-stop"
    else:
        assert first == pcm(level(end_frame)), (first, pcm(level(0)))
    sent = np.concatenate(link.chunks())
    assert not np.isin(sent, [pcm(level(k)) for k in range(at)]).any()  # nothing of the room before the wake


def test_a_request_said_in_one_breath_sends_its_segment_from_its_start():
    link = SentLink()
    at = 625
    end_s = at * FRAME / RATE
    wake = SegmentWake(at, (end_s - 3.0, end_s))
    mic = SatelliteMic(wake, link, link.playback)
    feed(mic, at)
    sent = np.concatenate(link.chunks())
    first_frame = round((end_s - 3.0) * RATE) // FRAME
    assert sent[0] == pcm(level(first_frame))
    assert len(sent) >= 3.0 * RATE and not np.isin(sent, [pcm(level(k)) for k in range(first_frame)]).any()
    assert link.sent[-1].type == "audio-stop"


def test_the_head_of_a_request_is_capped_in_seconds():
    """A one-breath segment longer than the request's cap (a TV talking after the phrase): at most
    ``max_request_s`` of it is sent, from its start."""
    link = SentLink()
    at = 700
    end_s = at * FRAME / RATE
    wake = SegmentWake(at, (1.0, end_s))
    mic = SatelliteMic(wake, link, link.playback, max_request_s=5.0)
    feed(mic, at)
    sent = np.concatenate(link.chunks())
    assert sent[0] == pcm(level(RATE // FRAME))
    assert len(sent) <= 5.0 * RATE + RATE // 4  # the cap, and the quarter second of silence after it


# -- the run bookkeeping: HA's events go to their own run, in any order ------------------------------------


def ha(link: SatelliteLink, kind: str, **data: Any) -> None:
    """An event from HA, handled as the link's event loop handles it."""
    link._handle(Event(kind, data))


def test_a_late_transcript_is_credited_to_its_own_run_never_the_next():
    """Run 1 was given up on (no transcript in time) and run 2 begun; HA's transcript of run 1 then comes:
    it is run 1's, and run 2 streams on until HA hears it."""
    link = SentLink()
    first = link.core.begin_run(np.zeros(0, np.float32))
    assert first is not None
    ha(link, "transcribe", language="zh-CN")
    first.finish("no transcript")  # as the microphone side does after answer_wait_s
    second = link.core.begin_run(np.zeros(0, np.float32))
    assert second is not None
    ha(link, "transcript", text="打开客厅灯")  # late: run 1's
    assert first.transcript == "打开客厅灯" and first.ended == "no transcript"
    assert not second.over.is_set() and second.transcript is None
    ha(link, "transcribe", language="zh-CN")  # HA starts run 2's pipeline
    ha(link, "transcript", text="关灯")
    assert second.over.is_set() and second.ended == "transcript" and second.transcript == "关灯"


def test_an_error_before_speech_to_text_ends_the_oldest_run_asked():
    link = SentLink()
    first = link.core.begin_run(np.zeros(0, np.float32))
    second = link.core.begin_run(np.zeros(0, np.float32))
    assert first is not None and second is not None
    assert first.ended == "replaced" and not second.over.is_set()
    ha(link, "error", text="no pipeline", code="pipeline-not-found")  # HA failed run 1 before its transcribe
    assert first.error == "no pipeline (pipeline-not-found)" and first.ended == "replaced"  # its own, recorded
    assert not second.over.is_set()
    ha(link, "transcribe", language="zh-CN")
    ha(link, "transcript", text="关灯")
    assert second.transcript == "关灯"


def test_a_transcript_for_no_run_is_one_line(caplog):
    link = SentLink()
    caplog.set_level(logging.INFO, logger="rkvoice.satellite")
    ha(link, "transcript", text="打开客厅灯")
    ha(link, "transcribe", language="zh-CN")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and all(r.exc_info is None for r in warnings)
    assert link.runs == []


def live_runs_are_the_current_one(core: SatelliteCore) -> None:
    """No run is orphaned: the only run not over is the core's current one (if any)."""
    live = [r for r in core.runs if not r.over.is_set()]
    assert live == ([core.run] if core.run is not None else []), (live, core.run)


async def settle(home: Ha, satellite: Any, mic: FeedMic, fed: int) -> None:
    """Everything HA sent so far and the ``fed`` frames have been handled (a ping answered, the frames heard)."""
    await home.send("ping", {"text": "settled"})
    while (await home.expect("pong")).data.get("text") != "settled":
        pass
    assert wait_until(lambda: satellite.link.core.heard_to >= fed * FRAME)


def test_a_wake_while_the_last_run_ends_never_orphans_a_run(sat, racing):
    """HA's transcript ends run n while the microphone thread posts the next wake, 300 times, on the
    real threads: run n is heard, and a wake begins a run only once it ended; HA's next pipeline is the
    new run's."""
    satellite, mic, _speak = sat
    core = satellite.link.core

    async def scenario() -> None:
        fed = 0
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await settle(home, satellite, mic, fed)
            mic.put(marker=1)
            fed += 1
            await home.expect("run-pipeline")
            for i in range(300):
                old = core.runs[-1]
                await home.send("transcribe", {"language": "zh-CN"})
                both(lambda: mic.put(marker=1), lambda: None)  # the wake on the microphone thread ...
                await home.send("transcript", {"text": f"第{i}次"})  # ... while HA's transcript arrives
                fed += 1
                await settle(home, satellite, mic, fed)
                assert old.transcript == f"第{i}次" and old.over.is_set()
                if core.runs[-1] is old:  # the wake came while run n streamed: no new run; wake again
                    mic.put(marker=1)
                    fed += 1
                    await settle(home, satellite, mic, fed)
                new = core.runs[-1]
                assert new is not old and not new.over.is_set() and core.run is new, (i, new)
                live_runs_are_the_current_one(core)
            await home.send("transcribe", {"language": "zh-CN"})
            await home.send("transcript", {"text": "最后"})
            await settle(home, satellite, mic, fed)
            assert core.runs[-1].transcript == "最后" and core.run is None

    asyncio.run(scenario())


def test_a_wake_while_home_assistant_pauses_is_refused_or_ended(sat, racing, caplog):
    """pause-satellite while the microphone thread posts a wake, 300 times: the run is refused or ended
    as paused, never left streaming while HA no longer runs the satellite."""
    satellite, mic, _speak = sat
    core = satellite.link.core
    caplog.set_level(logging.ERROR)

    async def scenario() -> None:
        fed = 0
        async with Ha(satellite.link.port) as home:
            for i in range(300):
                await home.send("run-satellite")
                await settle(home, satellite, mic, fed)
                both(lambda: mic.put(marker=1), lambda: None)
                await home.send("pause-satellite")
                fed += 1
                await settle(home, satellite, mic, fed)
                assert not satellite.link.running.is_set() and core.state is SatelliteState.MUTED
                assert core.run is None, (i, core.run)
                assert all(r.over.is_set() for r in core.runs), i
                assert all(r.ended in ("paused", "replaced") for r in core.runs), i

    asyncio.run(scenario())
    assert not caplog.records


def both(a: Any, b: Any) -> None:
    """``a()`` and ``b()`` at once, on two threads."""
    start = threading.Barrier(2)

    def go(fn: Any) -> None:
        start.wait()
        fn()

    other = threading.Thread(target=go, args=(b,))
    other.start()
    go(a)
    other.join()


@pytest.fixture
def racing() -> Iterator[None]:
    """Threads switch as often as the interpreter lets them (the races need no luck)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


# -- the connection's edge: a disconnect, the writer's fault, our faults against HA's bad input ------------


@pytest.fixture
def sat() -> Iterator[tuple[Any, FeedMic, Any]]:
    """A satellite serving on a free port, its microphone fed by the test."""
    from fakes import MarkerWake

    from rkvoice.satellite.run import Satellite

    cfg = config()
    speak = speak_stage(cfg)
    satellite = Satellite(cfg, StubHear(MarkerWake(["", "打开客厅灯"])), speak)  # type: ignore[arg-type]
    satellite.start()
    mic = FeedMic()
    thread = threading.Thread(target=satellite.run, args=(mic, False), daemon=True)
    thread.start()
    yield satellite, mic, speak
    mic.close()
    satellite.close()
    thread.join(5)
    speak.close()


def test_a_disconnect_mid_announcement_ends_the_stream(sat):
    satellite, _mic, _speak = sat

    async def scenario() -> None:
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            fmt = {"rate": 22050, "width": 2, "channels": 1}
            await home.send("audio-start", {**fmt, "timestamp": 0})
            await home.send("audio-chunk", fmt, bytes(2 * 22050 // 5))  # 0.2 s, then HA goes (no audio-stop)
            assert wait_until(lambda: satellite.playback.streams and satellite.playback.streams[0].samples > 0)

    asyncio.run(scenario())
    stream = satellite.playback.streams[0]
    assert wait_until(lambda: not satellite.link.connected.is_set())
    assert wait_until(lambda: stream.ended.is_set() and not satellite.playback.playing, 5.0)
    assert stream.audio_s == pytest.approx(0.2)


def test_a_writer_fault_closes_the_connection_and_is_logged_with_its_traceback(sat, monkeypatch, caplog):
    satellite, _mic, _speak = sat
    caplog.set_level(logging.INFO, logger="rkvoice.satellite")
    write = link_module.async_write_event

    async def broken(event: Event, writer: Any) -> None:
        if event.type == "pong":
            raise RuntimeError("the writer broke")
        await write(event, writer)

    monkeypatch.setattr(link_module, "async_write_event", broken)

    async def scenario() -> None:
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await home.send("ping", {"text": "p"})
            async with asyncio.timeout(5):
                while await home.client.read_event() is not None:
                    pass  # the satellite closes the connection

    asyncio.run(scenario())
    assert wait_until(lambda: any(r.exc_info for r in caplog.records))
    fault = [r for r in caplog.records if r.exc_info]
    assert len(fault) == 1 and fault[0].levelno == logging.ERROR and "writing" in fault[0].getMessage()
    assert isinstance(fault[0].exc_info[1], RuntimeError)  # type: ignore[index]


def test_our_own_fault_is_a_traceback_and_the_peers_bad_input_one_line(sat, monkeypatch, caplog):
    satellite, _mic, _speak = sat
    caplog.set_level(logging.WARNING, logger="rkvoice.satellite")

    def broken_begin(*_args: Any) -> None:
        raise KeyError("a bug in playback")

    monkeypatch.setattr(satellite.playback, "begin", broken_begin)

    async def scenario() -> None:
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await home.send("audio-start", {"rate": 22050, "width": 2, "channels": 1})  # good input, our fault
            await home.send("timer-started", {"total_seconds": 5})  # HA's bad input: no id
            await home.send("ping", {"text": "still here"})
            assert (await home.expect("pong")).data["text"] == "still here"

    asyncio.run(scenario())
    ours = [r for r in caplog.records if r.exc_info]
    peers = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(ours) == 1 and ours[0].levelno == logging.ERROR and "audio-start" in ours[0].getMessage()
    assert "malformed" not in ours[0].getMessage() and isinstance(ours[0].exc_info[1], KeyError)  # type: ignore[index]
    assert len(peers) == 1 and peers[0].exc_info is None and "timer-started" in peers[0].getMessage()


# -- supervised: the daemon's watchdog starves when the satellite hears nothing or its link stopped -------


class DyingLink(SatelliteLink):
    """A link whose event loop fails 0.3 s after it bound its port (and was reported ready)."""

    async def _serve(self, stop: Any, ready: Any) -> None:
        serving = asyncio.create_task(super()._serve(stop, ready))
        await asyncio.sleep(0.3)
        serving.cancel()
        raise RuntimeError("the link's loop broke")


@contextlib.contextmanager
def satellite_daemon(tmp_path: Any, script: list[Any] | None = None, llm: Any = None,
                     satellite: dict[str, Any] | None = None) -> Iterator[tuple[Any, FeedMic]]:
    """The daemon with satellite.uri set (and the ``satellite`` keys given, e.g. another protocol), on
    scripted engines (the wake's ``script``), its microphone fed by the test."""
    from fakes import FakeVoice, MarkerWake, ScriptedAsr, ScriptedLlm, ScriptedSegmenter

    from rkvoice.answer.assistant import Assistant
    from rkvoice.daemon.sdnotify import Notifier
    from rkvoice.daemon.service import Daemon
    from rkvoice.stages import Hear, Plan, Speak, StageSpecs, answer_spec, hear_spec, speak_spec

    class MarkerHear(Hear):
        def load(self) -> None:
            self.wake = MarkerWake(script or ["", ""])
            self.asr, self.segmenter = ScriptedAsr([]), ScriptedSegmenter()

        def close(self) -> None:
            pass

    cfg = load_config([{"daemon": {"lock_file": str(tmp_path / "lock")}, "state": {"dir": str(tmp_path / "state")},
                        "hear": {"ack": "none", "follow_up_s": 0},
                        "satellite": {"uri": "tcp://127.0.0.1:0", **(satellite or {})}}])
    mic = FeedMic()
    llm = llm or ScriptedLlm()
    plan = Plan(stages=StageSpecs(hear_spec(MarkerHear), answer_spec(lambda c: Assistant(c, llm=llm)),
                                  speak_spec(lambda c: Speak(c, player=lambda cc: RecordingPlayer(cc),
                                                             tts=lambda cc: FakeVoice(char_s=0.005)))),
                source=lambda c: mic)
    daemon = Daemon(cfg, plan, lambda: cfg, notifier=Notifier(socket_name=""))
    thread = threading.Thread(target=lambda: daemon.run(handle_signals=False), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: getattr(daemon.listener, "satellite", None) is not None)
        yield daemon, mic
    finally:
        daemon.request_stop()
        mic.close()
        thread.join(10)
    assert not thread.is_alive()


@contextlib.contextmanager
def home_assistant_connected(daemon: Any) -> Iterator[None]:
    """A scripted HA connected to the daemon's satellite (running it) until the block ends; the
    microphone is the satellite's by then."""
    from rkvoice.satellite.run import Mode

    listener = daemon.listener
    stop, ready = threading.Event(), threading.Event()

    async def hold() -> None:
        async with Ha(listener.satellite.link.port) as home:
            await home.send("run-satellite")
            ready.set()
            while not stop.is_set():
                await home.quiet(0.05)

    thread = threading.Thread(target=lambda: asyncio.run(hold()), daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        assert wait_until(lambda: listener.mode is Mode.SATELLITE and listener.satellite.link.running.is_set())
        yield
    finally:
        stop.set()
        thread.join(5)


def test_the_daemon_watches_the_satellite_through_one_listener_interface(tmp_path, caplog):
    """The daemon builds the satellite as it builds the local loop (report, busy): a wake engine that
    raises is reported as a failed turn with its traceback, and the satellite hears on."""
    from rkvoice.daemon.listener import Listener
    from rkvoice.satellite.run import SatelliteListener

    caplog.set_level(logging.INFO)
    with satellite_daemon(tmp_path, ["", RuntimeError("the wake model broke")]) as (daemon, mic), \
            home_assistant_connected(daemon):
        listener: Listener = daemon.listener
        assert isinstance(listener, SatelliteListener)
        mic.put(n=3)  # (the local loop's reader may take one more frame as it goes)
        mic.put(marker=2)
        assert wait_until(lambda: daemon.turns == 1)

        def failed_lines() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.name == "rkvoice.daemon.service" and r.exc_info]

        assert wait_until(lambda: failed_lines())  # the turn is counted before its line is written
        failed = failed_lines()
        assert len(failed) == 1 and isinstance(failed[0].exc_info[1], RuntimeError)  # type: ignore[index]
        mic.put(n=3)
        assert wait_until(lambda: listener.satellite.mic.now_s >= 6 * FRAME / RATE)  # still hearing
        assert daemon.stalled(0.5) is None


def test_a_satellite_that_hears_nothing_stops_feeding_the_watchdog(tmp_path):
    with satellite_daemon(tmp_path) as (daemon, mic), home_assistant_connected(daemon):
        mic.put(n=5)
        assert wait_until(lambda: daemon.stalled(0.5) is not None)  # no frame for 0.5 s
        assert daemon.stalled(0.5)[0] == "hear"
        mic.put(n=1)
        assert wait_until(lambda: daemon.stalled(0.5) is None)  # hearing again: fed again


def test_a_link_that_stops_after_binding_is_logged_with_its_traceback_and_starves_the_watchdog(
        tmp_path, monkeypatch, caplog):
    from rkvoice.satellite import run as run_module

    caplog.set_level(logging.INFO)
    monkeypatch.setattr(run_module, "SatelliteLink", DyingLink)
    with satellite_daemon(tmp_path) as (daemon, mic):
        for _ in range(40):
            mic.put(n=1)  # the microphone delivers: only the link is down
            if daemon.stalled(0.5) is not None:
                break
            time.sleep(0.05)
        stuck = daemon.stalled(0.5)
        assert stuck is not None and stuck[0] == LINK_DOWN
        traced = [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], RuntimeError)]
        assert len(traced) == 1 and "link to Home Assistant stopped" in traced[0].getMessage()
        time.sleep(0.3)
        assert daemon.turns <= 1  # reported at most once (not once per frame or per retry)


# -- the state machine, and HA's bad input: one line each, back to idle, nothing leaked ---------------------


def test_the_state_follows_a_run_an_announcement_a_timer_and_a_pause(sat):
    satellite, mic, _speak = sat
    core = satellite.link.core
    states: list[str] = []
    core.on_state = lambda state: states.append(state.value)

    async def scenario() -> None:
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await settle(home, satellite, mic, 0)
            mic.put(marker=1)
            await home.expect("run-pipeline")
            await home.send("transcribe", {"language": "zh-CN"})
            mic.put(0.1, n=3)
            await settle(home, satellite, mic, 4)
            await home.send("voice-stopped", {"timestamp": 900})
            await home.send("transcript", {"text": "打开客厅灯"})
            await home.expect("audio-stop")
            await home.reply(0.2)
            await home.expect("played")
            await home.reply(0.2, synthesize=None)  # an announcement
            await home.expect("played")
            core.ringer.max_s = 0.5  # nobody stops it: it rings its longest (15 min in the product)
            await home.send("timer-finished", {"id": "t"})
            await settle(home, satellite, mic, 4)
            assert wait_until(lambda: core.state is SatelliteState.IDLE)
            await home.send("pause-satellite")
            await settle(home, satellite, mic, 4)

    asyncio.run(scenario())
    assert states == ["idle", "streaming", "idle", "responding", "idle", "announcing", "idle", "ringing", "idle",
                      "muted"], states


def test_a_request_stopped_by_the_board_awaits_its_reply():
    link = SentLink()
    core = link.core
    run = core.begin_run(np.zeros(0, np.float32))
    assert run is not None and core.state is SatelliteState.STREAMING
    core.on_heard(Heard(0, np.zeros(FRAME, np.float32), speech_end_s=0.5))
    assert run.audio_stopped and core.state is SatelliteState.AWAITING_REPLY
    ha(link, "transcript", text="打开客厅灯")
    assert core.state is SatelliteState.IDLE and core.run is None


def open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


def test_bad_input_is_one_line_each_and_nothing_leaks(caplog):
    """HA out of order (transcript and error for no run, audio for a stream that ended), a mute during a
    request, a disconnect mid-announcement, over three connections: one line each, the core back to
    idle, and once closed, no thread or socket left."""
    from fakes import MarkerWake

    from rkvoice.satellite.run import Satellite

    # before anything logs: an earlier test may have left the root logger at INFO (the daemon's own setup)
    caplog.set_level(logging.WARNING, logger="rkvoice.satellite")
    before_threads, before_fds = set(threading.enumerate()), open_fds()
    cfg = config()
    speak = speak_stage(cfg)
    satellite = Satellite(cfg, StubHear(MarkerWake([""])), speak)  # type: ignore[arg-type]
    satellite.start()
    mic = FeedMic()
    thread = threading.Thread(target=satellite.run, args=(mic, False), daemon=True)
    thread.start()
    fmt = {"rate": 16000, "width": 2, "channels": 1}

    async def scenario() -> None:
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await home.send("transcript", {"text": "没人问"})  # 1: for no run
            await home.send("audio-start", fmt)
            await home.send("audio-stop")
            await home.send("audio-chunk", fmt, bytes(640))  # 2: audio for a stream that ended
            await settle(home, satellite, mic, 0)
            mic.put(marker=1)
            await home.expect("run-pipeline")
            await home.send("pause-satellite")  # the mute, mid-request: its audio stops
            await home.expect("audio-stop")
            await settle(home, satellite, mic, 1)
            assert satellite.link.core.state is SatelliteState.MUTED and satellite.link.core.run is None
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await home.send("error", {"text": "late", "code": "x"})  # 3: an error for no run (its line)
            await home.send("audio-start", fmt)
            await home.send("audio-chunk", fmt, bytes(3200))  # then HA leaves mid-announcement
            await settle(home, satellite, mic, 1)
        assert wait_until(lambda: not satellite.link.connected.is_set())
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await settle(home, satellite, mic, 1)
            assert wait_until(lambda: satellite.link.core.state is SatelliteState.IDLE)

    asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 3, lines
    assert not [r for r in caplog.records if r.exc_info]
    mic.close()
    satellite.close()
    thread.join(5)
    speak.close()
    assert wait_until(lambda: set(threading.enumerate()) <= before_threads), set(threading.enumerate()) - before_threads
    assert open_fds() <= before_fds


# -- an answer while Home Assistant is away -----------------------------------------------------------------


def test_while_home_assistant_is_away_the_local_assistant_answers(tmp_path, caplog):
    """HA not connected (at start, then after it left): a wake is answered by the local assistant, and
    the log says so once per absence; HA connected: requests go to HA's pipeline, none locally."""
    from fakes import ScriptedLlm

    from rkvoice.satellite.run import Mode

    llm = ScriptedLlm()
    caplog.set_level(logging.INFO)
    away = "the local assistant answers"

    def absences() -> int:
        return sum(away in r.getMessage() for r in caplog.records)

    with satellite_daemon(tmp_path, ["讲个笑话", ""], llm=llm) as (daemon, mic):
        listener = daemon.listener
        assert wait_until(lambda: listener.mode is Mode.LOCAL)
        mic.put(n=3)
        mic.put(marker=1)  # 小智小智，讲个笑话
        assert wait_until(lambda: daemon.turns == 1) and len(llm.calls) == 1 and llm.calls[0].endswith("讲个笑话")
        mic.put(n=3)
        mic.put(marker=1)
        assert wait_until(lambda: daemon.turns == 2) and absences() == 1  # said once, not per wake

        async def home_assistant_runs_the_satellite() -> None:
            async with Ha(listener.satellite.link.port) as home:
                await home.send("run-satellite")
                assert wait_until(lambda: listener.mode is Mode.SATELLITE and listener.satellite.link.running.is_set())
                mic.put(n=3)  # (the local loop's reader may take one more frame as it goes)
                mic.put(marker=2)
                await home.expect("run-pipeline")
                await home.send("transcript", {"text": "打开大灯"})
                mic.put(n=2)
                await home.expect("audio-stop")

        asyncio.run(home_assistant_runs_the_satellite())
        assert daemon.turns == 2 and len(llm.calls) == 2  # HA's, not the local assistant's
        assert wait_until(lambda: listener.mode is Mode.LOCAL)  # HA left: local again
        mic.put(n=3)
        mic.put(marker=1)
        assert wait_until(lambda: daemon.turns == 3) and len(llm.calls) == 3
        assert absences() == 2


def test_home_assistant_that_connects_and_leaves_while_the_local_loop_stops_still_gets_the_satellite(tmp_path):
    """HA's setup connects, asks and leaves, then connects to run the satellite. When the local loop it
    stopped returns only after HA has left again, the listener goes on (the loop did not end on its
    own: its ``run`` does not return), and the next connection gets the satellite."""
    from rkvoice.satellite.run import Mode

    with satellite_daemon(tmp_path) as (daemon, mic):
        listener = daemon.listener
        assert wait_until(lambda: listener.mode is Mode.LOCAL)
        made: list[Any] = []
        returned: list[bool] = []
        run = listener.run  # the call in progress is the daemon's first; a second means it returned

        def counted_run() -> None:
            returned.append(True)
            run()

        class LateLocal:
            """The local loop (LocalAnswers) whose run returns only once HA has left again."""

            def __init__(self, gate: Any) -> None:
                self.stopped = threading.Event()
                made.append(self)

            def run(self) -> None:
                self.stopped.wait()
                wait_until(lambda: not listener._ha.is_set(), 2.0)  # (HA that stays: returns after 2 s)

            def interrupt(self, reason: str) -> None:
                self.stopped.set()

        listener.run, listener.local = counted_run, LateLocal

        async def probe() -> None:
            async with Ha(listener.satellite.link.port) as home:
                await home.send("describe")
                await home.expect("info")

        asyncio.run(probe())  # the daemon's own local loop is stopped; once HA left, a LateLocal listens
        assert wait_until(lambda: listener.mode is Mode.LOCAL and len(made) == 1)
        asyncio.run(probe())  # it is stopped, and returns after HA left
        assert wait_until(lambda: listener.mode is Mode.LOCAL and len(made) == 2)  # local again

        async def home_assistant_runs_the_satellite() -> None:
            async with Ha(listener.satellite.link.port) as home:
                await home.send("run-satellite")
                assert wait_until(lambda: listener.mode is Mode.SATELLITE and listener.satellite.link.running.is_set())

        asyncio.run(home_assistant_runs_the_satellite())
        assert returned == []


def test_a_fault_of_ours_acting_on_a_frame_is_logged_and_hearing_goes_on(sat, monkeypatch, caplog):
    satellite, mic, _speak = sat
    link = satellite.link
    send_audio = link.audio
    failed: list[int] = []

    def audio_once_broken(run: Any, samples: np.ndarray, at_s: float) -> None:
        if not failed:
            failed.append(1)
            raise RuntimeError("the port broke")
        send_audio(run, samples, at_s)

    monkeypatch.setattr(link, "audio", audio_once_broken)
    caplog.set_level(logging.ERROR, logger="rkvoice.satellite")

    async def scenario() -> None:
        async with Ha(link.port) as home:
            await home.send("run-satellite")
            await settle(home, satellite, mic, 0)
            mic.put(marker=1)
            await home.expect("run-pipeline")
            mic.put(0.2, n=5)  # the first is lost to the fault, the rest are sent
            await settle(home, satellite, mic, 6)
            if not any(e.type == "audio-chunk" for e in home.got):  # (settle may have read them already)
                await home.expect("audio-chunk")

    asyncio.run(scenario())
    traced = [r for r in caplog.records if r.exc_info]
    assert failed and len(traced) == 1 and isinstance(traced[0].exc_info[1], RuntimeError)  # type: ignore[index]


def test_frames_queued_behind_a_slow_wake_are_the_requests_in_order(monkeypatch):
    """The wake engine takes 0.4 s to decide (an ASR under load) while the request's frames queue up: they
    are heard in one batch after it, for the request (none swallowed by the wake engine), and all sent."""
    from fakes import MarkerWake

    from rkvoice.satellite.run import Satellite

    class SlowWake(MarkerWake):
        def accept(self, frame: np.ndarray) -> Any:
            hit = super().accept(frame)
            if hit is not None:
                time.sleep(0.4)
            return hit

    cfg = config()
    speak = speak_stage(cfg)
    satellite = Satellite(cfg, StubHear(SlowWake([""])), speak)  # type: ignore[arg-type]
    satellite.start()
    mic = FeedMic()
    thread = threading.Thread(target=satellite.run, args=(mic, False), daemon=True)
    thread.start()

    async def scenario() -> None:
        async with Ha(satellite.link.port) as home:
            await home.send("run-satellite")
            await settle(home, satellite, mic, 0)
            mic.put(marker=1)
            mic.put(0.25, n=20)  # said while the wake is decided
            await home.expect("run-pipeline")
            sent = 0
            while sent < 20 * FRAME:
                chunk = np.frombuffer((await home.expect("audio-chunk")).payload or b"", "<i2")
                sent += int(np.sum(chunk == pcm(0.25)))
            assert sent == 20 * FRAME

    try:
        asyncio.run(scenario())
    finally:
        mic.close()
        satellite.close()
        thread.join(5)
        speak.close()
