"""The ``home`` route: a question the local tools did not answer goes to Home Assistant's conversation
agent before the LLM. HA's spoken reply is the answer; ``no_intent_match`` goes on to the LLM.

A missing HA never slows a turn for long: the first failure (unreachable, token refused, 5xx, a timeout,
an answer that is not HA's) costs at most ``timeout_s`` and logs one warning naming the problem and the
fix; for ``retry_s`` after it, questions skip HA at once (the breaker is open), then one question tries
it again. A question that clearly was a home command (a control verb and a name HA exposed, or, before
HA was ever reached, a control verb leading the sentence) gets a short spoken apology instead of the
LLM, which would only pretend to have done it; for the same reason such a command that HA has no
sentence for (``no_intent_match``) gets HA's own words, not the LLM.

The home's names (``vocab.HomeNames``: the exposed entities' names and aliases, the areas and floors)
are read over HA's websocket when the route loads and kept current; a command is asked with a name it
misheard put right (``correct``), and a question naming one of them is offered to HA before the local
tools too (``claims``), so a thermostat's 温度 is not the board's temperature.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config_ha import HomeAssistantConfig
from rkvoice.home.client import Call, Conversed, Failure, HaClient, HomeFailure, Kind
from rkvoice.home.correct import CUES as CONTROL_VERBS, clean
from rkvoice.home.vocab import HomeNames
from rkvoice.turn import Turn

log = logging.getLogger(__name__)

ROUTE = "home"
"""The route's one spelling (Reply.route, the timeline's route event, the metrics summary, log lines)."""
APOLOGY = "抱歉，现在连不上智能家居，这个操作没有完成。"
"""Spoken for a home command while HA cannot be asked (the log line says why)."""
FAILED = "抱歉，智能家居没能完成这个操作。"
"""Spoken when HA answers an error without words of its own."""
WS_TIMEOUT_S = 5.0
"""The websocket reads (names, --check) run beside the turns, never inside one."""
FIRST_NAMES_S = 1.0
"""Longest wait for the names before a one-shot run's question (``--text``, ``--file``): once per run."""
NAMES_RETRY_S = 10.0
"""Shortest wait before the names are read again after HA failed (``retry_s`` may be 0)."""
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


class HomeRoute:
    """Asks HA's conversation agent for one turn at a time; the breaker and the names are shared."""

    def __init__(self, cfg: HomeAssistantConfig, token_file: Path, clock: Clock | None = None,
                 client: HaClient | None = None, name: str = "", cache: Path | None = None,
                 names: HomeNames | None = None) -> None:
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
        self.vocab = names or HomeNames(cfg.url, self.client.token, cache, max(WS_TIMEOUT_S, cfg.timeout_s),
                                        retry_s=max(NAMES_RETRY_S, cfg.retry_s))
        """The home's names (``cache``: their file in the state directory; None: not kept on disk)."""

    @property
    def names(self) -> frozenset[str]:
        return self.vocab.names

    def load(self) -> None:
        """The cached names at once; HA's in the background (the first question does not wait for them)."""
        self.vocab.start()

    def close(self) -> None:
        self.vocab.stop()
        self.client.close()

    def claims(self, text: str) -> bool:
        """``text`` names something HA exposed (once a misheard name is put right): ask HA before the tools.
        Unloaded (a one-shot run), the names are read first, waiting once at most ``FIRST_NAMES_S``."""
        self.vocab.wait_first(min(self.cfg.timeout_s, FIRST_NAMES_S))
        s = clean(self.vocab.matcher.correct(text))
        return any(n in s for n in self.names)

    def ask(self, text: str, turn: Turn) -> Asked:
        """HA's answer to ``text`` (a name it misheard put right); ``Asked.answer`` None means the LLM answers.
        A turn cancelled before or during the question ends it at once ("cancelled", not HA's failure)."""
        if turn.cancelled:
            return Asked(None, "cancelled")
        self.vocab.wait_first(min(self.cfg.timeout_s, FIRST_NAMES_S))
        text = self.vocab.correct(text)
        with self._lock:
            now = self.clock.now()
            if self._open_until is not None and (now < self._open_until or self._probing):
                return self._skip(text, "skipped")
            self._probing = self._open_until is not None
        call = Call()  # this question's cancel: the turn's, not the shared client's
        turn.on_cancel(lambda _turn: call.cancel())
        t0 = self.clock.now()
        try:
            answer, _ = self.client.converse(for_ha(text, self.name), call=call)
        except HomeFailure as failure:
            with self._lock:
                self._probing = False
            if turn.cancelled or failure.kind is Failure.CANCELLED:
                return Asked(None, "cancelled")
            self._trip(failure)
            return self._skip(text, failure.kind, round((self.clock.now() - t0) * 1000, 1))
        with self._lock:
            self._probing = False
            if self._open_until is not None:
                log.info("Home Assistant at %s answers again", self.client.where)
            self._open_until = self._failure = None
        return self._answered(text, answer)

    def _answered(self, text: str, answer: Conversed) -> Asked:
        if answer.kind is Kind.NO_MATCH and not (self.names and looks_like_command(text, self.names)):
            log.info("home: HA has no sentence for %r (%.0f ms); the LLM answers", text, answer.ms)
            return Asked(None, Kind.NO_MATCH, answer.ms)
        if answer.kind is Kind.NO_MATCH:  # a command naming an exposed device: HA's words, not an LLM pretending
            log.info("home: HA has no sentence for the command %r (%.0f ms); saying so", text, answer.ms)
            return Asked(HomeAnswer(answer.speech or FAILED, Kind.NO_MATCH, answer.ms), Kind.NO_MATCH, answer.ms)
        outcome = answer.code or answer.kind.value
        log.info("home: %r -> %s %r (%.0f ms)", text, outcome, answer.speech, answer.ms)
        return Asked(HomeAnswer(answer.speech or FAILED, outcome, answer.ms), outcome, answer.ms)

    def _skip(self, text: str, outcome: str, ms: float = 0.0) -> Asked:
        if looks_like_command(text, self.names):
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
