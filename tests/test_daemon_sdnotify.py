"""sd_notify datagrams and the single-instance lock, in-process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rkvoice.daemon.lock import instance_lock
from rkvoice.daemon.sdnotify import Notifier
from rkvoice.errors import RkvoiceError


def _recv(sock: socket.socket) -> str:
    sock.settimeout(5)
    return sock.recv(4096).decode()


def test_path_socket_gets_ready_status_watchdog_stopping(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        n = Notifier(socket_name=str(path), watchdog_usec="")
        assert n.notify(READY=1, STATUS="listening")
        assert _recv(sock) == "READY=1\nSTATUS=listening"
        assert n.notify(WATCHDOG=1)
        assert _recv(sock) == "WATCHDOG=1"
        assert n.notify(STATUS="two\nlines")
        assert _recv(sock) == "STATUS=two lines"  # a newline would start a bogus field
        assert n.notify(STOPPING=1)
        assert _recv(sock) == "STOPPING=1"
        n.close()


def test_abstract_socket_name(tmp_path: Path) -> None:
    name = f"rkvoice-notify-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        n = Notifier(socket_name="@" + name, watchdog_usec="")
        assert n.notify(READY=1)
        assert _recv(sock) == "READY=1"


def test_without_notify_socket_everything_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    n = Notifier()
    assert n.notify(READY=1) is False
    assert n.watchdog_interval is None


def test_watchdog_interval_is_half_of_watchdog_usec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert Notifier(socket_name="", watchdog_usec="30000000").watchdog_interval == 15.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert Notifier(socket_name="", watchdog_usec="2000000").watchdog_interval == 1.0
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for another process
    assert Notifier(socket_name="", watchdog_usec="2000000").watchdog_interval is None


def test_bad_values_are_clear_errors() -> None:
    with pytest.raises(RkvoiceError, match="neither an absolute path nor an abstract"):
        Notifier(socket_name="relative/sock")
    with pytest.raises(RkvoiceError, match="WATCHDOG_USEC='soon' is not a number"):
        Notifier(socket_name="", watchdog_usec="soon")


def test_vanished_socket_does_not_raise(tmp_path: Path) -> None:
    n = Notifier(socket_name=str(tmp_path / "gone"), watchdog_usec="")
    assert n.notify(WATCHDOG=1) is False
    assert n.notify(WATCHDOG=1) is False


def test_full_socket_queue_never_blocks(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        n = Notifier(socket_name=str(path), watchdog_usec="")
        results = [n.notify(WATCHDOG=1) for _ in range(2000)]  # nobody reads: the queue fills
        assert results[0] is True and results[-1] is False


def test_lock_second_holder_gets_a_clear_error_naming_the_pid(tmp_path: Path) -> None:
    path = tmp_path / "run" / "rkvoice.lock"
    with instance_lock(path):
        code = (
            "import sys; from rkvoice.daemon.lock import instance_lock\n"
            "from rkvoice.errors import RkvoiceError\n"
            f"try:\n    with instance_lock({str(path)!r}):\n        pass\n"
            "except RkvoiceError as e:\n    print(e); sys.exit(1)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent.parent, timeout=30)
        assert out.returncode == 1
        assert "another rkvoice daemon is already running" in out.stdout
        assert f"(pid {os.getpid()})" in out.stdout
    # released: the next one gets it
    with instance_lock(path):
        pass


def test_lock_in_an_unwritable_place_says_how_to_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RkvoiceError, match="set daemon.lock_file"):
        with instance_lock(blocker / "sub" / "rkvoice.lock"):
            pass
