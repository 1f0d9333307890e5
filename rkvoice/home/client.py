"""Home Assistant's REST API as the home route uses it: the conversation agent over one kept-alive
HTTP connection, and the facts ``--check`` prints. Stdlib only (http.client, json).

Every way HA can fail is a ``HomeFailure`` whose ``kind`` the route keys its breaker and its apology on
and whose ``message`` is the one warning line: what went wrong, and what fixes it. The token is read
from ``home_assistant.token_file`` and never logged.

A cancel belongs to one request (a ``Call``, the turn's), never to the shared client: cancelled before
the request takes the connection, while it waits for it, or mid-read, that request ends at once
(``Failure.CANCELLED``), is never retried on a new connection, and no other request is touched.
"""

from __future__ import annotations

import enum
import http.client
import json
import logging
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

CONVERSE_PATH = "/api/conversation/process"
IDLE_RECONNECT_S = 30.0
"""A kept-alive connection unused this long is replaced before the next question (HA's server drops
idle ones after about a minute; a fresh connection on loopback or the LAN costs about a millisecond)."""


class Failure(enum.StrEnum):
    """Why HA gave no answer."""

    UNREACHABLE = "unreachable"  # refused, unresolvable, reset
    TIMEOUT = "timeout"
    TOKEN = "token"  # 401/403, or the token file is missing or empty
    NOT_HA = "not-ha"  # 404 on the API, or an answer in another shape
    SERVER = "server"  # 5xx
    GARBAGE = "garbage"  # not JSON
    CANCELLED = "cancelled"  # the request's Call was cancelled: not HA's failure


class HomeFailure(Exception):
    def __init__(self, kind: Failure, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Kind(enum.StrEnum):
    """HA's ``response_type``, with an error split by its ``data.code``."""

    ACTION_DONE = "action_done"
    PARTIAL_ACTION_DONE = "partial_action_done"  # some targets done, some failed: spoken as HA words it
    QUERY_ANSWER = "query_answer"
    NO_MATCH = "no_intent_match"  # the one answer that goes on to the LLM
    ERROR = "error"  # no_valid_targets, failed_to_handle, unknown: spoken as HA words them


@dataclass(frozen=True)
class Conversed:
    """One answer of HA's conversation agent."""

    kind: Kind
    speech: str
    """``response.speech.plain.speech``: what is spoken."""
    code: str = ""
    """The error's ``data.code`` (no_valid_targets, failed_to_handle, ...), else ""."""
    ms: float = 0.0
    """The round trip."""


def parse_conversation(body: Any) -> Conversed:
    """HA's answer to /api/conversation/process -> Conversed; a HomeFailure(NOT_HA) when it is not one."""
    response = body.get("response") if isinstance(body, dict) else None
    if not isinstance(response, dict) or not isinstance(response.get("response_type"), str):
        raise HomeFailure(Failure.NOT_HA, f"the answer has no response.response_type: {str(body)[:120]!r}")
    speech = response.get("speech") or {}
    plain = speech.get("plain") if isinstance(speech, dict) else None
    text = plain.get("speech") if isinstance(plain, dict) else ""
    text = text.strip() if isinstance(text, str) else ""
    kind = response["response_type"]
    if kind == "error":
        data = response.get("data")
        code = str(data.get("code", "")) if isinstance(data, dict) else ""
        return Conversed(Kind.NO_MATCH if code == Kind.NO_MATCH else Kind.ERROR, text, code)
    if kind in (Kind.ACTION_DONE, Kind.PARTIAL_ACTION_DONE, Kind.QUERY_ANSWER):
        return Conversed(Kind(kind), text)
    raise HomeFailure(Failure.NOT_HA, f"unknown response_type {kind!r}")


def read_token(path: Path) -> str:
    """The token in ``path`` (one line); HomeFailure(TOKEN) naming the file and the fix when it is
    missing, unreadable or empty. A file other users may read is used, with a warning."""
    fix = f"write a long-lived access token (Home Assistant: your profile -> Security) into {path} and chmod 600 it"
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise HomeFailure(Failure.TOKEN, f"home_assistant.token_file {path} is missing: {fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HomeFailure(Failure.TOKEN, f"cannot read home_assistant.token_file {path} ({exc}): {fix}") from None
    if not text or any(c.isspace() or ord(c) < 32 for c in text):
        raise HomeFailure(Failure.TOKEN, f"home_assistant.token_file {path} holds no token on one line: {fix}")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("home_assistant.token_file %s can be read by other users (mode %03o): chmod 600 %s",
                    path, stat.S_IMODE(mode), path)
    return text


class Call:
    """One request's cancel: ``cancel()`` from any thread; whoever waits for the request is woken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._wakers: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()

    def on_cancel(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Run ``wake()`` once when cancelled (at once if it was); returns the function that forgets it."""
        with self._lock:
            if not self._cancelled:
                self._wakers.append(wake)
                return lambda: self._forget(wake)
        wake()
        return lambda: None

    def _forget(self, wake: Callable[[], None]) -> None:
        with self._lock:
            if wake in self._wakers:
                self._wakers.remove(wake)


@dataclass
class HaClient:
    """One kept-alive HTTP connection to HA; ``converse`` and ``get`` take it one request at a time."""

    url: str
    token_file: Path
    timeout_s: float
    language: str = "zh-CN"
    _conn: http.client.HTTPConnection | None = field(default=None, init=False, repr=False)
    _used: float = field(default=0.0, init=False, repr=False)
    _token: tuple[float, str] | None = field(default=None, init=False, repr=False)
    _turns: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _holder: Call | None = field(default=None, init=False, repr=False)
    """The request that has the connection (under ``_turns``)."""

    def __post_init__(self) -> None:
        parsed = urlparse(self.url)
        self._secure = parsed.scheme == "https"
        self._host = parsed.hostname or ""
        self._port = parsed.port or (443 if self._secure else 80)
        self._prefix = parsed.path.rstrip("/")
        self.where = f"{parsed.scheme}://{parsed.netloc}"

    def token(self) -> str:
        """The token file's token, re-read when the file changed (a fixed token needs no restart)."""
        try:
            mtime = self.token_file.stat().st_mtime
        except OSError:
            mtime = -1.0
        if self._token is None or self._token[0] != mtime:
            self._token = (mtime, read_token(self.token_file))
        return self._token[1]

    def converse(self, text: str, conversation_id: str | None = None,
                 call: Call | None = None) -> tuple[Conversed, str | None]:
        """Ask HA's conversation agent; its answer and the conversation id to send next time."""
        body: dict[str, Any] = {"text": text, "language": self.language}
        if conversation_id:
            body["conversation_id"] = conversation_id
        t0 = time.monotonic()
        data = self.request("POST", CONVERSE_PATH, body, call)
        answer = parse_conversation(data)
        cid = data.get("conversation_id") if isinstance(data, dict) else None
        answer = Conversed(answer.kind, answer.speech, answer.code, round((time.monotonic() - t0) * 1000, 1))
        return answer, cid if isinstance(cid, str) else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def close(self) -> None:
        call = Call()
        self._take(call)
        try:
            self._drop()
        finally:
            self._give(call)

    def _take(self, call: Call) -> None:
        """Wait for the connection; HomeFailure(CANCELLED) at once when ``call`` is cancelled meanwhile."""
        forget = call.on_cancel(self._wake_waiters)
        try:
            with self._turns:
                while self._holder is not None and not call.cancelled:
                    self._turns.wait()
                if call.cancelled:
                    raise self._cancelled()
                self._holder = call
        finally:
            forget()

    def _give(self, call: Call) -> None:
        with self._turns:
            if self._holder is call:
                self._holder = None
                self._turns.notify_all()

    def _wake_waiters(self) -> None:
        with self._turns:
            self._turns.notify_all()

    def _cut(self, call: Call) -> None:
        """``call`` was cancelled: if it has the connection now, shut its socket (its read ends at once)."""
        with self._turns:
            sock = getattr(self._conn, "sock", None) if self._holder is call else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _cancelled(self) -> HomeFailure:
        return HomeFailure(Failure.CANCELLED, f"the request to Home Assistant at {self.where} was cancelled")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, call: Call | None = None) -> Any:
        """One API call within ``timeout_s``, the answer's JSON; every failure a HomeFailure. ``call``
        cancels it (Failure.CANCELLED) wherever it is."""
        call = call or Call()
        if call.cancelled:
            raise self._cancelled()
        token = self.token()
        payload = json.dumps(body, ensure_ascii=False).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"}
        deadline = time.monotonic() + self.timeout_s
        self._take(call)
        forget = call.on_cancel(lambda: self._cut(call))
        try:
            status, raw = self._attempts(method, self._prefix + path, payload, headers, deadline, call)
            self._used = time.monotonic()
        finally:
            forget()
            self._give(call)
        return self._judge(status, raw, path)

    def _attempts(self, method: str, path: str, payload: bytes | None, headers: dict[str, str], deadline: float,
                  call: Call) -> tuple[int, bytes]:
        """The exchange on the kept-alive connection, once more on a new one when HA had closed it idle."""
        for attempt in (0, 1):
            reused = self._conn is not None and time.monotonic() - self._used < IDLE_RECONNECT_S
            if not reused:
                self._drop()
            try:
                if call.cancelled:
                    raise self._cancelled()
                return self._exchange(method, path, payload, headers, deadline, call)
            except HomeFailure:
                raise
            except Exception as exc:
                self._drop()
                if call.cancelled:
                    raise self._cancelled() from None
                if isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)):
                    if reused and attempt == 0 and time.monotonic() < deadline:
                        log.debug("kept-alive connection to %s was closed (%s); reconnecting", self.where, exc)
                        continue  # HA closed the idle connection before reading our request
                    raise self._unreachable(exc) from None
                if isinstance(exc, TimeoutError):
                    raise HomeFailure(Failure.TIMEOUT, f"Home Assistant at {self.where} did not answer within "
                                      f"{self.timeout_s:g} s; raise home_assistant.timeout_s if it is just slow, "
                                      "or check that it is running") from None
                if isinstance(exc, (OSError, http.client.HTTPException)):
                    raise self._unreachable(exc) from None
                raise
        raise AssertionError("unreachable")  # the second attempt returns or raises

    def _exchange(self, method: str, path: str, payload: bytes | None, headers: dict[str, str],
                  deadline: float, call: Call) -> tuple[int, bytes]:
        if self._conn is None:
            left = max(0.001, deadline - time.monotonic())
            if self._secure:
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=left,
                                                         context=ssl.create_default_context())
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=left)
            self._conn.connect()
            assert self._conn.sock is not None
            self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if call.cancelled:  # cancelled while connecting: its cut found no socket yet
                raise self._cancelled()
        conn = self._conn
        self._settimeout(deadline)
        conn.request(method, path, body=payload, headers=headers)
        self._settimeout(deadline)
        response = conn.getresponse()
        self._settimeout(deadline)
        raw = response.read()
        if response.will_close:
            self._drop()
        return response.status, raw

    def _settimeout(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock = self._conn.sock if self._conn is not None else None
        if sock is not None:
            sock.settimeout(left)

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _unreachable(self, exc: BaseException) -> HomeFailure:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return HomeFailure(Failure.UNREACHABLE, f"cannot reach Home Assistant at {self.where} ({reason}); check "
                           "home_assistant.url and that Home Assistant is running")

    def _judge(self, status: int, raw: bytes, path: str) -> Any:
        if status in (401, 403):
            raise HomeFailure(Failure.TOKEN, f"Home Assistant at {self.where} refused the token in {self.token_file} "
                              f"(HTTP {status}); make a new long-lived access token (your profile -> Security) and "
                              "write it into that file")
        if status == 404:
            raise HomeFailure(Failure.NOT_HA, f"{self.where} answered 404 for {path}: is home_assistant.url Home "
                              "Assistant's address (with its conversation integration loaded)?")
        if status >= 500:
            raise HomeFailure(Failure.SERVER, f"Home Assistant at {self.where} failed with HTTP {status} for {path}; "
                              "see its log")
        if status != 200:
            raise HomeFailure(Failure.NOT_HA, f"{self.where} answered HTTP {status} for {path}: is home_assistant.url "
                              "Home Assistant's address?")
        try:
            return json.loads(raw)
        except ValueError:
            raise HomeFailure(Failure.GARBAGE, f"{self.where} answered {path} with something that is not JSON "
                              f"({raw[:40]!r}): is home_assistant.url Home Assistant's address?") from None
