"""The home route against a fake Home Assistant on loopback (a scripted HTTP/1.1 server): HA's answers
spoken or passed on to the LLM, every way HA can fail as one warning and an answer anyway, the breaker
on a FakeClock, the kept-alive connection, the token file, the config sections."""

from __future__ import annotations

import json
import logging
import re
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rkvoice.answer.assistant import Assistant
from rkvoice.config import Config, HomeAssistantConfig, StateConfig, load_config
from rkvoice.errors import RkvoiceError
from rkvoice.home.client import Failure, HaClient, HomeFailure, read_token
from rkvoice.home.route import APOLOGY, ROUTE, HomeRoute, looks_like_command
from rkvoice.home.vocab import fetch_vocabulary
from rkvoice.home_names import Vocabulary
from rkvoice.state import StateStore
from rkvoice.turn import Turn
from tests.fakes import ScriptedLlm
from tests.support import FakeClock

TOKEN = "abc.def-SECRET-token"
LIGHT = "书房台灯"
"""Names the product has never seen: it must not know any entity name of its own."""


def speech(kind: str, text: str, code: str = "") -> dict[str, Any]:
    data: dict[str, Any] = {"targets": [], "success": [], "failed": []} if not code else {"code": code}
    return {"response": {"speech": {"plain": {"speech": text, "extra_data": None}}, "card": {}, "language": "zh-CN",
                         "response_type": kind, "data": data}, "conversation_id": "01J", "continue_conversation": False}


Reply = tuple[int, bytes] | Callable[[], tuple[int, bytes]]


class FakeHa(ThreadingHTTPServer):
    """Answers POST /api/conversation/process from ``answers`` (by text, else ``default``)."""

    daemon_threads = True

    def __init__(self) -> None:
        self.answers: dict[str, Reply] = {}
        self.default: Reply = (200, json.dumps(speech("error", "抱歉，我不明白", "no_intent_match")).encode())
        self.requests: list[dict[str, Any]] = []
        """The conversation questions (POST); ``gets`` the paths of everything else."""
        self.gets: list[str] = []
        self.connections = 0
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.close_after = False
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up (timeout, cancel)
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeHa

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.gets.append(self.path)
        self.answer(self.server.default)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "body": body, "auth": self.headers["Authorization"]})
        self.server.arrived.set()
        self.answer(self.server.answers.get(body.get("text"), self.server.default))

    def answer(self, reply: Reply) -> None:
        status, raw = reply() if callable(reply) else reply
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if self.server.close_after:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture()
def ha() -> Iterator[FakeHa]:
    server = FakeHa()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def token_file(tmp_path: Path, mode: int = 0o600) -> Path:
    path = tmp_path / "ha_token"
    path.write_text(TOKEN + "\n")
    path.chmod(mode)
    return path


def ha_cfg(url: str, **kw: Any) -> HomeAssistantConfig:
    return HomeAssistantConfig(url=url, **{"timeout_s": 2.0, **kw})


def assistant(tmp_path: Path, url: str, clock: FakeClock | None = None, **kw: Any) -> tuple[Assistant, ScriptedLlm]:
    clock = clock or FakeClock()
    token = token_file(tmp_path)
    cfg = Config(state=StateConfig(dir=str(tmp_path / "state")),
                 home_assistant=replace(ha_cfg(url, **kw), token_file=str(token)))
    llm = ScriptedLlm(["我来回答。"])
    return Assistant(cfg, clock, llm=llm, store=StateStore(tmp_path / "state")), llm


def route_event(turn: Turn) -> dict[str, Any]:
    return dict(next(e for e in turn.timeline.events if e.name == "route").data)


def test_an_action_is_spoken_as_home_assistant_words_it(tmp_path: Path, ha: FakeHa) -> None:
    ha.answers["打开书房台灯"] = (200, json.dumps(speech("action_done", "书房台灯已打开")).encode())
    a, llm = assistant(tmp_path, ha.url)
    turn = Turn()
    reply = a.reply("打开书房台灯", turn)
    assert reply.route == ROUTE == "home" and "".join(reply.deltas) == "书房台灯已打开" == reply.text
    assert route_event(turn)["route"] == "home" and route_event(turn)["home"] == "action_done"
    assert llm.calls == []
    sent = ha.requests[0]
    assert sent["path"] == "/api/conversation/process" and sent["auth"] == f"Bearer {TOKEN}"
    assert sent["body"] == {"text": "打开书房台灯", "language": "zh-CN"}


def test_a_query_is_answered_by_home_assistant(tmp_path: Path, ha: FakeHa) -> None:
    ha.answers["书房台灯开着吗"] = (200, json.dumps(speech("query_answer", "书房台灯是开着的")).encode())
    a, _ = assistant(tmp_path, ha.url)
    reply = a.reply("书房台灯开着吗", Turn())
    assert reply.route == "home" and reply.text == "书房台灯是开着的"


def test_no_intent_match_goes_on_to_the_llm(tmp_path: Path, ha: FakeHa) -> None:
    a, llm = assistant(tmp_path, ha.url)
    turn = Turn()
    reply = a.reply("给我讲个笑话", turn)
    assert reply.route == "llm" and "".join(reply.deltas) == "我来回答。"
    assert llm.calls and route_event(turn)["home"] == "no_intent_match" and len(ha.requests) == 1


def test_the_local_tools_answer_before_home_assistant(tmp_path: Path, ha: FakeHa) -> None:
    a, _ = assistant(tmp_path, ha.url)
    assert a.reply("现在几点", Turn()).route == "tool:time" and ha.requests == []


@pytest.mark.parametrize("code", ["no_valid_targets", "failed_to_handle"])
def test_an_error_of_home_assistant_is_spoken_as_it_words_it(tmp_path: Path, ha: FakeHa, code: str) -> None:
    words = "抱歉，没有找到叫书房台灯的设备" if code == "no_valid_targets" else "处理时出错了"
    ha.answers["打开书房台灯"] = (200, json.dumps(speech("error", words, code)).encode())
    a, llm = assistant(tmp_path, ha.url)
    turn = Turn()
    reply = a.reply("打开书房台灯", turn)
    assert reply.route == "home" and reply.text == words and route_event(turn)["home"] == code and not llm.calls


def down_url() -> str:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


BAD = {
    "401": ((401, b"401: Unauthorized"), Failure.TOKEN, "refused the token"),
    "500": ((500, b"500 Internal Server Error"), Failure.SERVER, "HTTP 500"),
    "garbage": ((200, b'{"response": tru'), Failure.GARBAGE, "not JSON"),
    "not-ha-404": ((404, b"<html>Not Found</html>"), Failure.NOT_HA, "404"),
    "not-ha-html": ((200, b"<!DOCTYPE html><html></html>"), Failure.GARBAGE, "not JSON"),
    "not-ha-shape": ((200, b'{"ok": true}'), Failure.NOT_HA, "response_type"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_failing_home_assistant_is_one_warning_and_the_llm_answers(tmp_path: Path, ha: FakeHa, case: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    reply_, kind, words = BAD[case]
    ha.default = reply_
    a, llm = assistant(tmp_path, ha.url)
    turn = Turn()
    with caplog.at_level(logging.INFO):
        reply = a.reply("给我讲个笑话", turn)
        assert reply.route == "llm" and "".join(reply.deltas) == "我来回答。"
        a.reply("再讲一个", Turn())  # the breaker is open: HA is not asked again, no second warning
    assert route_event(turn)["home"] == kind and len(ha.requests) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and words in warnings[0] and TOKEN not in caplog.text, warnings


def test_a_home_command_while_home_assistant_is_down_gets_an_apology(tmp_path: Path) -> None:
    a, llm = assistant(tmp_path, down_url())
    turn = Turn()
    reply = a.reply("请帮我打开书房台灯", turn)
    assert reply.route == "home" and reply.text == APOLOGY and not llm.calls
    assert route_event(turn)["home"] == Failure.UNREACHABLE
    assert a.reply("给我讲个笑话", Turn()).route == "llm"  # not a command: the LLM answers


def test_a_timeout_costs_timeout_s_once_then_nothing(tmp_path: Path, ha: FakeHa,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    ha.default = lambda: (ha.release.wait(10), (200, b"{}"))[1]  # a wedged HA
    clock = FakeClock()
    a, _ = assistant(tmp_path, ha.url, clock, timeout_s=0.3)
    t0 = time.monotonic()
    reply = a.reply("给我讲个笑话", Turn())
    first = time.monotonic() - t0
    t0 = time.monotonic()
    again = a.reply("再讲一个", Turn())
    second = time.monotonic() - t0
    assert reply.route == again.route == "llm"
    assert 0.25 <= first < 1.5 and second < 0.05, (first, second)
    assert "did not answer within 0.3 s" in caplog.text


def test_the_breaker_skips_home_assistant_for_retry_s_then_tries_once(tmp_path: Path, ha: FakeHa) -> None:
    ha.default = (503, b"busy")
    clock = FakeClock()
    a, _ = assistant(tmp_path, ha.url, clock, retry_s=30.0)
    a.reply("给我讲个笑话", Turn())
    assert len(ha.requests) == 1
    clock.advance(29.9)
    turn = Turn()
    a.reply("再讲一个", turn)
    assert len(ha.requests) == 1 and route_event(turn)["home"] == "skipped"
    ha.default = (200, json.dumps(speech("error", "不明白", "no_intent_match")).encode())
    clock.advance(0.2)
    a.reply("再讲一个", Turn())  # the one probe: HA answers, the breaker closes
    a.reply("还有吗", Turn())
    assert len(ha.requests) == 3


def test_one_question_probes_while_the_others_skip(tmp_path: Path, ha: FakeHa) -> None:
    clock = FakeClock()
    route = HomeRoute(ha_cfg(ha.url, retry_s=10.0), token_file(tmp_path), clock)
    ha.default = (500, b"")
    assert route.ask("讲个笑话", Turn()).outcome == Failure.SERVER
    clock.advance(10.0)
    ha.default = lambda: (ha.release.wait(10), (200, json.dumps(speech("query_answer", "好")).encode()))[1]
    ha.arrived.clear()
    probe: list[Any] = []
    thread = threading.Thread(target=lambda: probe.append(route.ask("讲个笑话", Turn())))
    thread.start()
    assert ha.arrived.wait(5)
    assert route.ask("另一个问题", Turn()).outcome == "skipped"  # does not wait behind the probe
    ha.release.set()
    thread.join(5)
    assert probe[0].outcome == "query_answer" and route.ask("第三个", Turn()).outcome == "query_answer"


def test_questions_share_one_kept_alive_connection(tmp_path: Path, ha: FakeHa) -> None:
    client = HaClient(ha.url, token_file(tmp_path), 2.0)
    for text in ("一", "二", "三"):
        answer, _ = client.converse(text)
        assert answer.kind == "no_intent_match"
    assert ha.connections == 1 and len(ha.requests) == 3


def test_a_connection_the_server_closed_is_replaced_without_a_failure(tmp_path: Path, ha: FakeHa) -> None:
    client = HaClient(ha.url, token_file(tmp_path), 2.0)
    ha.close_after = True  # like an HA that dropped the idle keep-alive connection
    for text in ("一", "二", "三"):
        client.converse(text)
    assert ha.connections == 3 and len(ha.requests) == 3


def test_a_cancelled_turn_stops_waiting_for_home_assistant(tmp_path: Path, ha: FakeHa) -> None:
    ha.default = lambda: (ha.release.wait(10), (200, b"{}"))[1]
    route = HomeRoute(ha_cfg(ha.url, timeout_s=10.0), token_file(tmp_path), FakeClock())
    turn = Turn()
    threading.Thread(target=lambda: (ha.arrived.wait(5), turn.cancel("barge-in"))).start()
    t0 = time.monotonic()
    asked = route.ask("讲个笑话", turn)
    assert asked.answer is None and asked.outcome == "cancelled" and time.monotonic() - t0 < 3
    ha.release.set()
    ha.default = (200, json.dumps(speech("query_answer", "好")).encode())
    assert route.ask("再问", Turn()).outcome == "query_answer"  # a cancel is not HA's failure


def test_a_missing_token_file_is_named_with_its_fix(tmp_path: Path, ha: FakeHa,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    route = HomeRoute(ha_cfg(ha.url), tmp_path / "nope", FakeClock())
    asked = route.ask("讲个笑话", Turn())
    assert asked.outcome == Failure.TOKEN and ha.requests == []
    assert f"{tmp_path / 'nope'} is missing" in caplog.text and "chmod 600" in caplog.text


def test_a_token_file_others_can_read_is_used_with_a_warning(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    path = token_file(tmp_path, 0o644)
    assert read_token(path) == TOKEN
    assert f"mode 644): chmod 600 {path}" in caplog.text and TOKEN not in caplog.text
    caplog.clear()
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    read_token(path)
    assert caplog.text == ""


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text("\n")
    with pytest.raises(HomeFailure, match="holds no token"):
        read_token(path)


def test_a_fixed_token_file_is_read_again(tmp_path: Path, ha: FakeHa) -> None:
    path = tmp_path / "t"
    path.write_text("old")
    client = HaClient(ha.url, path, 2.0)
    client.converse("一")
    path.write_text("new-token")
    import os

    os.utime(path, (1, 1))
    client.converse("二")
    assert [r["auth"] for r in ha.requests] == ["Bearer old", "Bearer new-token"]


@pytest.mark.parametrize(("text", "names", "command"), [
    ("打开书房台灯", frozenset({"书房台灯"}), True),
    ("把书房台灯关掉", frozenset({"书房台灯"}), True),
    ("把鱼缸加热器调到26度", frozenset({"鱼缸加热器"}), True),
    ("打开音乐", frozenset({"书房台灯"}), False),  # HA exposes no such thing
    ("打开书房台灯", frozenset(), True),  # names unknown: the verb leads
    ("请帮我关掉那个东西", frozenset(), True),
    ("你觉得我应该打开窗户吗", frozenset(), False),
    ("给我讲个笑话", frozenset(), False),
])
def test_what_looks_like_a_home_command(text: str, names: frozenset[str], command: bool) -> None:
    assert looks_like_command(text, names) is command


class Exposing(HomeRoute):
    """A route that already read these names from HA (the websocket is tested against the real HA)."""

    def __init__(self, *args: Any, names: frozenset[str], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.vocab.use(Vocabulary({"entity": tuple(names)}, len(names), 0.0, self.cfg.url))


def test_a_question_naming_an_exposed_entity_goes_to_home_assistant_before_the_tools(tmp_path: Path,
                                                                                    ha: FakeHa) -> None:
    ha.answers["阳台温度计温度是多少"] = (200, json.dumps(speech("query_answer", "阳台温度计是二十度")).encode())
    token = token_file(tmp_path)
    cfg = Config(state=StateConfig(dir=str(tmp_path / "state")), home_assistant=ha_cfg(ha.url, token_file=str(token)))
    home = Exposing(cfg.home_assistant, token, FakeClock(), names=frozenset({"阳台温度计"}))
    a = Assistant(cfg, FakeClock(), llm=ScriptedLlm(), store=StateStore(tmp_path / "s"), home=home)
    assert a.reply("阳台温度计温度是多少", Turn()).text == "阳台温度计是二十度"  # not the board's temperature
    assert a.reply("温度是多少", Turn()).route == "tool:device"  # no exposed name: the tools first


class FakeSocket:
    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies

    def call(self, kind: str, **_fields: Any) -> Any:
        return self.replies[kind]


def test_exposed_names_are_the_exposed_entities_names_and_aliases() -> None:
    sock = FakeSocket({
        "homeassistant/expose_entity/list": {"exposed_entities": {
            "light.a": {"conversation": True}, "switch.b": {"conversation": False}}},
        "get_states": [{"entity_id": "light.a", "attributes": {"friendly_name": "书房 台灯"}},
                       {"entity_id": "switch.b", "attributes": {"friendly_name": "隐藏开关"}}],
        "config/entity_registry/get_entries": {"light.a": {"aliases": ["小灯", None], "name": None}},
        "config/area_registry/list": [{"area_id": "study", "name": "书房", "aliases": ["工作间"]}],
        "config/floor_registry/list": [{"floor_id": "up", "name": "二楼", "aliases": []}],
    })
    vocab = fetch_vocabulary(sock, "http://ha")  # type: ignore[arg-type]
    assert vocab.entities == 1 and vocab.names == {"entity": ("书房 台灯",), "alias": ("小灯",),
                                                   "area": ("书房", "工作间"), "floor": ("二楼",)}
    route = HomeRoute(ha_cfg("http://ha"), Path("/nonexistent"))
    route.vocab.use(vocab)
    assert route.names == frozenset({"书房台灯", "小灯", "书房", "工作间", "二楼"})


@pytest.mark.parametrize(("override", "words"), [
    ({"url": "ftp://ha"}, "is not an http(s) address"),
    ({"url": "homeassistant.local:8123"}, "is not an http(s) address"),
    ({"timeout_s": 0}, "out of range"),
    ({"retry_s": -1}, "out of range"),
    ({"language": " "}, "language is empty"),
    ({"token": "x"}, "unknown config key 'home_assistant.token'"),
])
def test_home_assistant_config_is_checked(override: dict[str, Any], words: str) -> None:
    with pytest.raises(RkvoiceError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_config([{"home_assistant": override}])


@pytest.mark.parametrize(("override", "words"), [
    ({"satellite": {"uri": "unix:///tmp/s"}}, "over TCP only"),
    ({"satellite": {"uri": "tcp://host"}}, "is not tcp://HOST:PORT"),
    ({"satellite": {"name": ""}}, "satellite.name is empty"),
    ({"satellite": {"uri": "tcp://127.0.0.1:10700"}, "wyoming": {"uri": "tcp://127.0.0.1:10700"}}, "its own port"),
])
def test_satellite_config_is_checked(override: dict[str, Any], words: str) -> None:
    with pytest.raises(RkvoiceError, match=words):
        load_config([override])


def test_both_sections_are_off_by_default() -> None:
    cfg = load_config()
    assert cfg.home_assistant.url == "" and cfg.satellite.uri == ""
    assert Assistant(cfg, llm=ScriptedLlm(), store=StateStore(Path("/nonexistent"))).home is None


def test_check_names_a_url_that_is_not_home_assistant(tmp_path: Path, ha: FakeHa) -> None:
    from rkvoice.home.status import home_status

    ha.default = (404, b"<html>Not Found</html>")
    token = token_file(tmp_path)
    cfg = Config(home_assistant=ha_cfg(ha.url, token_file=str(token)))
    status = home_status(cfg)
    assert status.version == "" and len(status.problems) == 1 and "is home_assistant.url" in status.problems[0]
    status = home_status(replace(cfg, home_assistant=ha_cfg(down_url(), token_file=str(token))))
    assert "cannot reach Home Assistant" in status.problems[0]


@pytest.mark.parametrize(("said", "sent"), [
    ("小智，请帮我打开书房台灯吧。", "打开书房台灯"),
    ("小智小智 帮我把书房台灯关掉好吗？", "把书房台灯关掉"),
    ("书房台灯开着吗", "书房台灯开着吗"),
    ("谢谢", "谢谢"),  # nothing would be left: sent as said
    ("鱼缸加热器掉到28°。", "鱼缸加热器调到28度"),  # as Whisper base wrote 调到二十八度
    ("鱼缸加热器调到26℃了", "鱼缸加热器调到26度"),
])
def test_home_assistant_is_asked_the_bare_command(tmp_path: Path, ha: FakeHa, said: str, sent: str) -> None:
    a, _ = assistant(tmp_path, ha.url)
    a.reply(said, Turn())
    assert ha.requests[0]["body"]["text"] == sent


def test_a_command_naming_an_exposed_device_that_ha_cannot_parse_is_not_the_llms(tmp_path: Path,
                                                                                  ha: FakeHa) -> None:
    token = token_file(tmp_path)
    cfg = Config(state=StateConfig(dir=str(tmp_path / "state")), home_assistant=ha_cfg(ha.url, token_file=str(token)))
    home = Exposing(cfg.home_assistant, token, FakeClock(), names=frozenset({"鱼缸加热器"}))
    llm = ScriptedLlm(["好的，已经调好了。"])
    a = Assistant(cfg, FakeClock(), llm=llm, store=StateStore(tmp_path / "s"), home=home)
    reply = a.reply("鱼缸加热器慢慢调到二十六度", Turn())  # HA: no_intent_match
    assert reply.route == "home" and reply.text == "抱歉，我不明白" and not llm.calls
    assert a.reply("鱼缸加热器是什么牌子的", Turn()).route == "llm"  # not a command: the LLM's


# -- the websocket client against a scripted server -------------------------------------------------------


def _frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    import struct

    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    head += bytes([n]) if n < 126 else bytes([126]) + struct.pack("!H", n) if n < 65536 else \
        bytes([127]) + struct.pack("!Q", n)
    return head + payload


def _read_client_frame(conn: socket.socket) -> dict[str, Any]:
    import struct

    b0, b1 = conn.recv(2, socket.MSG_WAITALL)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", conn.recv(2, socket.MSG_WAITALL))[0]
    elif n == 127:
        n = struct.unpack("!Q", conn.recv(8, socket.MSG_WAITALL))[0]
    assert b1 & 0x80, "client frames must be masked"
    mask = conn.recv(4, socket.MSG_WAITALL)
    data = conn.recv(n, socket.MSG_WAITALL) if n else b""
    return dict(json.loads(bytes(b ^ mask[i % 4] for i, b in enumerate(data))))


def scripted_ws(script: Callable[[socket.socket], None]) -> tuple[str, threading.Thread]:
    """A server on loopback answering the websocket upgrade, then running ``script`` on the connection."""
    import base64
    import hashlib

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(1024)
            key = next(line.split(":", 1)[1].strip() for line in head.decode().split("\r\n")
                       if line.lower().startswith("sec-websocket-key"))
            accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
            hello = _frame(1, json.dumps({"type": "auth_required", "ha_version": "2026.2.3"}).encode())
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n" + hello)  # the hello in the same packet
            script(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.getsockname()[1]}", thread


def test_the_websocket_client_reads_fragments_pings_and_long_messages() -> None:
    from rkvoice.home.ws import HaSocket

    pongs: list[bytes] = []

    def script(conn: socket.socket) -> None:
        assert _read_client_frame(conn) == {"type": "auth", "access_token": TOKEN}
        conn.sendall(_frame(1, b'{"type": "auth_ok"}'))
        call = _read_client_frame(conn)
        assert call["type"] == "get_states" and call["id"] == 1
        result = json.dumps({"id": 1, "type": "result", "success": True, "result": ["x" * 70000]}).encode()
        conn.sendall(_frame(1, b'{"id": 9, "type": "event"}')  # another subscription's event: skipped
                     + _frame(1, result[:100], fin=False) + _frame(9, b"hi") + _frame(0, result[100:]))
        b0, _ = conn.recv(2, socket.MSG_WAITALL)
        pongs.append(bytes([b0]))
        conn.recv(6, socket.MSG_WAITALL)  # mask + "hi"

    url, thread = scripted_ws(script)
    with HaSocket(url, TOKEN, 5.0) as sock:
        assert sock.ha_version == "2026.2.3"
        assert sock.call("get_states") == ["x" * 70000]
    thread.join(5)
    assert pongs == [bytes([0x8A])]


@pytest.mark.parametrize(("reply", "words"), [
    (_frame(1, b'{"type": "auth_invalid", "message": "Invalid access token"}'), "refused the token"),
    (_frame(1, b"not json"), "not JSON"),
    (_frame(8, b"\x03\xe8bye"), "closed the websocket (code 1000 bye)"),
    (b"", "closed the websocket connection"),
])
def test_the_websocket_client_names_what_went_wrong(reply: bytes, words: str) -> None:
    from rkvoice.home.ws import HaSocket, WsError

    def script(conn: socket.socket) -> None:
        _read_client_frame(conn)
        conn.sendall(reply)

    url, thread = scripted_ws(script)
    with pytest.raises(WsError, match=re.escape(words)):
        HaSocket(url, TOKEN, 5.0)
    thread.join(5)


def test_a_site_that_is_not_home_assistant_refuses_the_websocket(ha: FakeHa) -> None:
    from rkvoice.home.ws import HaSocket, WsError

    with pytest.raises(WsError, match="not Home Assistant's API"):
        HaSocket(ha.url, TOKEN, 5.0)
