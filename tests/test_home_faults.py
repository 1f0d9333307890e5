"""The home route's faults, against the fake Home Assistant of tests/test_home_route: a command HA carried
out in part is spoken as HA words it (not a failure), a cancel at every point of a request ends that
request at once and is never retried, and a TLS error in the websocket (``--check``) is one line with
its socket closed."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_home_route import FakeHa, ha_cfg, speech, token_file

from rkvoice.home.client import Call, Failure, HaClient, HomeFailure
from rkvoice.home.route import APOLOGY, HomeRoute
from rkvoice.home.ws import HaSocket, WsError
from rkvoice.turn import Turn
from tests.support import FakeClock


@pytest.fixture()
def home() -> Iterator[FakeHa]:
    server = FakeHa()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def test_a_command_carried_out_in_part_is_spoken_as_home_assistant_words_it(tmp_path: Path, home: FakeHa,
                                                                              caplog: Any) -> None:
    """HA's ``partial_action_done`` (some of the lights turned on): HA's words, the breaker stays closed."""
    caplog.set_level(logging.WARNING)
    home.default = (200, json.dumps(speech("partial_action_done", "已打开部分灯光")).encode())
    route = HomeRoute(ha_cfg(home.url), token_file(tmp_path), FakeClock())
    asked = route.ask("打开所有灯", Turn())
    assert asked.answer is not None and asked.answer.text == "已打开部分灯光" and asked.answer.text != APOLOGY
    assert asked.outcome == "partial_action_done"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # not a failure
    home.default = (200, json.dumps(speech("action_done", "好的")).encode())
    assert route.ask("打开所有灯", Turn()).outcome == "action_done"  # not skipped: the breaker is closed
    assert len(home.requests) == 2


def slow(home: FakeHa) -> None:
    """HA answers only once ``release`` is set."""
    home.default = lambda: (home.release.wait(10), (200, json.dumps(speech("action_done", "好的")).encode()))[1]


def test_a_cancel_before_the_request_takes_the_connection_ends_it_at_once(tmp_path: Path, home: FakeHa) -> None:
    slow(home)
    route = HomeRoute(ha_cfg(home.url, timeout_s=10.0), token_file(tmp_path), FakeClock())
    turn = Turn()
    turn.cancel("barge-in")  # before ask: the turn was cancelled while it was routed
    t0 = time.monotonic()
    asked = route.ask("打开客厅灯", turn)
    assert asked.outcome == "cancelled" and asked.answer is None and time.monotonic() - t0 < 1.0
    assert home.requests == []  # never sent


def test_a_cancel_while_waiting_for_the_connection_ends_that_request_only(tmp_path: Path, home: FakeHa) -> None:
    """Request 1 holds the connection (HA is slow); request 2 waits for it and is cancelled: request 2
    ends at once, request 1 still gets its answer."""
    slow(home)
    client = HaClient(home.url, token_file(tmp_path), 10.0)
    first: list[Any] = []
    holder = threading.Thread(target=lambda: first.append(client.converse("一")))
    holder.start()
    assert home.arrived.wait(5)
    call = Call()
    threading.Timer(0.2, call.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(HomeFailure) as failure:
        client.converse("二", call=call)
    assert failure.value.kind is Failure.CANCELLED and time.monotonic() - t0 < 1.5
    home.release.set()
    holder.join(5)
    assert first and first[0][0].speech == "好的"  # the other request was not cut
    assert [r["body"]["text"] for r in home.requests] == ["一"]


def test_a_cancel_mid_read_ends_the_request_and_never_reconnects_for_it(tmp_path: Path, home: FakeHa) -> None:
    slow(home)
    client = HaClient(home.url, token_file(tmp_path), 10.0)
    home.release.set()
    client.converse("热身")  # a kept-alive connection to reuse
    home.release.clear()
    call = Call()
    home.arrived.clear()
    threading.Thread(target=lambda: (home.arrived.wait(5), call.cancel())).start()
    t0 = time.monotonic()
    with pytest.raises(HomeFailure) as failure:
        client.converse("二", call=call)
    assert failure.value.kind is Failure.CANCELLED and time.monotonic() - t0 < 1.5
    assert home.connections == 1 and len(home.requests) == 2  # not asked again on a new connection


def test_a_cancelled_turn_holds_nothing_and_the_next_question_is_asked(tmp_path: Path, home: FakeHa) -> None:
    slow(home)
    route = HomeRoute(ha_cfg(home.url, timeout_s=10.0), token_file(tmp_path), FakeClock())
    turns = [Turn() for _ in range(5)]
    for i, turn in enumerate(turns):  # cancelled at different moments, from before to mid-read
        threading.Timer(0.05 * i, turn.cancel, args=("barge-in",)).start()
        t0 = time.monotonic()
        assert route.ask("打开客厅灯", turn).outcome == "cancelled"
        assert time.monotonic() - t0 < 1.5
    home.release.set()
    assert route.ask("打开客厅灯", Turn()).outcome == "action_done"


def test_a_tls_error_is_one_line_and_the_socket_is_closed(monkeypatch: Any) -> None:
    """--check against an https URL whose server does not speak TLS: a WsError (one line), never a raw
    SSLError, and the TCP socket is closed."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\nnot tls at all\r\n" * 4)
        time.sleep(0.5)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    opened: list[socket.socket] = []
    create = socket.create_connection

    def tracked(*args: Any, **kw: Any) -> socket.socket:
        sock = create(*args, **kw)
        opened.append(sock)
        return sock

    monkeypatch.setattr(socket, "create_connection", tracked)
    with pytest.raises(WsError) as err:
        HaSocket(f"https://127.0.0.1:{port}", "token", 3.0)
    assert not isinstance(err.value, ssl.SSLError) and "\n" not in str(err.value) and "TLS" in str(err.value)
    assert len(opened) == 1 and opened[0].fileno() == -1  # closed
    server.close()
