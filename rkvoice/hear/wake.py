"""Wake engines: a streaming protocol and asr-match (the registry is rkvoice.hear.wake_registry).

An engine eats 16 kHz frames and returns a ``WakeHit`` when it heard the wake phrase. asr-match
(portable) closes speech segments with the VAD, transcribes them and looks for the phrase with a
tolerant pinyin match; the rest of the segment ("小智小智，现在几点" -> "现在几点") is the request.

Whisper often decodes the phrase said alone badly ("小巨小巨", "想知想知", or no speech), so a
segment up to ``SHORT_S`` the plain decode misses gets a second decode primed with the phrase
(``PrimedAsr``), which must give the phrase whole. Priming alone turns near misses (小猪小猪, babble)
into the phrase, so the phrase forced on the audio through the unprimed decoder must also reach
``MIN_PHRASE_LOGPROB`` per token (wake-only clips: -0.4 to -1.5 bar one at SNR 5 dB; primed near
misses: -1.8 to -3.2; bench/wake_recall.py). Phrase-length speech closes after ``PHRASE_SILENCE_S``
(bench/wake_latency.py); longer speech (the phrase and a request in one breath) ends by the same
end-of-turn decision as a request (``phrase_segmenter``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.pinyin_match import PhraseMatch, PhraseMatcher
from rkvoice.hear.vad import Segment, Segmenter

log = logging.getLogger(__name__)

PROBE_MARGIN_S = 1.5  # segments up to probe + this are transcribed whole at once
SHORT_S = 3.0  # segments up to this long may be the phrase alone: they get the primed second look
MIN_PHRASE_LOGPROB = -1.6  # the primed look's phrase must be this likely per token, unprimed
PHRASE_SILENCE_S = 0.15  # speech of phrase length is decided after this much silence
PHRASE_MAX_S = 2.5  # "phrase length": the wake set's slowest phrase (0.7x, "小智，小智。") is under 2 s


def phrase_segmenter(cfg: Config, holds_request: Callable[[str], bool]) -> Segmenter:
    """The wake's segmenter (unloaded). Phrase-length speech closes after ``PHRASE_SILENCE_S``. With
    ``hear.endpoint.mode: smart`` a segment whose transcript ``holds_request`` (the phrase and a request
    in one breath) ends by the end-of-turn decision, as a request does (rkvoice.hear.turn_end); other
    speech ends at its pause. Else longer speech ends after ``hear.trailing_silence_ms``."""
    if cfg.hear.endpoint.mode != "smart":
        return Segmenter(cfg, early_silence_s=PHRASE_SILENCE_S, early_max_s=PHRASE_MAX_S)
    from rkvoice.hear.turn_end import TurnEnd

    short_s = cfg.hear.endpoint.short_silence_ms / 1000.0
    vad = Segmenter(cfg, early_silence_s=PHRASE_SILENCE_S, early_max_s=PHRASE_MAX_S, trailing_silence_s=short_s)
    return TurnEnd(cfg, vad=vad, holds_request=holds_request, pass_max_s=PHRASE_MAX_S)


@dataclass(frozen=True)
class WakeHit:
    at_s: float
    """Audio time of the wake decision."""
    end_s: float
    """Audio time where the speech holding the phrase ended."""
    text: str = ""
    """What was transcribed (asr-match), or the keyword a keyword spotter detected."""
    request: str = ""
    """A request said in the same breath after the phrase ('' when the phrase was alone)."""
    asr_ms: float = 0.0


class WakeEngine(Protocol):
    def load(self) -> None: ...

    def restart(self, at_sample: int) -> None:
        """Drop any partial state; the next frame starts at stream sample ``at_sample``."""

    def accept(self, frame: np.ndarray) -> WakeHit | None: ...

    def flush(self) -> WakeHit | None:
        """End of stream: decide on whatever speech is still open."""


class PrimedAsr(Protocol):
    def transcribe_primed(self, samples: np.ndarray, phrase: str) -> str:
        """Decode a short utterance with the decoder primed by ``phrase`` and no no-speech veto."""

    def phrase_logprob(self, samples: np.ndarray, phrase: str) -> float:
        """Mean token log-probability of ``phrase`` forced on ``samples`` by the unprimed decoder."""


def can_prime(asr: object) -> bool:
    """Whether ``asr`` has the PrimedAsr calls. Looked up as the wake calls them (plain getattr), so a
    wrapper that forwards them through ``__getattr__`` (rkvoice.hear.ahead.TranscribeAhead) counts:
    Python 3.12's isinstance() on a runtime-checkable Protocol looks attributes up statically and would
    miss them. rkvoice.gate.gated_asr asks it to offer the calls only for an engine that has them."""
    return all(callable(getattr(asr, name, None)) for name in ("transcribe_primed", "phrase_logprob"))


class AsrMatchWake:
    """``short_s``: segments up to this long that the plain decode does not match are decoded again
    primed with the phrase, when the ASR can (``PrimedAsr``); 0 turns the second look off."""

    languages = ("zh",)  # the phrase is matched by its pinyin

    def __init__(self, cfg: Config, asr: AsrEngine, clock: Clock | None = None) -> None:
        self.clock = clock or MonotonicClock()
        self.asr = asr
        self.matcher = PhraseMatcher(cfg.hear.wake_phrase, tolerance=cfg.hear.wake_tolerance)
        self.segmenter = phrase_segmenter(cfg, self._holds_request)
        self.short_s = SHORT_S if can_prime(asr) else 0.0
        self.probe_s = cfg.hear.wake_probe_s
        self.last_text = ""
        self.on_segment: Callable[[Segment], None] | None = None
        """Called when a segment closes, before its ASR (the loop marks speech_end there)."""
        if callable(getattr(asr, "ahead", None)):
            self.segmenter.on_pause = self._ahead

    def load(self) -> None:
        self.segmenter.load()

    def restart(self, at_sample: int) -> None:
        self.segmenter.restart(at_sample)

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        return self._check(self.segmenter.accept(frame))

    def flush(self) -> WakeHit | None:
        return self._check(self.segmenter.flush())

    def _check(self, segments: list[Segment]) -> WakeHit | None:
        """The first segment's hit (later segments are not transcribed once one woke)."""
        return next((hit for seg in segments if (hit := self.check_segment(seg)) is not None), None)

    def _holds_request(self, text: str) -> bool:
        """The transcript holds the phrase and a request after it."""
        found = self.matcher.match(text)
        return found is not None and bool(found.remainder)

    def _ahead(self, samples: np.ndarray) -> object:
        """Speech paused: its transcript ahead (the Future, which the end-of-turn decision may read), if
        the check would transcribe it whole."""
        if self.probe_s <= 0 or len(samples) <= (self.probe_s + PROBE_MARGIN_S) * 16000:
            return cast(Any, self.asr).ahead(samples)
        return None

    def check_segment(self, seg: Segment) -> WakeHit | None:
        if self.on_segment is not None:
            self.on_segment(seg)
        t0 = self.clock.now()
        if self.probe_s > 0 and seg.duration_s > self.probe_s + PROBE_MARGIN_S:
            # long speech (a TV, a conversation): look for the phrase in its first seconds only
            head = self.asr.transcribe(seg.samples[: int(self.probe_s * 16000)])
            if self.matcher.match(head) is None:
                self.last_text = head
                log.debug("no wake at the start of a %.1f s segment: %r", seg.duration_s, head)
                return None
        text = self.asr.transcribe(seg.samples)
        found = self.matcher.match(text)
        if found is None and seg.duration_s <= self.short_s:
            text, found = self._primed(seg, text)
        asr_ms = (self.clock.now() - t0) * 1000.0
        self.last_text = text
        if found is None:
            log.debug("no wake in %r (%.2f-%.2f s)", text, seg.start_s, seg.end_s)
            return None
        log.info("wake: %r (cost %.2f) request %r", text, found.cost, found.remainder)
        return WakeHit(seg.decided_s, seg.end_s, text, found.remainder, asr_ms)

    def _primed(self, seg: Segment, plain: str) -> tuple[str, PhraseMatch | None]:
        """The second look at a short segment: (transcript, match) of the primed decode when it
        gives the phrase whole, else (the plain transcript, None)."""
        asr = cast(PrimedAsr, self.asr)  # short_s is 0 unless can_prime(self.asr)
        primed = asr.transcribe_primed(seg.samples, self.matcher.phrase)
        found = self.matcher.match(primed)
        if found is None or found.cost > 0:  # the phrase whole (hear.wake_tolerance is >= 0)
            log.debug("no wake in %r nor primed %r (%.1f s)", plain, primed, seg.duration_s)
            return plain, None
        score = asr.phrase_logprob(seg.samples, self.matcher.phrase)
        if score < MIN_PHRASE_LOGPROB:
            log.debug("primed %r but the audio backs the phrase weakly (%.2f; plain %r)", primed, score, plain)
            return plain, None
        log.info("wake on the primed decode %r (phrase log-prob %.2f; plain decode %r)", primed, score, plain)
        return primed, found
