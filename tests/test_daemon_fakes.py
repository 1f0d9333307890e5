"""Scripted fake stages for the daemon, and the fault-injection tests that run on them in-process.

The same fakes back the subprocess tests (test_daemon_service.py) through ``subprocess_plan``,
selected with ``python -m rkvoice.daemon --stages test_daemon_fakes:subprocess_plan``.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rkvoice.config import Config, load_config
from rkvoice.daemon.sdnotify import Notifier
from rkvoice.daemon.service import EXIT_OK, EXIT_REPEATED_FAILURES, Daemon
from rkvoice.daemon.stages import Answer, Heard, Plan, Spoken, StageSpec, TurnReport
from rkvoice.daemon.turn import StagedLoop, deadline_deltas
from rkvoice.errors import RkvoiceError

# -- fakes ---------------------------------------------------------------------------------


class ScriptedListener:
    """Hands out scripted requests; an Exception instance in the script is raised instead."""

    def __init__(self, script: Iterable[Any] = (), log: list | None = None) -> None:
        self.script: queue.Queue[Any] = queue.Queue()
        for item in script:
            self.script.put(item)
        self.loaded = False
        self.closed = False
        self.log = log if log is not None else []

    def load(self) -> None:
        self.loaded = True

    def listen(self, stop: threading.Event) -> Heard | None:
        try:
            item = self.script.get(timeout=0.05)
        except queue.Empty:
            stop.wait(0.05)
            return None
        if isinstance(item, BaseException):
            self.log.append(("listen-raised", repr(item)))
            raise item
        return Heard(text=item, speech_end=time.monotonic(), asr_ms=12.0)

    def close(self) -> None:
        self.closed = True


class FakeAnswerer:
    """'hang' never answers (until released); anything else gets a two-piece answer."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.cancelled: list[str] = []
        self.closed = False

    def load(self) -> None:
        pass

    def answer(self, text: str, cancel: threading.Event) -> Answer:
        def deltas() -> Iterator[str]:
            if "hang" in text:
                # a wedged native call: ignores everything until the test releases it
                self.released.wait(10)
                self.cancelled.append(text)
                return
            yield f"你说的是{text}。"
            yield "这是第二句。"

        return Answer(route="tool:echo" if "hang" not in text else "llm", deltas=deltas())

    def close(self) -> None:
        self.closed = True


class FakeSpeaker:
    """Records what it 'plays'; a piece containing 'BOOM' fails synthesis mid-answer."""

    def __init__(self, log: list | None = None, boom: str = "BOOM", hold: threading.Event | None = None):
        self.spoken: list[str] = []
        self.log = log if log is not None else []
        self.boom = boom
        self.hold = hold  # when set: block "playing" until cancelled
        self.cancels = 0
        self.closed = False

    def load(self) -> None:
        pass

    def speak(self, deltas: Iterable[str], cancel: threading.Event) -> Spoken:
        first = None
        for piece in deltas:
            if self.boom in piece:
                raise RkvoiceError("tts", "synth-failed", f"cannot synthesise {piece!r}")
            self.spoken.append(piece)
            self.log.append(("spoke", piece))
            first = first or time.monotonic()
            if self.hold is not None:
                self.log.append(("playing", piece))
                cancel.wait(30)
            if cancel.is_set():
                return Spoken(first_audio=first, cancelled=True)
        return Spoken(first_audio=first, audio_s=1.0)

    def cancel(self) -> None:
        self.cancels += 1
        self.log.append(("speaker-cancel", ""))

    def close(self) -> None:
        self.closed = True


class BoomAnswerer(FakeAnswerer):
    def answer(self, text: str, cancel: threading.Event) -> Answer:
        if "tts-fail" in text:
            return Answer(route="tool:echo", deltas=iter(["第一句能说。", "BOOM 这句合成失败。", "不该说到这里。"]))
        return super().answer(text, cancel)


def make_plan(listener: Any, answerer: Any, speaker: Any) -> Plan:
    def loop(engines: dict[str, Any], cfg: Config, host: Any) -> StagedLoop:
        return StagedLoop(
            engines["hear"], engines["answer"], engines["speak"],
            first_timeout=cfg.daemon.answer_first_timeout_s, gap_timeout=cfg.daemon.answer_gap_timeout_s,
            host=host,
        )

    return Plan(
        stages=(
            StageSpec("hear", lambda c: c.hear, lambda c: listener),
            StageSpec("answer", lambda c: c.llm, lambda c: answerer),
            StageSpec("speak", lambda c: c.tts, lambda c: speaker),
        ),
        make_loop=loop,
    )


# -- the plan the subprocess tests run ----------------------------------------------------------


class _EventLog:
    """Appends JSON lines to $RKVOICE_TEST_EVENTS so the test process can follow the daemon."""

    def __init__(self) -> None:
        self.path = Path(os.environ["RKVOICE_TEST_EVENTS"])

    def append(self, item: tuple[str, str]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")


class SpoolListener(ScriptedListener):
    """Requests are files dropped into $RKVOICE_TEST_SPOOL; 'NOMIC' files simulate a missing microphone."""

    def __init__(self, log: _EventLog) -> None:
        super().__init__(log=log)  # type: ignore[arg-type]
        self.spool = Path(os.environ["RKVOICE_TEST_SPOOL"])

    def listen(self, stop: threading.Event) -> Heard | None:
        for f in sorted(self.spool.glob("*.txt")):
            text = f.read_text(encoding="utf-8")
            f.unlink()
            if text == "NOMIC":
                self.log.append(("listen-raised", "device-missing"))
                raise RkvoiceError("audio", "device-missing", "no microphone 'default' (test)")
            self.log.append(("heard", text))
            return Heard(text=text, speech_end=time.monotonic())
        stop.wait(0.05)
        return None


def subprocess_plan(cfg: Config) -> Plan:
    events = _EventLog()

    def built(name: str, make: Any) -> Any:
        def build(c: Config) -> Any:
            events.append(("build", f"{name}:{_key(name, c)}"))
            return make()

        return build

    hold = threading.Event() if os.environ.get("RKVOICE_TEST_HOLD") else None
    base = make_plan(None, None, None)
    return Plan(
        stages=(
            StageSpec("hear", base.stages[0].key, built("hear", lambda: SpoolListener(events))),
            StageSpec("answer", base.stages[1].key, built("answer", FakeAnswerer)),
            StageSpec("speak", base.stages[2].key, built("speak", lambda: FakeSpeaker(events, hold=hold))),
        ),
        make_loop=base.make_loop,
    )


def _key(name: str, c: Config) -> str:
    return {"hear": c.hear.wake_phrase, "answer": c.llm.engine, "speak": f"speed={c.tts.speed:g}"}[name]


# -- in-process fault injection -----------------------------------------------------------------


def _cfg(tmp_path: Path, **daemon: Any) -> Config:
    settings = {"lock_file": str(tmp_path / "lock"), "device_retry_s": 0.01, "device_retry_max_s": 0.02}
    settings.update(daemon)
    return load_config([{"daemon": settings, "state": {"dir": str(tmp_path / "state")}}])


class Harness:
    """Runs a Daemon on a thread (no signal handlers there) and collects its turns."""

    def __init__(self, cfg: Config, plan: Plan) -> None:
        self.daemon = Daemon(cfg, plan, lambda: cfg, notifier=Notifier(socket_name=""))
        self.reports: queue.Queue[TurnReport] = queue.Queue()
        self.daemon.on_turn = self.reports.put
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.code = self.daemon.run(handle_signals=False)

    def __enter__(self) -> Harness:
        self.thread.start()
        return self

    def next_report(self) -> TurnReport:
        return self.reports.get(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.daemon.request_stop()
        self.thread.join(5)


def test_asr_failure_ends_the_turn_with_an_apology_and_the_next_turn_works(tmp_path: Path) -> None:
    listener = ScriptedListener([RkvoiceError("asr", "decode-failed", "whisper crashed"), "现在几点"])
    speaker = FakeSpeaker()
    cfg = _cfg(tmp_path)
    with Harness(cfg, make_plan(listener, FakeAnswerer(), speaker)) as h:
        report = h.next_report()
    assert report.transcript == "现在几点"
    assert report.route == "tool:echo"
    assert speaker.spoken == [cfg.daemon.apology, "你说的是现在几点。", "这是第二句。"]
    assert report.answer_chars == len("你说的是现在几点。这是第二句。")
    assert h.daemon._failures == 0 and h.daemon.turns == 2


def test_tts_failure_mid_answer_stops_that_answer_then_next_turn_works(tmp_path: Path) -> None:
    listener = ScriptedListener(["tts-fail please", "你好"])
    speaker = FakeSpeaker()
    cfg = _cfg(tmp_path)
    with Harness(cfg, make_plan(listener, BoomAnswerer(), speaker)) as h:
        report = h.next_report()
    assert speaker.spoken == ["第一句能说。", cfg.daemon.apology, "你说的是你好。", "这是第二句。"]
    assert report.transcript == "你好"


def test_llm_hang_is_aborted_by_the_timeout_and_the_next_turn_works(tmp_path: Path) -> None:
    listener = ScriptedListener(["hang forever", "你好"])
    answerer = FakeAnswerer()
    speaker = FakeSpeaker()
    cfg = _cfg(tmp_path, answer_first_timeout_s=0.2)
    with Harness(cfg, make_plan(listener, answerer, speaker)) as h:
        report = h.next_report()
        answerer.released.set()
    assert speaker.spoken == [cfg.daemon.apology, "你说的是你好。", "这是第二句。"]
    assert report.transcript == "你好"
    assert h.daemon._failures == 0


def test_deadline_sets_cancel_so_a_cooperative_answerer_aborts() -> None:
    cancel = threading.Event()
    stopped = threading.Event()

    def slow() -> Iterator[str]:
        yield "第一段"
        cancel.wait(10)  # a cooperative LLM checks the cancel event between tokens
        stopped.set()

    it = deadline_deltas(slow(), cancel, first_timeout=5, gap_timeout=0.1)
    assert next(it) == "第一段"
    with pytest.raises(RkvoiceError) as err:
        next(it)
    assert err.value.code == "timeout" and "next words" in err.value.message
    assert cancel.is_set()
    assert stopped.wait(5)


def test_deadline_passes_the_answerers_own_error_through() -> None:
    def broken() -> Iterator[str]:
        yield "好"
        raise RkvoiceError("llm", "crashed", "model crashed")

    with pytest.raises(RkvoiceError) as err:
        list(deadline_deltas(broken(), threading.Event(), 1, 1))
    assert err.value.stage == "llm"


def test_microphone_disappears_and_returns_without_counting_failures(tmp_path: Path) -> None:
    lost = RkvoiceError("audio", "device-lost", "microphone unplugged")
    listener = ScriptedListener([lost, lost, lost, lost, lost, lost, "你好"])
    speaker = FakeSpeaker()
    cfg = _cfg(tmp_path, max_failures=2)
    with Harness(cfg, make_plan(listener, FakeAnswerer(), speaker)) as h:
        report = h.next_report()
    assert report.transcript == "你好"
    assert speaker.spoken == ["你说的是你好。", "这是第二句。"]  # no apology for a missing mic
    assert sum(1 for e in listener.log if e[0] == "listen-raised") == 6
    assert h.code is None or h.code == EXIT_OK


def test_repeated_failures_exit_non_zero(tmp_path: Path) -> None:
    boom = RkvoiceError("asr", "decode-failed", "whisper crashed")
    listener = ScriptedListener([boom, boom, "ok", boom, boom, boom])
    speaker = FakeSpeaker()
    answerer = FakeAnswerer()
    cfg = _cfg(tmp_path, max_failures=3)
    h = Harness(cfg, make_plan(listener, answerer, speaker))
    h.thread.start()
    h.thread.join(10)
    assert h.code == EXIT_REPEATED_FAILURES
    assert speaker.spoken.count(cfg.daemon.apology) == 5  # 2 before the good turn reset the count, then 3
    assert answerer.closed and speaker.closed and listener.closed  # state flushed on the way out


def test_busy_work_older_than_stall_limit_is_reported_stalled(tmp_path: Path) -> None:
    from rkvoice.clock import FakeClock

    clock = FakeClock()
    cfg = _cfg(tmp_path)
    d = Daemon(cfg, make_plan(None, None, None), lambda: cfg, notifier=Notifier(socket_name=""), clock=clock)
    assert d.stalled(10) is None
    with d.busy("transcribe"):
        clock.advance(9)
        assert d.stalled(10) is None
        clock.advance(2)
        assert d.stalled(10) == ("transcribe", 11)
    assert d.stalled(10) is None  # finished: no longer counts


def test_watchdog_pings_stop_while_a_stage_is_wedged(tmp_path: Path) -> None:
    import socket

    from rkvoice.clock import FakeClock

    class WedgedListener(ScriptedListener):
        def __init__(self) -> None:
            super().__init__()
            self.entered = threading.Event()
            self.release = threading.Event()

        def listen(self, stop: threading.Event) -> Heard | None:
            self.entered.set()
            self.release.wait(10)  # a native call that never returns
            return None

    clock = FakeClock()
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    cfg = _cfg(tmp_path, stall_s=60.0)
    listener = WedgedListener()
    d = Daemon(cfg, make_plan(listener, FakeAnswerer(), FakeSpeaker()), lambda: cfg,
               notifier=Notifier(socket_name=str(path), watchdog_usec="20000"), clock=clock)
    t = threading.Thread(target=d.run, kwargs={"handle_signals": False}, daemon=True)
    t.start()
    try:
        assert listener.entered.wait(5)
        msgs: list[str] = []
        while "WATCHDOG=1" not in msgs and len(msgs) < 50:  # STATUS..., READY, then pings
            msgs.append(sock.recv(100).decode())
        assert "WATCHDOG=1" in msgs
        clock.advance(61)  # the listener has now been stuck for over a minute
        sock.settimeout(0.3)
        late = []
        try:
            for _ in range(20):
                late.append(sock.recv(100).decode())
        except TimeoutError:
            pass
        # at most one ping that was already on its way when the clock moved
        assert late.count("WATCHDOG=1") <= 1, late
    finally:
        listener.release.set()
        d.request_stop()
        t.join(5)
        sock.close()


def test_reload_reaches_a_loop_that_runs_until_told(tmp_path: Path) -> None:
    """The live hear loop runs until its stop event: a reload must still get through."""
    builds: list[float] = []
    runs: list[threading.Event] = []

    class UntilToldLoop:
        def run_once(self, stop: threading.Event) -> None:
            runs.append(stop)
            stop.wait(10)

        def stop_speaking(self) -> None:
            pass

        def apologise(self, text: str) -> None:
            pass

    class Engine:
        def __init__(self, c: Config) -> None:
            builds.append(c.tts.speed)

        def load(self) -> None:
            pass

    cfgs = [_cfg(tmp_path)]
    plan = Plan(stages=(StageSpec("speak", lambda c: c.tts, Engine),),
                make_loop=lambda engines, c, host: UntilToldLoop())
    d = Daemon(cfgs[0], plan, lambda: cfgs[-1], notifier=Notifier(socket_name=""))
    t = threading.Thread(target=d.run, kwargs={"handle_signals": False}, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while not runs and time.monotonic() < deadline:
            time.sleep(0.01)
        cfgs.append(load_config([{"tts": {"speed": 1.3}, "daemon": {"lock_file": str(tmp_path / "lock")},
                                  "state": {"dir": str(tmp_path / "state")}}]))
        d.request_reload()
        while len(builds) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert builds == [1.0, 1.3]
        assert runs[0].is_set()  # the first run was told to return
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not runs[-1].is_set()  # and the loop runs again on the new engine
    finally:
        d.request_stop()
        t.join(5)
    assert not t.is_alive()
