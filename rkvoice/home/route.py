"""The ``home`` route: a question the local tools did not answer goes to Home Assistant's conversation
agent before the LLM. HA's spoken reply is the answer; ``no_intent_match`` goes on to the LLM.

A missing HA never slows a turn for long: the first failure (unreachable, token refused, 5xx, a timeout,
an answer that is not HA's) costs at most ``timeout_s`` and logs one warning naming the problem and the
fix; for ``retry_s`` after it, questions skip HA at once (the breaker is open), then one question tries
it again. A question that clearly was a home command (a control verb and a name HA exposed, or, before
HA was ever reached, a control verb leading the sentence) gets a short spoken apology instead of the
LLM, which would only pretend to have done it; for the same reason such a command that HA has no
sentence for (``no_intent_match``) gets HA's own words, not the LLM.

The names of the exposed entities (and their aliases) are read over HA's websocket when the route
loads and every ``NAMES_EVERY_S`` after a successful answer; a question naming one of them is offered
to HA before the local tools too (``claims``), so a thermostat's 温度 is not the board's temperature.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config_ha import HomeAssistantConfig
from rkvoice.home.client import Conversed, HaClient, HomeFailure, Kind
from rkvoice.home.ws import HaSocket, WsError
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

ROUTE = "home"
"""The route's one spelling (Reply.route, the timeline's route event, the metrics summary, log lines)."""
APOLOGY = "抱歉，现在连不上智能家居，这个操作没有完成。"
"""Spoken for a home command while HA cannot be asked (the log line says why)."""
FAILED = "抱歉，智能家居没能完成这个操作。"
"""Spoken when HA answers an error without words of its own."""
NAMES_EVERY_S = 600.0
WS_TIMEOUT_S = 5.0
"""The websocket reads (names, --check) run beside the turns, never inside one."""
CONTROL_VERBS = ("打开", "开启", "关闭", "关掉", "关上", "调到", "调成", "调为", "调高", "调低", "调亮", "调暗",
                 "设为", "设成", "设置为", "设定为", "拉开", "拉上", "开一下", "关一下", "升到", "降到", "掉到")
HEARD = (("°C", "度"), ("℃", "度"), ("°", "度"), ("掉到", "调到"), ("官掉", "关掉"))
"""How speech recognition writes what HA's sentences spell otherwise: Whisper writes 二十八度 as 28°, and
hears 调到 as 掉到 (HA's sentences say {temperature}度 and 调到)."""
POLITE = ("请你", "请", "麻烦你", "麻烦", "你帮我", "帮我", "帮忙", "给我", "能不能", "可不可以", "可以")
"""Polite openings HA's sentences do not have (帮我打开客厅灯 is no match, 打开客厅灯 is): taken off what HA
is sent, with the assistant's name said first (小智，…), and the closing particles in ``CLOSINGS``."""
CLOSINGS = ("好不好", "好吗", "可以吗", "行吗", "谢谢你", "谢谢", "吧", "呀", "啊", "哦", "了")
LEADS = (*POLITE, "把", "将", "让")
"""Words that may come before the verb of a command ("请把…打开", "帮我打开…")."""
_EDGE = re.compile(r"^[\s，。！？、,.!?~～]+|[\s，。！？、,.!?~～]+$")


_PUNCT = re.compile(r"[\s，。！？、；：“”‘’\"'!?,;:（）()《》【】\[\]…~～·-]+")


def clean(text: str) -> str:
    """``text`` as names are compared: no spaces or punctuation, lower case."""
    return _PUNCT.sub("", text).lower()


@dataclass(frozen=True)
class HomeAnswer:
    text: str
    """What is spoken: HA's own words, or the apology."""
    outcome: str
    """action_done, query_answer, the error's code (no_valid_targets, ...), or "apology"."""
    ms: float = 0.0


@dataclass(frozen=True)
class Asked:
    """What the route made of one question (marked on the turn's route event)."""

    answer: HomeAnswer | None
    """None: the LLM answers."""
    outcome: str
    """HA's outcome, "skipped" (breaker open), or the failure's kind."""
    ms: float = 0.0


def for_ha(text: str, name: str = "") -> str:
    """``text`` as HA is asked it: without the assistant's name said first, polite openings and closing
    particles (HA's sentences are bare commands), with ``HEARD`` spelled as HA's sentences spell it;
    everything else as heard."""
    s = _EDGE.sub("", text)
    for heard, meant in HEARD:
        s = s.replace(heard, meant)
    while True:
        before = s
        if name:
            s = _EDGE.sub("", s.removeprefix(name))
        for lead in POLITE:
            s = s.removeprefix(lead)
        for tail in CLOSINGS:
            s = _EDGE.sub("", s.removesuffix(tail))
        if s == before:
            return s or _EDGE.sub("", text)  # nothing left: as said


def looks_like_command(text: str, names: frozenset[str]) -> bool:
    """A control verb and a name HA exposed; with no names known yet, a control verb leading the sentence."""
    s = clean(text)
    if not any(v in s for v in CONTROL_VERBS):
        return False
    if names:
        return any(n in s for n in names)
    for lead in LEADS:
        s = s.removeprefix(lead)
    return s.startswith(CONTROL_VERBS)


def exposed_names(sock: HaSocket) -> frozenset[str]:
    """The names and aliases of the entities exposed to Assist (as ``clean`` spells them)."""
    exposed = sock.call("homeassistant/expose_entity/list").get("exposed_entities", {})
    ids = {eid for eid, assistants in exposed.items() if isinstance(assistants, dict) and assistants.get("conversation")}
    names: set[str] = set()
    for state in sock.call("get_states"):
        if state.get("entity_id") in ids:
            names.add(str(state.get("attributes", {}).get("friendly_name") or ""))
    if ids:
        entries = sock.call("config/entity_registry/get_entries", entity_ids=sorted(ids))
        for entry in (entries or {}).values():
            if isinstance(entry, dict):
                names.update(str(a) for a in entry.get("aliases") or () if a)
                names.add(str(entry.get("name") or ""))
    return frozenset(c for c in (clean(n) for n in names) if len(c) >= 2)


class HomeRoute:
    """Asks HA's conversation agent for one turn at a time; the breaker and the names are shared."""

    def __init__(self, cfg: HomeAssistantConfig, token_file: Path, clock: Clock | None = None,
                 client: HaClient | None = None, name: str = "") -> None:
        self.cfg = cfg
        self.name = name
        """The assistant's name (``hear.name``): said before a command, it is not sent to HA."""
        self.clock = clock or MonotonicClock()
        self.client = client or HaClient(cfg.url, token_file, cfg.timeout_s, cfg.language)
        self._lock = threading.Lock()
        self._open_until: float | None = None
        """While the clock is before this, questions skip HA; None: HA answered last time."""
        self._failure: HomeFailure | None = None
        self._probing = False
        self._names: frozenset[str] = frozenset()
        self._names_at: float | None = None
        self._names_busy = False
        self._inflight = 0

    @property
    def names(self) -> frozenset[str]:
        return self._names

    def load(self) -> None:
        """Read the exposed names in the background (the first question does not wait for them)."""
        self._refresh_names_later()

    def close(self) -> None:
        self.client.close()

    def claims(self, text: str) -> bool:
        """``text`` names something HA exposed: ask HA before the local tools."""
        s = clean(text)
        return any(n in s for n in self._names)

    def ask(self, text: str, turn: Turn) -> Asked:
        """HA's answer to ``text``; ``Asked.answer`` None means the LLM answers."""
        with self._lock:
            now = self.clock.now()
            if self._open_until is not None and (now < self._open_until or self._probing):
                return self._skip(text, "skipped")
            self._probing = self._open_until is not None
            self._inflight = turn.id
        turn.on_cancel(lambda t: self.client.abort() if self._inflight == t.id else None)
        t0 = self.clock.now()
        try:
            answer, _ = self.client.converse(for_ha(text, self.name))
        except HomeFailure as failure:
            with self._lock:
                self._probing = False
                self._inflight = 0
            if turn.cancelled:
                return Asked(None, "cancelled")
            self._trip(failure)
            return self._skip(text, failure.kind, round((self.clock.now() - t0) * 1000, 1))
        with self._lock:
            self._inflight = 0
            self._probing = False
            if self._open_until is not None:
                log.info("Home Assistant at %s answers again", self.client.where)
            self._open_until = self._failure = None
        self._refresh_names_later()
        return self._answered(text, answer)

    def _answered(self, text: str, answer: Conversed) -> Asked:
        if answer.kind is Kind.NO_MATCH and not (self._names and looks_like_command(text, self._names)):
            log.info("home: HA has no sentence for %r (%.0f ms); the LLM answers", text, answer.ms)
            return Asked(None, Kind.NO_MATCH, answer.ms)
        if answer.kind is Kind.NO_MATCH:  # a command naming an exposed device: HA's words, not an LLM pretending
            log.info("home: HA has no sentence for the command %r (%.0f ms); saying so", text, answer.ms)
            return Asked(HomeAnswer(answer.speech or FAILED, Kind.NO_MATCH, answer.ms), Kind.NO_MATCH, answer.ms)
        outcome = answer.code or answer.kind.value
        log.info("home: %r -> %s %r (%.0f ms)", text, outcome, answer.speech, answer.ms)
        return Asked(HomeAnswer(answer.speech or FAILED, outcome, answer.ms), outcome, answer.ms)

    def _skip(self, text: str, outcome: str, ms: float = 0.0) -> Asked:
        if looks_like_command(text, self._names):
            log.info("home: %r looks like a home command and HA cannot be asked: apologising", text)
            return Asked(HomeAnswer(APOLOGY, "apology", ms), outcome, ms)
        return Asked(None, outcome, ms)

    def _trip(self, failure: HomeFailure) -> None:
        with self._lock:
            again = self._failure is not None and self._failure.message == failure.message
            self._failure = failure
            self._open_until = self.clock.now() + self.cfg.retry_s
        if again:
            log.info("Home Assistant still cannot be asked (%s); next try in %g s", failure.kind, self.cfg.retry_s)
        else:
            log.warning("home: %s (questions go to the LLM; HA is tried again in %g s)", failure.message,
                        self.cfg.retry_s)

    def _refresh_names_later(self) -> None:
        now = self.clock.now()
        with self._lock:
            if self._names_busy or (self._names_at is not None and now - self._names_at < NAMES_EVERY_S):
                return
            self._names_busy = True
        threading.Thread(target=self._refresh_names, name="home-names", daemon=True).start()

    def _refresh_names(self) -> None:
        try:
            token = self.client.token()
            with HaSocket(self.cfg.url, token, max(WS_TIMEOUT_S, self.cfg.timeout_s)) as sock:
                names = exposed_names(sock)
            self._names = names
            self._names_at = self.clock.now()
            log.debug("home: %d names exposed to Assist", len(names))
        except (HomeFailure, WsError, OSError, ValueError, AttributeError) as exc:
            log.debug("home: could not read the exposed names (%s)", exc)
            self._names_at = self.clock.now() - NAMES_EVERY_S + self.cfg.retry_s  # next try after retry_s
        finally:
            with self._lock:
                self._names_busy = False
