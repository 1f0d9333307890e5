"""What a Wyoming request runs in: the server's shared ``Context``, and the connection's ``Requests``.
Each request is a ``Turn`` like a local one: its handle stops its work when the client leaves, and
the server logs one line per request with its figures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from wyoming.event import Event
from wyoming.info import Info

from rkvoice.answer.assistant import Assistant
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.config_ha import WyomingConfig
from rkvoice.hear.pinyin_match import PhraseMatcher
from rkvoice.home.vocab import HomeNames
from rkvoice.timeline import Timeline
from rkvoice.turn import Turn

from .engines import Engines
from .handoff import Heard
from .tts import Voices

log = logging.getLogger(__name__)

Send = Callable[[Event], Awaitable[None]]
FIGURES = ("route", "asr_ms", "llm_first_token_ms", "first_audio_ms", "synth_ms", "audio_s", "chunks", "total_ms")
"""Summary figures of a request's timeline in its log line, where it has them (the synthesis figures
only where something was synthesised)."""


def figures(summary: dict[str, Any]) -> str:
    """``name=value`` for each of FIGURES the summary has, milliseconds whole."""
    out = []
    for k in FIGURES:
        v = summary.get(k)
        if v in (None, "") or (k in ("synth_ms", "audio_s", "chunks") and not summary.get("chunks")):
            continue
        out.append(f"{k}={v:.0f}" if k.endswith("_ms") else f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}")
    return " ".join(out)


class Context:
    """What every connection shares: settings, engines, voices, the info answer, the client count."""

    def __init__(self, cfg: Config, wcfg: WyomingConfig, engines: Engines, voices: Voices,
                 info: Info, clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.wcfg = wcfg
        self.engines = engines
        self.voices = voices
        self.info = info
        self.wake_name = info.wake[0].models[0].name
        """The wake word's name, as ``info`` announces it and detections carry it."""
        self.clock = clock or MonotonicClock()
        """The requests' timelines run on it."""
        self.clients = 0
        self.wake_slots = asyncio.Semaphore(wcfg.max_wake_streams)
        self.handoff: dict[str, Heard] = {}
        """Host -> the tape of its last detection (still taped while its client sends), until the
        transcription that follows takes the audio after the phrase (handoff.py)."""
        self.phrase = PhraseMatcher(cfg.hear.wake_phrase, tolerance=cfg.hear.wake_tolerance)
        """The wake phrase, taken off the front of a transcript (a satellite that woke on its own
        sends the request said in one breath with the phrase still in the audio)."""
        home = engines.assistant.home if isinstance(engines.assistant, Assistant) else None
        self.names: HomeNames | None = home.vocab if home is not None else None
        """The home's names (``home_assistant.url`` set): a transcript's misheard names are put right
        before Home Assistant's agent reads it; read from HA from now on (the daemon's already are)."""
        if self.names is not None:
            self.names.start()
        self.idle_since: dict[Any, float] = {}
        """Connections waiting for their next event with no request in progress -> since when (loop time)."""

    def evict_oldest_idle(self, idle_s: float) -> bool:
        """Close the connection idle longest, if one has been idle ``idle_s``; True if one was."""
        if not self.idle_since:
            return False
        handler, since = min(self.idle_since.items(), key=lambda item: item[1])
        if asyncio.get_running_loop().time() - since < idle_s:
            return False
        del self.idle_since[handler]
        handler.evict()
        return True


class Requests:
    """The turns of one connection's requests in progress."""

    def __init__(self, peer: str, clock: Clock) -> None:
        self.peer = peer
        self.clock = clock
        self._open: set[Turn] = set()

    @contextmanager
    def turn(self, kind: str, text: str = "") -> Iterator[Turn]:
        """A request's turn, from now until the block ends: then it is over and logged. An exception
        fails it; a cancelled task cancels it (the client left: already cancelled, with that reason)."""
        turn = Turn(Timeline(self.clock), text=text)
        turn.timeline.start()
        t0 = self.clock.now()
        self._open.add(turn)
        try:
            yield turn
        except Exception as exc:
            turn.fail(exc)
            raise
        except BaseException:
            turn.cancel("interrupted")
            raise
        finally:
            self._open.discard(turn)
            turn.finish()
            summary = {**turn.timeline.summary(), "total_ms": (self.clock.now() - t0) * 1000.0}
            outcome = (f" failed: {turn.exception}" if turn.exception is not None
                       else f" cancelled ({turn.reason})" if turn.cancelled else "")
            log.info("wyoming %s %s %r: %s%s", self.peer, kind, turn.text[:60], figures(summary), outcome)

    def cancel(self, reason: str) -> None:
        """Stop every request in progress (the client left)."""
        for turn in list(self._open):
            turn.cancel(reason)
