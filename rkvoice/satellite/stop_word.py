"""The stop word: while the satellite plays something (a reply, an announcement, a ringing timer,
music), a stop phrase ("停", "别说了", "stop") ends it without the wake phrase.

Two engines behind one ``StopWord`` (``stop_word`` picks by the wake engine, rkvoice.hear.wake_registry):

- the board (``hear.wake`` kws, auto on the board profile): ``KwsStopEngine``, a second sherpa-onnx
  KeywordSpotter on the wake model (rkvoice.hear.kws) whose keywords file holds the stop phrases in the
  model's pinyin tokens; a phrase it cannot spell (its tokens have no English: "stop") is left out with
  one log line. It decides as the word ends: its pause watch (``STOP_PAUSE_S``, 0.05 s of silence; the
  wake's is 0.1 s) has the held audio decoded at once. bench/board_budget.py (``stop_word``) predicts
  word end -> playback cleared on the board 208 / 246 ms p50 / p90 (goal 300 ms): 178 / 206 ms of audio
  measured on the rigged stand-in model (242 / 270 with the wake's pause watch, bench/wake_latency.py
  ``kws_stop_*``), plus that frame's decode (10 / 13 ms on the dev machine) x 3 for an A72 core (assumed). The
  stand-in times it, nothing more: recall and false stops (a lone 停 is two tokens) need the real model
  on the board; it shares the wake's ``hear.kws_score`` and ``hear.kws_threshold``.
- elsewhere (portable): ``StopWordEngine``, below.

``StopWordEngine`` is the portable wake engine (rkvoice.hear.wake.AsrMatchWake: its phrase segmenter,
which closes phrase-length speech ``PHRASE_SILENCE_S`` after it ends, and Whisper) with the stop
phrases as its phrases. It hears the same echo-cancelled frames as the wake engine, on the hear thread,
only while the core says something plays (``Job.stop_word``; rkvoice.satellite.mic.Hearing), and its hit
makes the core clear the playback and tell ``on_stop`` (the link: stop the media player, the ringing).

A stop phrase is said alone: a segment longer than ``PHRASE_MAX_S`` is not transcribed, and the
transcript must be one phrase whole (a lead-in like 好了 allowed, nothing after it). Whisper base often
hears a lone 停 as no speech, so a short segment the plain decode misses gets the wake's second look,
primed with each phrase in turn, and the phrase forced on the audio must be likely enough. A
multi-syllable phrase needs the wake's ``MIN_PHRASE_LOGPROB``; one syllable cannot reach it (the
portable voice's 停: -4.82 per token), so it needs ``ONE_SYLLABLE_MIN_LOGPROB``, measured on the
portable voice: 停 -4.82 against 嗯 -5.54, 对 -5.51, 天 -5.57, 定 -5.99, 行 -6.32, 听 -7.02 (a thin
margin: a real voice may need the board's keyword spotter; bench/stop_word.py counts false stops).

bench/stop_word.py (7 voices per phrase, 15 negatives; docs/performance.md): word end -> the stop
decided p50 269 ms of audio (the phrase segmenter's share), plus Whisper's decode of the segment (p50
1.3 s at load 1-3, 2.7-3.5 s at load 4-6); recall 别说了 7/7, 停 3/7 (Whisper base scores a lone 停 of
most voices below 冰 or 请); 0/15 false stops. On the board the
same segmenter and Paraformer (~0.18 s on the A72) would stop ~450 ms after the word at best: hence the
keyword spotter there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from rkvoice.clock import Clock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.kws import KwsWake, keywords_line, spoken_text
from rkvoice.hear.pinyin_match import PhraseMatch, PhraseMatcher, syllables
from rkvoice.hear.vad import Segment, Segmenter
from rkvoice.hear.wake import MIN_PHRASE_LOGPROB, PHRASE_MAX_S, PHRASE_SILENCE_S, AsrMatchWake, PrimedAsr, WakeHit
from rkvoice.hear.wake_registry import wake_name
from rkvoice.hear.whisper_asr import PROMPT

log = logging.getLogger(__name__)

PHRASES = ("停", "别说了", "stop")
ONE_SYLLABLE_MIN_LOGPROB = -5.2
"""The primed look's one-syllable phrase (停) must be this likely per token, unprimed."""
MIN_SPEECH_MS = 120
"""Speech shorter than the VAD's ``hear.min_speech_ms`` (250) is no segment; a quick 停 is that short."""
GRACE_S = 0.5
"""The stop word listens on this long after nothing plays any more."""
RATE = 16000
PHRASE_TOLERANCE = 0.5
"""A phrase of two or more syllables may be off by one initial or final (别说啦); one syllable by none."""
_LETTERS = re.compile(r"[^a-z]+")


@dataclass(frozen=True)
class StopWordSettings:
    """What the satellite's stop word listens for (by default ``satellite.stop_words``)."""

    phrases: tuple[str, ...] = PHRASES
    """Empty: no stop word."""


class StopPhrases:
    """Whether a transcript is one of ``phrases`` whole: a Chinese phrase by its toneless pinyin (up to
    two syllables of lead-in), another by its letters, case and punctuation aside."""

    def __init__(self, phrases: Sequence[str]) -> None:
        self.chinese = [PhraseMatcher(p, 0.0 if len(syllables(p)) == 1 else PHRASE_TOLERANCE)
                        for p in phrases if syllables(p)]
        self.words = {w for p in phrases if not syllables(p) and (w := _LETTERS.sub(" ", p.lower()).strip())}
        if not self.chinese and not self.words:
            raise ValueError(f"no stop phrase in {list(phrases)!r}: give Chinese characters or words")

    @property
    def longest(self) -> int:
        """Syllables of the longest Chinese phrase (a word counts one)."""
        return max([len(m.target) for m in self.chinese] + [1])

    @property
    def phrases(self) -> list[str]:
        return [m.phrase for m in self.chinese] + sorted(self.words)

    def match(self, text: str) -> tuple[str, PhraseMatch] | None:
        """(the phrase, its match) when ``text`` is that phrase alone, else None."""
        for matcher in self.chinese:
            found = matcher.match(text)
            if found is not None and not found.remainder:
                return matcher.phrase, found
        words = _LETTERS.sub(" ", text.lower()).strip()
        if words in self.words and not syllables(text):
            return words, PhraseMatch(0.0, "")
        return None

    @staticmethod
    def min_logprob(phrase: str) -> float:
        return ONE_SYLLABLE_MIN_LOGPROB if len(syllables(phrase)) <= 1 else MIN_PHRASE_LOGPROB


class StopWordEngine(AsrMatchWake):
    """The asr-match wake engine listening for the stop phrases: ``accept(frame)`` gives a WakeHit (its
    ``text`` the transcript) when one was said alone, ``restart(at)`` when it starts listening again."""

    def __init__(self, cfg: Config, asr: AsrEngine, phrases: Sequence[str] = PHRASES, clock: Clock | None = None) -> None:
        short = min(cfg.hear.min_speech_ms, MIN_SPEECH_MS)
        cfg = replace(cfg, hear=replace(cfg.hear, min_speech_ms=short))
        super().__init__(cfg, asr, clock)
        self.stop_phrases = StopPhrases(phrases)
        # a stop phrase is said alone: longer speech is never one, so it needs no end-of-turn decision
        # (the wake engine's one would judge it), and the wake engine's transcribe-ahead is its own
        self.segmenter = Segmenter(cfg, early_silence_s=PHRASE_SILENCE_S, early_max_s=PHRASE_MAX_S)

    def check_segment(self, seg: Segment) -> WakeHit | None:
        if seg.duration_s > PHRASE_MAX_S:
            log.debug("no stop word in %.1f s of speech (longer than a phrase said alone)", seg.duration_s)
            return None
        t0 = self.clock.now()
        text = self.asr.transcribe(seg.samples)
        found = self.stop_phrases.match(text)
        if found is None and seg.duration_s <= self.short_s and self._may_be_stop(text):
            text, found = self._primed_stop(seg, text)
        self.last_text = text
        if found is None:
            log.debug("no stop word in %r (%.2f-%.2f s)", text, seg.start_s, seg.end_s)
            return None
        asr_ms = (self.clock.now() - t0) * 1000.0
        log.info("stop word: %r (%.2f-%.2f s, %.0f ms)", text, seg.start_s, seg.end_s, asr_ms)
        return WakeHit(seg.decided_s, seg.end_s, text, "", asr_ms)

    def _may_be_stop(self, plain: str) -> bool:
        """Whether a plain transcript that is no stop phrase may still hide one: not the wake phrase (a
        barge-in must not wait for the primed looks) and at most one syllable longer than the longest
        phrase (the plain decode of a slow 别说了 can be 别说了用)."""
        return len(syllables(plain)) <= self.stop_phrases.longest + 1 and self.matcher.match(plain) is None

    def _primed_stop(self, seg: Segment, plain: str) -> tuple[str, tuple[str, PhraseMatch] | None]:
        """The second look: each phrase primed in turn; the first the decode gives whole and the audio
        backs (``StopPhrases.min_logprob``)."""
        asr = cast(PrimedAsr, self.asr)  # short_s is 0 unless it can prime
        for phrase in self.stop_phrases.phrases:
            primed = without_echo(asr.transcribe_primed(seg.samples, phrase))
            found = self.stop_phrases.match(primed)
            if found is None or found[0] != phrase or found[1].cost > 0:
                continue
            score = asr.phrase_logprob(seg.samples, phrase)
            if score >= self.stop_phrases.min_logprob(phrase):
                log.info("stop word on the primed decode %r (log-prob %.2f; plain decode %r)", primed, score, plain)
                return primed, found
            log.debug("primed %r but the audio backs it weakly (%.2f)", primed, score)
        return plain, None


def without_echo(text: str) -> str:
    """The primed decode without a trailing start of Whisper's prompt ("停 以下": the decoder goes on
    into the prompt it was given; rkvoice.hear.whisper_asr cuts only three characters or more of it)."""
    cut = text.find(PROMPT[:2], 1)
    return text if cut < 0 else text[:cut].strip()


STOP_PAUSE_S = 0.05
"""The stop spotter's pause watch: a stop phrase is said alone and short, so a shorter silence than the
wake's (``rkvoice.hear.kws.PAUSE_S``) ends it; measured below (KwsStopEngine)."""


class KwsStopEngine(KwsWake):
    """The board's stop word: a second sherpa-onnx KeywordSpotter on the wake engine's model (its own
    keywords file: the stop phrases in the model's tokens), with a shorter pause watch (``STOP_PAUSE_S``);
    ``accept(frame)`` gives a WakeHit (its ``text`` the phrase) on the frame whose decode spotted one. A
    phrase the model's tokens cannot spell (the ppinyin model: any English word) is left out with one
    log line at load."""

    pause_s = STOP_PAUSE_S

    def __init__(self, cfg: Config, phrases: Sequence[str] = PHRASES) -> None:
        super().__init__(cfg)
        self.stop_phrases = tuple(phrases)
        self.phrases = set()
        self.wanted = "a stop phrase"
        self.skipped: list[str] = []
        """The phrases left out (the model cannot spell them)."""

    def keywords(self, tokens_file: Path, table: dict[str, int]) -> list[str]:
        lines = []
        for phrase in self.stop_phrases:
            try:
                lines.append(keywords_line(phrase, tokens_file, table, "stop phrase", "satellite.stop_words"))
            except RkvoiceError as err:
                log.info("stop word: %s; it is not spotted", err.message)
                self.skipped.append(phrase)
                continue
            self.phrases.add(spoken_text(phrase))
        if not lines:
            raise RkvoiceError(Stage.WAKE, "no-stop-phrase",
                               f"no stop phrase in {list(self.stop_phrases)!r} can be spelled with the keyword "
                               f"model's tokens ({tokens_file}); give Chinese ones in satellite.stop_words (e.g. 停,别说了)")
        return lines


class StopWord:
    """The stop word as the hear thread uses it: ``hear(frame, at, active)`` (``at``: the frame's stream
    sample) feeds the engine while ``active`` (something plays) and ``GRACE_S`` after (a gap between
    two pieces of music or two chunks of a reply does not cut a phrase in two); restarted at the first
    frame it hears after a pause longer than that, and after each hit."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._listening = False
        self._until = -1  # stream sample up to which it listens

    def hear(self, frame: np.ndarray, at: int, active: bool) -> WakeHit | None:
        if active:
            self._until = at + len(frame) + round(GRACE_S * RATE)
        elif at >= self._until:
            self._listening = False
            return None
        if not self._listening:
            self.engine.restart(at)
            self._listening = True
        hit: WakeHit | None = self.engine.accept(frame)
        if hit is not None:  # the next phrase is heard afresh, once something plays again
            self._listening, self._until = False, at
        return hit


def stop_word(cfg: Config, asr: AsrEngine | None, settings: StopWordSettings | None = None) -> StopWord | None:
    """The loaded stop word, or None (no phrases). With the keyword spotter as the wake engine
    (``hear.wake`` kws, or auto on the board profile) it is ``KwsStopEngine`` (None, with a warning, when
    it can spell none of the phrases); else ``StopWordEngine`` over ``asr`` (the hear stage's, loaded;
    None without one)."""
    settings = settings or StopWordSettings(cfg.satellite.stop_phrases)
    if not settings.phrases:
        return None
    if wake_name(cfg) == "kws":
        spotter = KwsStopEngine(cfg, settings.phrases)
        try:
            spotter.load()
        except RkvoiceError as err:
            if err.code != "no-stop-phrase":
                raise
            log.warning("no stop word: %s", err.message)
            return None
        return StopWord(spotter)
    if asr is None:
        return None
    engine = StopWordEngine(cfg, asr, settings.phrases)
    engine.load()
    return StopWord(engine)
