"""End of turn: a request ends when Smart Turn v3 judges it finished, not after a fixed silence.

Pipecat's Smart Turn v3.2 (int8, CPU; a Whisper-tiny encoder with a classifier, BSD-2-Clause,
installed from the pipecat-ai wheel: models/manifest.yaml ``smart-turn``) reads the Whisper log-mel
features of the last 8 s of audio and gives the probability that the speaker has finished.

``TurnEnd`` is a ``Segmenter`` (the same calls), so it stands wherever one ends requests: its own silero
VAD closes speech after ``hear.endpoint.short_silence_ms``; the speech so far is then held and judged.
Judged finished (probability >= ``threshold``), the request ends now; else it waits, judged again every
``recheck_ms`` as the silence grows, and ends after ``max_silence_ms`` all the same. Speech that
resumes joins the held speech (the pause kept in it) and the whole is judged when it pauses again.
The wake's segmenter (rkvoice.hear.wake.phrase_segmenter) is one with ``holds_request``: speech that
pauses with nothing held is judged only when its transcript holds a request after the wake phrase (the
phrase and a request in one breath); the phrase alone, or speech without it, ends as soon as the
transcript is known (the wake's check needs that transcript anyway), even if speech has resumed; speech
that resumes and pauses again before the transcript is known is not joined to it. Without a
transcript, speech of at most ``pass_max_s`` ends at its pause and longer speech is judged.
The model runs on its own thread, waited for at most ``budget_ms``. Without a usable model (missing,
corrupt, another shape), or after a judgement that raised or was not back within ``budget_ms``, a
request ends after ``hear.trailing_silence_ms`` of silence, as in ``mode: silence``; one warning says
so (three such judgements in a row: the model is left out). Every judgement is on the closed ``Segment``
(``judgements``: silence, probability, ms, verdict) and in the log.

While the model judges, the speech so far is handed to ``on_pause`` (rkvoice.hear.ahead starts its
transcript); the transcript is used only for a request that ends on exactly that speech. With
``hear.endpoint.words`` it is also the words' opinion (rkvoice.text.unfinished): a request judged
finished waits on when its words stop on one that needs more (帮我把) or name a topic and nothing about
it (我的iPhone: a noun phrase alone, not one of what the assistant reports on); one judged unfinished
ends as soon as its words close a question (明天会下雨吗).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.hear.turn_model import TurnJudge, shared_smart_turn, turn_model_path
from rkvoice.hear.vad import SAMPLE_RATE, Judgement, Segment, Segmenter, Verdict
from rkvoice.text.unfinished import finished, topic, unfinished

log = logging.getLogger(__name__)

MAX_FAULTS = 3  # judgements failed or slow in a row before the model is left out for good


# ---------------------------------------------------------------------------------------- the decision

class RecentAudio:
    """The last ``keep_s`` of the stream, by stream sample (the pauses inside a held request)."""

    def __init__(self, keep_s: float) -> None:
        self.keep = int(keep_s * SAMPLE_RATE)
        self._frames: deque[tuple[int, np.ndarray]] = deque()
        self._n = 0
        self.end = 0

    def restart(self, at_sample: int) -> None:
        self._frames.clear()
        self._n = 0
        self.end = at_sample

    def add(self, frame: np.ndarray) -> None:
        self._frames.append((self.end, np.asarray(frame, dtype=np.float32)))
        self.end += len(frame)
        self._n += len(frame)
        while self._frames and self._n - len(self._frames[0][1]) >= self.keep:
            self._n -= len(self._frames.popleft()[1])

    def slice(self, a: int, b: int) -> np.ndarray:
        """Stream samples a..b (what is still kept of them)."""
        parts = [f[max(0, a - s): max(0, b - s)] for s, f in self._frames if s < b and s + len(f) > a]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


@dataclass
class _Held:
    """The request so far: speech the VAD closed at the short silence, not yet judged finished."""

    samples: np.ndarray
    start_s: float
    end_s: float
    next_ms: float
    """The silence at which it is judged next."""
    judgements: list[Judgement] = field(default_factory=list)
    by_silence: bool = False
    """No verdict to wait for (no model, or its judgement failed): ends at the fallback silence."""
    transcript: Future[str] | None = None
    """The transcript of ``samples`` being made (``on_pause``'s answer), for the words' second opinion."""
    confirming: bool = False
    """Judged finished: it ends once its transcript is known not to stop on an unfinished word."""
    doubted: bool = False
    """Judged unfinished: its transcript, once known, may still close it (``finished``)."""
    heard: Future[str] | None = None
    """The wake's segment: its transcript, which says whether it holds a request to judge."""


class TurnEnd(Segmenter):
    """A Segmenter whose requests end by the end-of-turn decision (see the module). ``vad``: the
    segmenter that closes speech at the short silence (default: silero with that silence); ``judge``:
    the model (default: Smart Turn v3, from the install); ``clock`` times the judgements;
    ``holds_request`` and ``pass_max_s``: the wake's segmenter (see the module)."""

    def __init__(self, cfg: Config, vad: Segmenter | None = None, judge: TurnJudge | None = None,
                 clock: Clock | None = None, holds_request: Callable[[str], bool] | None = None,
                 pass_max_s: float = 0.0) -> None:
        super().__init__(cfg)
        ep = cfg.hear.endpoint
        self.short_ms = float(ep.short_silence_ms)
        self.max_ms = float(max(ep.max_silence_ms, ep.short_silence_ms))
        self.recheck_ms = float(ep.recheck_ms)
        self.fallback_ms = float(cfg.hear.trailing_silence_ms)
        self.threshold = ep.threshold
        self.budget_ms = float(ep.budget_ms)
        self.words = ep.words
        self.holds_request = holds_request
        self.pass_max_s = pass_max_s
        self.vad = vad if vad is not None else Segmenter(cfg, trailing_silence_s=self.short_ms / 1000.0)
        self.judge: TurnJudge | None = judge or shared_smart_turn(turn_model_path(cfg), ep.threads)
        self.clock = clock or MonotonicClock()
        self.recent = RecentAudio((max(self.max_ms, self.fallback_ms) + 1000.0) / 1000.0)
        self._held: _Held | None = None
        self._now = 0  # stream samples seen
        self._warned = False
        self._faults = 0
        self._running: Future[float] | None = None  # the judgement on the model's thread

    # -- the Segmenter's calls ----------------------------------------------------------------

    def load(self) -> None:
        self.vad.load()
        if self.judge is None:
            return
        try:
            self.judge.load()
        except Exception as exc:  # missing, corrupt, another shape: requests end by silence
            self._give_up(f"{exc}" if isinstance(exc, RkvoiceError) else f"the end-of-turn model does not load ({exc})")

    @property
    def in_speech(self) -> bool:
        return self._held is not None or self.vad.in_speech

    def reset(self) -> None:
        self.vad.reset()
        self._held = None

    def restart(self, at_sample: int) -> None:
        self.vad.restart(at_sample)
        self.recent.restart(at_sample)
        self._now = at_sample
        self._held = None

    def accept(self, frame: np.ndarray) -> list[Segment]:
        self.recent.add(frame)
        self._now += len(frame)
        out = self._closed(self.vad.accept(frame))
        held = self._held
        if held is not None and (not self.vad.in_speech or (held.heard is not None and held.heard.done())):
            ended = self._wait(held)
            if ended is not None:
                out.append(ended)
        return out

    def flush(self) -> list[Segment]:
        """End of stream: what is held or open ends now."""
        out = self._closed(self.vad.flush(), judge=False)
        if self._held is not None:
            out.append(self._end(self._held, Verdict.END_OF_STREAM))
        return out

    # -- the decision -----------------------------------------------------------------------

    @property
    def now_s(self) -> float:
        return self._now / SAMPLE_RATE

    @property
    def waiting_ms(self) -> float:
        """How long the request held now has been silent (0: none is held, or its speech went on)."""
        held = self._held
        return 0.0 if held is None or self.vad.in_speech else self._silence_ms(held)

    def _silence_ms(self, held: _Held) -> float:
        return max(0.0, (self.now_s - held.end_s) * 1000.0)

    def _closed(self, segments: list[Segment], judge: bool = True) -> list[Segment]:
        """Speech the VAD closed: joins the held request; judged now (a cut one ends at once)."""
        out: list[Segment] = []
        for seg in segments:
            if self._held is not None and self._held.heard is not None:
                # the wake's segment, its transcript not known yet, and more speech after it: not joined
                # (the phrase said alone, then the request: heard from the phrase's end)
                out.append(self._end(self._held, Verdict.NO_REQUEST))
            fresh = self._held is None
            held = self._join(seg)
            if seg.truncated or held.end_s - held.start_s >= self.max_request_s:
                out.append(self._end(held, Verdict.CUT, truncated=True))
                continue
            self._held = held
            if not judge:
                continue
            made = self.on_pause(held.samples) if self.on_pause is not None else None  # made while it is judged
            held.transcript = made if self.words and isinstance(made, Future) else None
            if fresh and self.holds_request is not None:
                if isinstance(made, Future):
                    held.heard = made
                elif held.end_s - held.start_s <= self.pass_max_s:
                    out.append(self._end(held, Verdict.NO_REQUEST))
                    continue
            ended = self._wait(held)
            if ended is not None:
                out.append(ended)
        return out

    def _join(self, seg: Segment) -> _Held:
        held = self._held
        if held is None:
            return _Held(seg.samples, seg.start_s, seg.end_s, self.short_ms)
        a, b = round(held.end_s * SAMPLE_RATE), round(seg.start_s * SAMPLE_RATE)
        pause = self.recent.slice(a, b)
        if len(pause) < b - a:  # the pause is no longer kept (cannot happen within max_silence_ms): silence
            pause = np.zeros(b - a, dtype=np.float32)
        samples = np.concatenate([held.samples, pause, seg.samples[max(0, a - b):]])
        return _Held(samples, held.start_s, seg.end_s, self.short_ms, held.judgements, held.by_silence)

    def _wait(self, held: _Held) -> Segment | None:
        """The held request at the current silence: ended (a Segment) or still waited for (None)."""
        silence = self._silence_ms(held)
        if held.heard is not None:
            if not held.heard.done():
                return None if silence < self.max_ms else self._end(held, Verdict.NO_REQUEST)
            text = _text(held.heard)
            held.heard = None
            assert self.holds_request is not None
            if text is None or not self.holds_request(text):
                return self._end(held, Verdict.NO_REQUEST)
            if self.vad.in_speech:  # a request in it, and speech goes on: judged when that pauses
                return None
        if held.confirming:
            return self._confirm(held, silence)
        if held.by_silence or self.judge is None:
            held.by_silence = True
            return self._end(held, Verdict.SILENCE) if silence >= self.fallback_ms else None
        if silence >= self.max_ms:
            return self._end(held, Verdict.MAX_SILENCE)
        if (closed := self._words_close(held)) is not None:
            return closed
        if silence < held.next_ms:
            return None
        judged = self._judge(held, silence)
        if judged is Verdict.COMPLETE:
            if held.transcript is None:
                return self._end(held, Verdict.COMPLETE)
            held.confirming = True
            return self._confirm(held, silence)
        if judged is Verdict.WAIT:
            held.doubted = True
            if (closed := self._words_close(held)) is not None:
                return closed
            if not self.recheck_ms:  # once per pause
                held.next_ms = float("inf")
            while held.next_ms <= silence:  # on the grid short, short + recheck, ... (frames are coarser)
                held.next_ms += self.recheck_ms
            return None
        return self._wait(held)  # the judgement failed: by silence from now on

    def _confirm(self, held: _Held, silence: float) -> Segment | None:
        """Judged finished: ends once its transcript is known (None until then; the answer waits for
        the transcript anyway), unless the words stop where a request cannot end or name a topic alone;
        then it waits for the speech to go on, at most max_silence_ms. Words not known by
        hear.trailing_silence_ms are not waited for: the model's verdict stands (never later than mode
        silence)."""
        transcript = held.transcript
        if transcript is not None and not transcript.done():
            return None if silence < self.fallback_ms else self._end(held, Verdict.COMPLETE)
        text = _text(transcript) if transcript is not None else None
        if text is None:
            return self._end(held, Verdict.COMPLETE)
        word, verdict = unfinished(text), Verdict.UNFINISHED
        if word is None:
            word, verdict = topic(text), Verdict.TOPIC
        if word is None:
            return self._end(held, Verdict.COMPLETE)
        held.confirming, held.transcript, held.next_ms = False, None, float("inf")
        held.judgements.append(Judgement(round(silence, 1), None, 0.0, verdict))
        log.info("end of turn: %r stops on %r (%s); waiting for more (at most %.0f ms of silence)",
                 text, word, verdict, self.max_ms)
        return self._end(held, Verdict.MAX_SILENCE) if silence >= self.max_ms else None

    def _words_close(self, held: _Held) -> Segment | None:
        """Judged unfinished (``doubted``) and its transcript known: a question its words close ends now;
        else the model's verdict stands (the words are read once)."""
        if not held.doubted or held.transcript is None or not held.transcript.done():
            return None
        held.doubted = False
        text = _text(held.transcript)
        word = finished(text) if text is not None else None
        if word is None:
            return None
        log.info("end of turn: %r closes on %r", text, word)
        return self._end(held, Verdict.FINISHED)

    def _judge(self, held: _Held, silence: float) -> Verdict:
        a = round(held.end_s * SAMPLE_RATE)
        audio = np.concatenate([held.samples, self.recent.slice(a, self._now)])
        t0 = self.clock.now()
        try:
            p = self._probability(audio)
        except TimeoutError:
            return self._fault(held, silence, (self.clock.now() - t0) * 1000.0, None, Verdict.SLOW,
                               f"the end-of-turn model took over hear.endpoint.budget_ms ({self.budget_ms:.0f} ms)")
        except Exception as exc:
            return self._fault(held, silence, (self.clock.now() - t0) * 1000.0, None, Verdict.FAILED,
                               f"the end-of-turn model failed ({exc})")
        ms = (self.clock.now() - t0) * 1000.0
        if ms > self.budget_ms:
            return self._fault(held, silence, ms, p, Verdict.SLOW, f"the end-of-turn model took {ms:.0f} ms, "
                               f"over hear.endpoint.budget_ms ({self.budget_ms:.0f})")
        self._faults = 0
        verdict = Verdict.COMPLETE if p >= self.threshold else Verdict.WAIT
        held.judgements.append(Judgement(round(silence, 1), round(p, 4), round(ms, 1), verdict))
        log.info("end of turn: p=%.3f after %.0f ms of silence (%.0f ms): %s", p, silence, ms, verdict)
        return verdict

    def _probability(self, audio: np.ndarray) -> float:
        """The model's answer, on its own thread, waited for at most ``budget_ms`` (TimeoutError): a
        judgement left running is not waited for, and none starts while it runs."""
        judge = self.judge
        assert judge is not None
        if self._running is not None and not self._running.done():
            raise TimeoutError("the previous judgement is still running")
        answer: Future[float] = Future()

        def run() -> None:
            try:
                answer.set_result(judge.probability(audio))
            except BaseException as exc:  # handed to the hear thread, raised there
                answer.set_exception(exc)

        self._running = answer
        threading.Thread(target=run, name="rkvoice-turn-end", daemon=True).start()
        return answer.result(timeout=self.budget_ms / 1000.0)

    def _fault(self, held: _Held, silence: float, ms: float, p: float | None, verdict: Verdict, why: str) -> Verdict:
        held.judgements.append(Judgement(round(silence, 1), None if p is None else round(p, 4), round(ms, 1), verdict))
        held.by_silence = True
        self._faults += 1
        if self._faults >= MAX_FAULTS:
            self._give_up(f"{why}, {MAX_FAULTS} times in a row")
        elif not self._warned:
            self._warned = True
            log.warning("%s: this request ends after %.0f ms of silence (hear.trailing_silence_ms)", why, self.fallback_ms)
        else:
            log.info("%s: this request ends by silence", why)
        return verdict

    def _give_up(self, why: str) -> None:
        self.judge = None
        if not self._warned:
            self._warned = True
            log.warning("%s; requests end after %.0f ms of silence (hear.trailing_silence_ms), as with "
                        "hear.endpoint.mode: silence", why, self.fallback_ms)
        else:
            log.info("%s; the end-of-turn model is left out", why)

    def _end(self, held: _Held, verdict: Verdict, truncated: bool = False) -> Segment:
        self._held = None
        judged = list(held.judgements)
        if verdict is not Verdict.COMPLETE:
            judged.append(Judgement(round(self._silence_ms(held), 1), None, 0.0, verdict))
            say = log.debug if verdict is Verdict.NO_REQUEST else log.info
            say("end of turn after %.0f ms of silence: %s", self._silence_ms(held), verdict)
        return Segment(held.samples, held.start_s, held.end_s, self.now_s, truncated=truncated,
                       judgements=tuple(judged))


def _text(made: Future[str]) -> str | None:
    """A finished transcript's text; None when it was cancelled or failed."""
    return made.result() if not made.cancelled() and made.exception() is None else None


def request_end(cfg: Config, early_silence_s: float = 0.0, clock: Clock | None = None) -> Segmenter:
    """The segmenter that ends requests (unloaded): ``TurnEnd`` with ``hear.endpoint.mode: smart``,
    else a plain Segmenter after ``hear.trailing_silence_ms`` (with its early pauses, ``early_silence_s``)."""
    if cfg.hear.endpoint.mode == "smart":
        return TurnEnd(cfg, clock=clock)
    return Segmenter(cfg, early_silence_s=early_silence_s)

