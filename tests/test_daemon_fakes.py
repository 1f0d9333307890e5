"""The daemon's supervision around the product's turn loop, on scripted fake engines, in-process:
fault injection (ASR, TTS and LLM failures, a lost microphone, repeated failures), the watchdog,
reload. The same stages back the subprocess tests (test_daemon_service.py) through
``subprocess_plan``, run by ``python tests/daemon_process.py CONFIG``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from fakes import FakeVoice, MarkerWake, ScriptedAsr, ScriptedLlm, ScriptedMic, ScriptedSegmenter, wait_until

from rkvoice.answer.assistant import Assistant
from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config, load_config
from rkvoice.daemon.sdnotify import Notifier
from rkvoice.daemon.service import EXIT_OK, EXIT_REPEATED_FAILURES, Daemon
from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.hear.session import Mode
from rkvoice.hear.sources import AudioSource
from rkvoice.stages import Hear, Plan, Speak, StageSpecs, answer_spec, hear_spec, speak_spec
from rkvoice.turn import Turn
from tests.support import FakeClock

QUESTION = "给我讲讲长城的历史"  # no tool takes it: the LLM answers


class FakeHear(Hear):
    """The hear stage with a marker wake engine (requests said in one breath with the wake phrase)."""

    def __init__(self, cfg: Config, script: list[Any]) -> None:
        super().__init__(cfg)
        self.script = script
        self.closed = False

    def load(self) -> None:
        self.asr = ScriptedAsr([])
        self.wake = MarkerWake(self.script)
        self.segmenter = ScriptedSegmenter()

    def close(self) -> None:
        self.closed = True


class Rig:
    """Stages of fakes: scripted hearing, the real Assistant on a scripted LLM, the real Speaker on a
    fake voice and a null player. ``mic_errors`` device errors come before the microphone works."""

    def __init__(self, script: list[Any], llm: ScriptedLlm | None = None, mic_errors: int = 0) -> None:
        self.script = script
        self.llm = llm or ScriptedLlm()
        self.voice = FakeVoice(char_s=0.005)
        self.mic_errors = mic_errors
        self.mic_opened = 0
        self.hear: FakeHear | None = None
        self.assistant: Assistant | None = None
        self.speak: Speak | None = None
        self.daemon: Daemon | None = None

    def plan(self) -> Plan:
        def hear(c: Config) -> FakeHear:
            self.hear = FakeHear(c, self.script)
            return self.hear

        def answer(c: Config) -> Assistant:
            self.assistant = Assistant(c, llm=self.llm)
            return self.assistant

        def speak(c: Config) -> Speak:
            self.speak = Speak(c, player=lambda cc: NullPlayer(cc), tts=lambda cc: self.voice)
            return self.speak

        return Plan(stages=StageSpecs(hear_spec(hear), answer_spec(answer), speak_spec(speak)), source=self.source)

    def source(self, cfg: Config) -> AudioSource:
        self.mic_opened += 1
        if self.mic_opened <= self.mic_errors:
            raise RkvoiceError(Stage.AUDIO, Code.DEVICE_LOST, "microphone unplugged (test)")
        return ScriptedMic(len(self.script), self._ready)

    def _ready(self, done: int) -> bool:
        """The previous script item was heard and its turn (if any) is over."""
        d = self.daemon
        if d is None or d.listener is None or self.hear is None or self.hear.wake is None:
            return False
        wake = self.hear.wake
        assert isinstance(wake, MarkerWake)
        loop = d.listener.turn_loop
        return wake.seen >= done and loop.current is None and loop.session.mode is Mode.IDLE


def _cfg(tmp_path: Path, **daemon: Any) -> Config:
    settings = {"lock_file": str(tmp_path / "lock"), "device_retry_s": 0.01, "device_retry_max_s": 0.02}
    settings.update(daemon)
    return load_config([{"daemon": settings, "state": {"dir": str(tmp_path / "state")},
                         "hear": {"ack": "none", "follow_up_s": 0.3}}])


class CollectingDaemon(Daemon):
    """The daemon, with each turn it counted as done also put in ``finished``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finished: queue.Queue[Turn] = queue.Queue()

    def report(self, result: Turn | BaseException) -> None:
        super().report(result)
        if isinstance(result, Turn) and result.exception is None:
            self.finished.put(result)


class Harness:
    """Runs a Daemon on a thread (no signal handlers there) and collects its finished turns."""

    def __init__(self, cfg: Config, rig: Rig, clock: Any = None, notifier: Notifier | None = None) -> None:
        kwargs = {"clock": clock} if clock is not None else {}
        self.daemon = rig.daemon = CollectingDaemon(cfg, rig.plan(), lambda: cfg,
                                                    notifier=notifier or Notifier(socket_name=""), **kwargs)
        self.turns = self.daemon.finished
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.code = self.daemon.run(handle_signals=False)

    def __enter__(self) -> Harness:
        self.thread.start()
        return self

    def next_turn(self) -> Turn:
        return self.turns.get(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.daemon.request_stop()
        self.thread.join(5)


def spoken(rig: Rig) -> list[str]:
    return rig.voice.said


def test_asr_failure_ends_the_turn_with_an_apology_and_the_next_turn_works(tmp_path: Path) -> None:
    rig = Rig([RkvoiceError("asr", "decode-failed", "whisper crashed"), QUESTION])
    cfg = _cfg(tmp_path)
    with Harness(cfg, rig) as h:
        turn = h.next_turn()
    assert turn.text == QUESTION and turn.route == "llm" and turn.exception is None
    assert turn.result == "好的，这是回答。"
    assert spoken(rig)[0] == cfg.daemon.apology and "".join(spoken(rig)[1:]) == "好的，这是回答。"
    assert h.daemon._failures == 0 and h.daemon.turns == 2


class BoomLlm(ScriptedLlm):
    """The answer to a question with "tts-fail" in it has a piece the voice cannot synthesise."""

    def stream(self, messages: list[dict[str, str]]) -> Any:
        if "tts-fail" in messages[-1]["content"]:
            yield from ["第一句能说。", "BOOM 这句合成失败。", "不该说到这里。"]
        else:
            yield from super().stream(messages)


def test_tts_failure_mid_answer_stops_that_answer_then_next_turn_works(tmp_path: Path) -> None:
    rig = Rig(["tts-fail " + QUESTION, QUESTION], llm=BoomLlm())
    cfg = _cfg(tmp_path)
    with Harness(cfg, rig) as h:
        turn = h.next_turn()
    assert turn.text == QUESTION and turn.exception is None
    assert spoken(rig) == ["第一句能说。", cfg.daemon.apology, "好的，", "这是回答。"] or \
        spoken(rig) == ["第一句能说。", cfg.daemon.apology, "好的，这是回答。"]
    assert h.daemon.turns == 2 and h.daemon._failures == 0


def test_llm_hang_is_aborted_by_the_deadline_and_the_next_turn_works(tmp_path: Path) -> None:
    rig = Rig(["hang forever " + QUESTION, QUESTION])
    cfg = _cfg(tmp_path, answer_first_timeout_s=0.2)
    with Harness(cfg, rig) as h:
        turn = h.next_turn()
        rig.llm.release.set()
    assert turn.text == QUESTION and turn.exception is None
    assert spoken(rig)[0] == cfg.daemon.apology
    assert h.daemon._failures == 0


def test_microphone_disappears_and_returns_without_counting_failures(tmp_path: Path) -> None:
    rig = Rig([QUESTION], mic_errors=6)
    cfg = _cfg(tmp_path, max_failures=2)
    with Harness(cfg, rig) as h:
        turn = h.next_turn()
    assert turn.text == QUESTION and turn.exception is None
    assert cfg.daemon.apology not in spoken(rig)  # no apology for a missing mic
    assert rig.mic_opened == 7
    assert h.code is None or h.code == EXIT_OK


def test_repeated_failures_exit_non_zero_and_flush_state(tmp_path: Path) -> None:
    boom = RkvoiceError("asr", "decode-failed", "whisper crashed")
    rig = Rig([boom, boom, QUESTION, boom, boom, boom])
    cfg = _cfg(tmp_path, max_failures=3)
    h = Harness(cfg, rig)
    h.thread.start()
    h.thread.join(15)
    assert h.code == EXIT_REPEATED_FAILURES
    assert spoken(rig).count(cfg.daemon.apology) == 5  # 2 before the good turn reset the count, then 3
    assert rig.hear is not None and rig.hear.closed  # engines closed (user state flushed) on the way out


def test_barge_in_cancels_the_answer_through_its_turn(tmp_path: Path) -> None:
    """A wake while answering cancels the turn: the LLM is aborted, speech stops, the new turn runs."""
    long_answer = ScriptedLlm([f"第{i}段很长的回答，" for i in range(5)], delta_s=0.05, until_aborted=True)
    rig = Rig([QUESTION, "现在几点"], llm=long_answer)
    cfg = _cfg(tmp_path)
    h = Harness(cfg, rig)
    seen_first = threading.Event()
    real_ready = rig._ready

    def ready(done: int) -> bool:  # say the second request while the first answer is playing
        if done == 1:
            return seen_first.is_set()
        return real_ready(done)

    rig._ready = ready  # type: ignore[method-assign]
    with h:
        assert wait_until(lambda: len(spoken(rig)) >= 1)
        seen_first.set()
        first = h.next_turn()
        second = h.next_turn()
    assert first.cancelled and first.reason == "barge-in" and first.exception is None
    assert long_answer.aborted.is_set()
    assert second.text == "现在几点" and second.route == "tool:time" and not second.cancelled
    assert first.timeline.find(__import__("rkvoice.timeline", fromlist=["Ev"]).Ev.BARGE_IN)


def test_busy_work_older_than_stall_limit_is_reported_stalled(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = _cfg(tmp_path)
    d = Daemon(cfg, Rig([]).plan(), lambda: cfg, notifier=Notifier(socket_name=""), clock=clock)
    assert d.stalled(10) is None
    with d.busy("transcribe"):
        clock.advance(9)
        assert d.stalled(10) is None
        clock.advance(2)
        assert d.stalled(10) == ("transcribe", 11)
    assert d.stalled(10) is None  # finished: no longer counts


def test_watchdog_pings_stop_while_hearing_is_wedged(tmp_path: Path) -> None:
    import socket

    release = threading.Event()
    entered = threading.Event()

    class WedgedWake(MarkerWake):
        def accept(self, frame: Any) -> Any:
            if int(frame[0]) > 0:
                entered.set()
                release.wait(10)  # a native call that never returns
            return None

    class WedgedHear(FakeHear):
        def load(self) -> None:
            super().load()
            self.wake = WedgedWake(self.script)

    rig = Rig([QUESTION])
    clock = FakeClock()
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    cfg = _cfg(tmp_path, stall_s=60.0)
    plan = rig.plan()
    wedged = Plan(stages=replace(plan.stages, hear=hear_spec(lambda c: WedgedHear(c, rig.script))),
                  source=lambda c: ScriptedMic(1, lambda done: True))
    d = Daemon(cfg, wedged, lambda: cfg, notifier=Notifier(socket_name=str(path), watchdog_usec="20000"),
               clock=clock)
    stuck = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("stuck in "):
                stuck.set()

    seen = Seen()
    logging.getLogger("rkvoice.daemon.service").addHandler(seen)
    t = threading.Thread(target=d.run, kwargs={"handle_signals": False}, daemon=True)
    t.start()
    try:
        assert entered.wait(5)
        msgs: list[str] = []
        while "WATCHDOG=1" not in msgs and len(msgs) < 50:  # STATUS..., READY, then pings
            msgs.append(sock.recv(100).decode())
        assert "WATCHDOG=1" in msgs
        clock.advance(61)  # hearing has now been stuck for over a minute
        assert stuck.wait(10)  # the supervisor saw it (pings sent before that are in the socket already)
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                sock.recv(100)
        sock.settimeout(0.3)  # 15 ping intervals
        late = []
        with contextlib.suppress(TimeoutError):
            for _ in range(20):
                late.append(sock.recv(100).decode())
        assert "WATCHDOG=1" not in late, late
    finally:
        logging.getLogger("rkvoice.daemon.service").removeHandler(seen)
        release.set()
        d.request_stop()
        t.join(5)
        sock.close()


def test_reload_reaches_the_running_loop_and_swaps_only_the_changed_engine(tmp_path: Path) -> None:
    rig = Rig([])
    builds: list[float] = []
    plan = rig.plan()
    speak_build = plan.stages.speak.build

    def counted(c: Config) -> Speak:
        builds.append(c.tts.speed)
        return speak_build(c)

    plan = Plan(stages=replace(plan.stages, speak=speak_spec(counted)), source=plan.source)
    cfgs = [_cfg(tmp_path)]
    d = rig.daemon = Daemon(cfgs[0], plan, lambda: cfgs[-1], notifier=Notifier(socket_name=""))
    t = threading.Thread(target=d.run, kwargs={"handle_signals": False}, daemon=True)
    t.start()
    try:
        assert wait_until(lambda: d.listener is not None and rig.mic_opened == 1)
        first_loop = d.listener
        cfgs.append(load_config([{"tts": {"speed": 1.3}, "daemon": {"lock_file": str(tmp_path / "lock")},
                                  "state": {"dir": str(tmp_path / "state")}, "hear": {"ack": "none"}}]))
        d.request_reload()
        assert wait_until(lambda: len(builds) == 2 and rig.mic_opened == 2)
        assert builds == [1.0, 1.3]
        assert d.listener is not first_loop  # the loop runs again, on the new engine
        assert d.stages.stages.hear is rig.hear and not rig.hear.closed  # hear was not reloaded
    finally:
        d.request_stop()
        t.join(5)
    assert not t.is_alive()


# -- the plan the subprocess tests run ----------------------------------------------------------


class _EventLog:
    """Appends JSON lines to $RKVOICE_TEST_EVENTS so the test process can follow the daemon."""

    def __init__(self) -> None:
        self.path = Path(os.environ["RKVOICE_TEST_EVENTS"])

    def append(self, item: tuple[str, str]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")


class SpoolMic:
    """Requests are files dropped into $RKVOICE_TEST_SPOOL, said in one breath with the wake phrase
    (marker frames for MarkerWake); a 'NOMIC' file is a microphone that just disappeared. The
    daemon runs with hear.follow_up_s=0, so every request starts with the wake phrase."""

    sample_rate = 16000
    markers = True  # no sound: the daemon's echo filter leaves it raw

    def __init__(self, script: list[Any], log: _EventLog) -> None:
        self.script = script
        self.log = log
        self.spool = Path(os.environ["RKVOICE_TEST_SPOOL"])
        self._closed = threading.Event()

    def frames(self) -> Any:
        import numpy as np

        while not self._closed.wait(0.02):  # test fake: a real mic blocks on its device instead
            for f in sorted(self.spool.glob("*.txt")):
                text = f.read_text(encoding="utf-8")
                f.unlink()
                if text == "NOMIC":
                    self.log.append(("listen-raised", "device-missing"))
                    raise RkvoiceError(Stage.AUDIO, Code.DEVICE_MISSING, "no microphone 'default' (test)")
                self.log.append(("heard", text))
                self.script.append(text)
                yield np.zeros(512, np.float32)  # a frame of silence ends any follow-up window first
                frame = np.zeros(512, np.float32)
                frame[0] = len(self.script)
                yield frame

    def close(self) -> None:
        self._closed.set()


class LoggedVoice(FakeVoice):
    def __init__(self, log: _EventLog) -> None:
        super().__init__(char_s=0.005)
        self.log = log

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> Any:
        out = super().generate(text, sid, speed)
        self.log.append(("spoke", text))
        return out


class EchoLlm(ScriptedLlm):
    """Says "你说的是<question>。这是第二句。"; with $RKVOICE_TEST_HOLD it keeps talking until aborted."""

    def __init__(self, log: _EventLog, hold: bool) -> None:
        super().__init__()
        self.log = log
        self.hold = hold

    def stream(self, messages: list[dict[str, str]]) -> Any:
        self.aborted.clear()
        question = messages[-1]["content"].rsplit("]", 1)[-1].strip()  # without the time stamp, if any
        yield f"你说的是{question}。"
        if self.hold:
            self.log.append(("playing", question))
            while not self.aborted.wait(0.05):
                yield "还有很多要说的内容，"
            return
        yield "这是第二句。"

    def abort(self) -> None:
        # logged here, where the cancel arrives (synchronously, before the daemon can exit): the
        # generator itself may be closed at its yield and never see the flag. With the thread that
        # aborted: the daemon's stop cancels on its main thread; the answer's own limits (length,
        # time) abort on the thread that pulls the deltas
        if self.hold and not self.aborted.is_set():
            self.log.append(("llm-abort", threading.current_thread().name))
        super().abort()


def subprocess_plan(cfg: Config) -> Plan:
    events = _EventLog()
    script: list[Any] = []
    hold = bool(os.environ.get("RKVOICE_TEST_HOLD"))

    def built(name: str, make: Any) -> Any:
        def build(c: Config) -> Any:
            events.append(("build", f"{name}:{_key(name, c)}"))
            return make(c)

        return build

    return Plan(
        stages=StageSpecs(
            hear_spec(built("hear", lambda c: FakeHear(c, script))),
            answer_spec(built("answer", lambda c: Assistant(c, llm=EchoLlm(events, hold)))),
            speak_spec(built("speak", lambda c: Speak(
                c, player=lambda cc: NullPlayer(cc), tts=lambda cc: LoggedVoice(events)))),
        ),
        source=lambda c: SpoolMic(script, events),
    )


def _key(name: str, c: Config) -> str:
    return {"hear": c.hear.wake_phrase, "answer": c.llm.engine, "speak": f"speed={c.tts.speed:g}"}[name]


def test_the_daemon_serves_wyoming_beside_the_microphone_loop(tmp_path: Path) -> None:
    """``wyoming.uri`` set: the same process answers a Wyoming client on the loaded engines while the
    local loop keeps taking turns; the server stops with the daemon."""
    import asyncio
    import socket

    from wyoming.asr import Transcript
    from wyoming.client import AsyncTcpClient
    from wyoming.handle import Handled
    from wyoming.info import Describe, Info

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rig = Rig([QUESTION, "现在几点"])
    cfg = load_config([{"daemon": {"lock_file": str(tmp_path / "lock"), "device_retry_s": 0.01},
                        "state": {"dir": str(tmp_path / "state")}, "hear": {"ack": "none", "follow_up_s": 0.3},
                        "wyoming": {"uri": f"tcp://127.0.0.1:{port}"}}])

    async def ask() -> tuple[Info, Handled]:
        for _ in range(200):  # the server starts right after the engines load
            try:
                client = AsyncTcpClient("127.0.0.1", port)
                await client.connect()
                break
            except OSError:
                await asyncio.sleep(0.05)
        try:
            await client.write_event(Describe().event())
            info = Info.from_event(await client.read_event())
            await client.write_event(Transcript(text="现在几点").event())
            handled = Handled.from_event(await client.read_event())
        finally:
            await client.disconnect()
        return info, handled

    with Harness(cfg, rig) as h:
        info, handled = asyncio.run(asyncio.wait_for(ask(), 30))
        first, second = h.next_turn(), h.next_turn()
    assert info.handle and info.asr and info.tts
    assert "点" in handled.text
    assert first.text == QUESTION and second.route == "tool:time"  # the local loop went on
    with socket.socket() as s:  # the server stopped with the daemon
        assert s.connect_ex(("127.0.0.1", port)) != 0
