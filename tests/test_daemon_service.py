"""The daemon as a real process: sd_notify over a test socket, signals, lock, reload, missing mic.

The process runs ``python tests/daemon_process.py CONFIG`` (test_daemon_fakes.subprocess_plan: scripted
stages, no models): requests are files in a spool directory, the stages log what they do as JSON
lines, and NOTIFY_SOCKET points at a datagram socket owned by the test.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
STOP_LIMIT_S = float(re.findall(r"^TimeoutStopSec=(\d+)$", (ROOT / "systemd" / "rkvoice.service").read_text(), re.M)[0])
"""systemd kills the daemon after this long: a stop must end well inside it on any machine (the
README's 2 s is measured on a quiet one; a wall-clock bound that tight fails on a loaded CI box)."""


class DaemonProc:
    def __init__(self, tmp: Path, name: str = "d", abstract: bool = False, hold: bool = False,
                 config: Path | None = None, lock: Path | None = None, extra: str = "") -> None:
        self.tmp = tmp
        self.spool = tmp / f"{name}-spool"
        self.spool.mkdir()
        self.events = tmp / f"{name}-events.jsonl"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            addr = f"@rkvoice-test-{os.getpid()}-{name}-{time.monotonic_ns()}"
            self.sock.bind("\0" + addr[1:])
        else:
            addr = str(tmp / f"{name}-notify.sock")
            self.sock.bind(addr)
        self.config = config or tmp / f"{name}-config.yaml"
        if config is None:
            self.config.write_text(
                f"daemon:\n  lock_file: {lock or tmp / 'rkvoice.lock'}\n"
                f"state:\n  dir: {tmp / 'state'}\n"
                "hear:\n  follow_up_s: 0\n" + extra,
                encoding="utf-8",
            )
        env = dict(os.environ)
        env.update(
            NOTIFY_SOCKET=addr,
            WATCHDOG_USEC="300000",
            RKVOICE_TEST_SPOOL=str(self.spool),
            RKVOICE_TEST_EVENTS=str(self.events),
            PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT)]),
        )
        env.pop("WATCHDOG_PID", None)
        env.pop("RKVOICE_CONFIG", None)
        if hold:
            env["RKVOICE_TEST_HOLD"] = "1"
        self.err_path = tmp / f"{name}-stderr.log"  # a file, so a test can wait for a line in it
        with self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(TESTS / "daemon_process.py"), str(self.config)],
                cwd=ROOT, env=env, stderr=err,
            )
        self.n = 0
        self.inbox: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        # keep the socket's queue empty, as systemd does: a full queue makes sends fail
        while True:
            try:
                msg = self.sock.recv(4096).decode()
            except OSError:
                return
            self.inbox.put(msg)

    def recv(self, want: str, timeout: float = 20.0) -> list[str]:
        """Datagrams up to and including the first one with the field ``want``."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {want} within {timeout} s; got {seen}; stderr: {self.stderr_now()}")
            try:
                msg = self.inbox.get(timeout=left)
            except queue.Empty:
                continue
            seen.append(msg)
            if want in msg.split("\n"):
                return seen

    def say(self, text: str) -> None:
        self.n += 1
        (self.spool / f"{self.n:04d}.tmp").write_text(text, encoding="utf-8")
        os.replace(self.spool / f"{self.n:04d}.tmp", self.spool / f"{self.n:04d}.txt")

    def read_events(self) -> list[list[str]]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text(encoding="utf-8").splitlines()]

    def wait_event(self, kind: str, value: str | None = None, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # the speaker may cut a sentence into pieces: a value is found in the joined spoken text
            events = self.read_events()
            if any(e[0] == kind for e in events) and (
                    value is None or value in "".join(e[1] for e in events if e[0] == kind)):
                return
            time.sleep(0.02)
        raise AssertionError(f"no event {kind} {value}; events: {self.read_events()}")

    def err(self) -> str:
        """What the daemon has written to stderr so far."""
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def stderr_now(self) -> str:
        return self.err() + ("" if self.proc.poll() is not None else "\n(still running)")

    def wait_err(self, line: str, timeout: float = 20.0) -> None:
        """Wait until stderr holds ``line`` (the daemon's log says a state was reached)."""
        deadline = time.monotonic() + timeout
        while line not in self.err():
            if time.monotonic() > deadline or self.proc.poll() is not None and line not in self.err():
                raise AssertionError(f"no {line!r} in stderr within {timeout} s: {self.stderr_now()}")
            time.sleep(0.02)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.fixture
def daemon(tmp_path: Path):
    procs: list[DaemonProc] = []

    def start(**kw) -> DaemonProc:
        d = DaemonProc(tmp_path, name=f"d{len(procs)}", **kw)
        procs.append(d)
        return d

    yield start
    for d in procs:
        d.close()


def test_ready_then_watchdog_then_stopping_on_sigterm_exit_0_in_time(daemon) -> None:
    d = daemon(abstract=True)
    before = d.recv("READY=1")
    assert all("WATCHDOG=1" not in m for m in before)  # no ping before the models are up
    d.recv("WATCHDOG=1")
    d.say("讲个笑话")
    d.wait_event("spoke", "这是第二句。")
    # its 60 ms of audio plays out on the null player, then the turn is logged
    d.wait_err("turn 1: heard '讲个笑话' route=llm answer_chars=15")
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    d.recv("STOPPING=1")
    code = d.proc.wait(5)
    assert code == 0
    assert time.monotonic() - t0 < STOP_LIMIT_S


def test_sigterm_while_speaking_cancels_speech_and_exits_0(daemon) -> None:
    # the held answer grows by 200 characters a second: with the default length limit (160) it was cut,
    # and the LLM aborted, by the answer itself ~1 s after "playing", so on a loaded box the abort seen
    # was not the stop's. No limit the test can reach: only the stop can end this answer
    d = daemon(hold=True, extra="llm:\n  max_answer_chars: 100000\n  timeout_s: 3600\n")
    d.recv("READY=1")
    d.say("讲个很长的故事")
    d.wait_event("playing")
    assert not [e for e in d.read_events() if e[0] == "llm-abort"]  # still answering when the stop comes
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(STOP_LIMIT_S) == 0
    assert time.monotonic() - t0 < STOP_LIMIT_S
    # the turn's cancel reached the LLM, from the daemon's stop (its main thread), and nothing else aborted it
    assert [e for e in d.read_events() if e[0] == "llm-abort"] == [["llm-abort", "MainThread"]]


def test_second_instance_fails_clearly_and_first_keeps_running(daemon, tmp_path: Path) -> None:
    first = daemon()
    first.recv("READY=1")
    second = daemon()
    assert second.proc.wait(20) == 1
    err = second.err()
    assert "another rkvoice daemon is already running" in err and str(first.proc.pid) in err
    assert first.proc.poll() is None
    first.say("还在吗")
    first.wait_event("spoke", "你说的是还在吗。")


def test_sighup_reloads_only_the_engines_whose_config_changed(daemon, tmp_path: Path) -> None:
    d = daemon()
    d.recv("READY=1")
    builds = [e[1] for e in d.read_events() if e[0] == "build"]
    assert builds == ["hear:小智小智", "answer:auto", "speak:speed=1"]
    d.config.write_text(d.config.read_text(encoding="utf-8") + "tts:\n  speed: 1.2\n", encoding="utf-8")
    d.proc.send_signal(signal.SIGHUP)
    d.recv("READY=1")  # READY again once reloaded
    builds = [e[1] for e in d.read_events() if e[0] == "build"]
    assert builds == ["hear:小智小智", "answer:auto", "speak:speed=1", "speak:speed=1.2"]
    d.say("换了吗")
    d.wait_event("spoke", "你说的是换了吗。")
    # a broken config is refused and the running one kept
    d.config.write_text(d.config.read_text(encoding="utf-8") + "bogus: 1\n", encoding="utf-8")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_err("config not reloaded, keeping the running one: config: unknown config key 'bogus'")
    d.say("还好吗")
    d.wait_event("spoke", "你说的是还好吗。")
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(5) == 0
    err = d.err()
    assert "reloaded engines: speak" in err


def test_no_microphone_still_ready_and_recovers(daemon) -> None:
    d = daemon()
    d.say("NOMIC")
    d.say("NOMIC")
    d.recv("READY=1")
    d.wait_event("listen-raised")
    d.say("听得见吗")
    d.wait_event("spoke", "你说的是听得见吗。")
    d.recv("WATCHDOG=1")
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(5) == 0
    err = d.err()
    assert "no microphone 'default' (test); retrying in" in err
    assert "microphone is back" in err


def test_real_portable_daemon_reaches_ready_without_a_microphone_and_stops_cleanly(tmp_path: Path) -> None:
    """``assistant.py`` with no mode flag: the product's engines, the live loop, systemd's protocol."""
    from rkvoice.config import load_config

    cfg = load_config()
    needed = [cfg.models.path / "portable" / p for p in (
        "whisper-base/model.bin", "vad/silero_vad.onnx", "fastspeech2/fastspeech2.onnx",
        "llm/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        pytest.skip(f"portable models absent (run ./install.sh): {', '.join(missing)}")
    addr = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(addr)
    sock.settimeout(120)
    env = dict(os.environ, NOTIFY_SOCKET=addr, WATCHDOG_USEC="2000000", XDG_STATE_HOME=str(tmp_path))
    env.pop("WATCHDOG_PID", None)
    env.pop("RKVOICE_CONFIG", None)
    # no sound card here -> no microphone: the daemon must still come up and keep retrying it
    proc = subprocess.Popen([sys.executable, "assistant.py", "--no-play", "--set", "audio.input=arecord",
                             "--set", "audio.input_device=rkvoice-test-no-such-device"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        seen: list[str] = []
        for want in ("READY=1", "WATCHDOG=1"):
            while True:
                msg = sock.recv(4096).decode()
                seen.append(msg)
                if want in msg.split("\n"):
                    break
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in sock.recv(4096).decode().split("\n"):
            pass
        assert proc.wait(10) == 0
        assert time.monotonic() - t0 < STOP_LIMIT_S
        err = proc.stderr.read()
        assert "ready: hear, answer, speak loaded" in err
        assert "rkvoice-test-no-such-device" in err  # the microphone was tried (and retried)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        proc.stderr.close()
        sock.close()
