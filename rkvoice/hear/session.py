"""What the assistant hears, as a state machine in audio time: idle -> listening -> busy -> follow-up.

``HearSession.accept(frame)`` returns events; its states change in audio time (sample counts), so the
same machine drives ``--file`` replay, the live loop and pure tests (the clock only times the ASR).

- idle: frames go to the wake engine. A wake with a request said in the same breath emits
  ``Wake`` then ``Request`` (-> busy); a wake alone emits ``Wake`` (-> listening).
- listening: the VAD closes a segment, the ASR transcribes it -> ``Request`` (-> busy); a leading
  wake phrase is stripped. No speech for ``listen_timeout_s`` -> ``ListenTimeout`` (-> idle).
- busy (answering/speaking): only the wake engine listens; a wake is a barge-in.
- follow-up (after ``turn_done()``): like listening, without the wake phrase, for ``follow_up_s``.
  It hears from where the answer was over (``since``), not from when the loop learnt it: the session
  keeps the last ``max_request_s`` of audio, and a request begun in between is heard whole.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.pinyin_match import PhraseMatcher
from rkvoice.hear.turn_end import RecentAudio
from rkvoice.hear.vad import SAMPLE_RATE, Segment, Segmenter
from rkvoice.hear.wake import WakeEngine, WakeHit

log = logging.getLogger(__name__)

FRAME = 512  # the replay's frames (turn_done(since=...)), as the microphone's


class Mode(enum.Enum):
    IDLE = "idle"
    LISTENING = "listening"
    BUSY = "busy"
    FOLLOW_UP = "follow-up"


@dataclass(frozen=True)
class Wake:
    hit: WakeHit
    barge_in: bool


@dataclass(frozen=True)
class Request:
    text: str
    asr_ms: float
    woke: bool
    """False for a follow-up (or a --file replay) heard without the wake phrase."""
    heard: str = ""
    """The raw transcript (with the wake phrase, if one was said)."""


@dataclass(frozen=True)
class ListenTimeout:
    at_s: float


HearEvent = Wake | Request | ListenTimeout


WAKE_LOOKBACK_S = 0.5
"""When a listening or follow-up window closes, the wake engine hears the last half second again (of what
it did not hear before the window opened): speech begun less than the VAD's detection lag (``hear.min_speech_ms``, 250) before the window closed, which
the request segmenter had not taken for speech yet, is heard by the wake engine from its start (else
"小智小智" said right at the window's end lost its first syllable and was not heard)."""


class HearSession:
    """Needs a loaded ASR, a loaded wake engine and a loaded segmenter (for requests).

    ``on_speech_end(segment)`` is called when a segment closes, before any ASR runs on it: the
    loop marks ``speech_end`` there, so ASR time counts in the latency.
    """

    def __init__(self, cfg: Config, asr: AsrEngine, wake: WakeEngine, segmenter: Segmenter,
                 clock: Clock | None = None) -> None:
        h = cfg.hear
        self.asr = asr
        self.wake = wake
        self.segmenter = segmenter
        self.matcher = PhraseMatcher(h.wake_phrase, tolerance=h.wake_tolerance)
        self.listen_timeout_s = h.listen_timeout_s
        self.follow_up_s = h.follow_up_s
        self.on_speech_end: Callable[[Segment, Mode], None] | None = None
        self.clock = clock or MonotonicClock()
        self.mode = Mode.IDLE
        self.samples = 0
        self.recent = RecentAudio(h.max_request_s)
        """The last ``max_request_s`` of the stream (what ``turn_done(since=...)`` hears again)."""
        self._deadline_s = 0.0
        self._wake_heard = 0
        """The stream sample up to which the wake engine has heard (it stops when a window opens)."""
        if hasattr(wake, "on_segment"):
            wake.on_segment = self._speech_end
        if callable(getattr(asr, "ahead", None)):
            segmenter.on_pause = asr.ahead  # type: ignore[attr-defined]

    @property
    def now_s(self) -> float:
        return self.samples / SAMPLE_RATE

    def start(self, mode: Mode = Mode.IDLE, window_s: float | None = None) -> None:
        """Enter ``mode`` now; for listening/follow-up, ``window_s`` (None: no time limit)."""
        self.mode = mode
        if mode in (Mode.IDLE, Mode.BUSY):
            self.wake.restart(self.samples)
        else:
            self._wake_heard = self.samples
            self.segmenter.restart(self.samples)
            self._deadline_s = float("inf") if window_s is None else self.now_s + window_s
        log.debug("hear mode %s at %.2f s", mode.value, self.now_s)

    def turn_done(self, cancelled: bool = False, since: int | None = None) -> list[HearEvent]:
        """The answer has been spoken: open the follow-up window. ``cancelled``: it stopped without a
        barge-in (e.g. an error): back to waiting for the wake, which has been listening all along.
        ``since``: the stream sample when the answer was over, if the session has been fed past it
        since (the loop learns of the end late under load): the follow-up hears from there, so a
        request begun in between is heard whole; returns what that audio brought."""
        if self.mode is not Mode.BUSY:
            return []
        if cancelled:  # busy -> idle: the wake engine keeps what it is hearing (no restart)
            self.mode = Mode.IDLE
            return []
        if since is None or not self._kept(since):
            self.start(Mode.FOLLOW_UP, self.follow_up_s)
            return []
        self.mode = Mode.FOLLOW_UP
        self._wake_heard = self.samples
        self._deadline_s = since / SAMPLE_RATE + self.follow_up_s
        return self._hear_from(since)

    def _kept(self, since: int) -> bool:
        return self.recent.end - self.recent.keep <= since < self.samples

    def _hear_from(self, since: int) -> list[HearEvent]:
        """The request segmenter hears again from stream sample ``since`` (a kept one) to now: a request
        begun before the session learnt it should listen is heard whole."""
        log.debug("hear mode %s from %.2f s (%.2f s ago)", self.mode.value, since / SAMPLE_RATE,
                  self.now_s - since / SAMPLE_RATE)
        self.segmenter.restart(since)
        heard: list[Segment] = []
        for at in range(since, self.samples, FRAME):
            heard += self.segmenter.accept(self.recent.slice(at, min(at + FRAME, self.samples)))
        return self._listen(heard)

    def accept(self, frame: np.ndarray) -> list[HearEvent]:
        self.recent.add(frame)
        self.samples += len(frame)
        if self.mode in (Mode.IDLE, Mode.BUSY):
            hit = self.wake.accept(frame)
            return self._woke(hit) if hit is not None else []
        return self._listen(self.segmenter.accept(frame))

    def flush(self) -> list[HearEvent]:
        """End of the stream: decide on any speech still open."""
        if self.mode in (Mode.IDLE, Mode.BUSY):
            hit = self.wake.flush()
            return self._woke(hit) if hit is not None else []
        return self._listen(self.segmenter.flush(), final=True)

    def _speech_end(self, seg: Segment) -> None:
        if self.on_speech_end is not None:
            self.on_speech_end(seg, self.mode)

    def _woke(self, hit: WakeHit) -> list[HearEvent]:
        events: list[HearEvent] = [Wake(hit, barge_in=self.mode is Mode.BUSY)]
        if hit.request:
            events.append(Request(hit.request, hit.asr_ms, True, hit.text))
            self.start(Mode.BUSY)
            return events
        self.start(Mode.LISTENING, self.listen_timeout_s)
        since = round(hit.end_s * SAMPLE_RATE)
        if self._kept(since):  # decided after the phrase ended (its transcript): hear from its end
            events += self._hear_from(since)
        return events

    def _listen(self, segments: list[Segment], final: bool = False) -> list[HearEvent]:
        for seg in segments:
            self._speech_end(seg)
            t0 = self.clock.now()
            heard = self.asr.transcribe(seg.samples)
            asr_ms = (self.clock.now() - t0) * 1000.0
            woke = self.mode is Mode.LISTENING
            text = heard.strip()
            found = self.matcher.match(text)
            if found is not None:
                text, woke = found.remainder, True
            if not any(ch.isalnum() for ch in text):
                log.info("heard %r: no request in it; still listening", heard)
                if found is not None and self.mode is Mode.FOLLOW_UP:  # the phrase alone: a wake, listen
                    return self._woke(WakeHit(seg.decided_s, seg.end_s, heard, "", asr_ms))
                if self.mode is Mode.LISTENING:  # someone spoke: give them a fresh window
                    self._deadline_s = max(self._deadline_s, self.now_s + self.listen_timeout_s)
                continue
            self.start(Mode.BUSY)
            return [Request(text, asr_ms, woke, heard)]
        if (final or not self.segmenter.in_speech) and self.now_s >= self._deadline_s:
            was = self.mode
            self.mode = Mode.IDLE
            events: list[HearEvent] = []
            if was is Mode.LISTENING:
                log.info("no request within %.1f s of the wake", self.listen_timeout_s)
                events.append(ListenTimeout(self.now_s))
            return events + self._wake_from(self.samples - round(WAKE_LOOKBACK_S * SAMPLE_RATE))
        return []

    def _wake_from(self, since: int) -> list[HearEvent]:
        """The wake engine hears again from stream sample ``since`` to now: never audio it heard before
        the window opened (or no longer kept)."""
        since = min(max(since, self._wake_heard, self.recent.end - self.recent.keep, 0), self.samples)
        self.wake.restart(since)
        for at in range(since, self.samples, FRAME):
            hit = self.wake.accept(self.recent.slice(at, min(at + FRAME, self.samples)))
            if hit is not None:
                return self._woke(hit)
        return []
