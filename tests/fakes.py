"""Scripted fake engines of the right shapes (ASR, VAD segmenter, wake, TTS voice, LLM, microphone)
for running the product's one turn loop, and the daemon around it, without models.

Hearing fakes work in audio time (sample counts), like the real engines; the voice and the LLM
take time only on the injected clock, so timing is exact on a FakeClock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rkvoice.answer.llm.base import LlmEngine
from rkvoice.audio.sinks import NullPlayer
from rkvoice.clock import Clock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.hear.vad import SAMPLE_RATE, Segment
from rkvoice.hear.wake import WakeHit
from rkvoice.hear.whisper_asr import WhisperAsr
from rkvoice.pieces import Pieces
from rkvoice.speaker import Speaker
from rkvoice.timeline import Ev, Event, Timeline
from rkvoice.turn import Turn
from tests.support.clock import SleepingClock

if TYPE_CHECKING:
    from rkvoice.turn_loop import TurnLoop
    from tests.support.clock import ManualClock

FRAME = 512


class ScriptedAsr:
    """Segments carry their script index in their samples; the ASR reads it back."""

    name = "scripted"
    languages = ("zh",)

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.calls = 0

    def load(self) -> None:
        pass

    def transcribe(self, samples: np.ndarray) -> str:
        self.calls += 1
        return self.texts[int(samples[0])]


class ScriptedSegmenter:
    """Closes segment i when the stream reaches ``spans[i]`` end + silence (if it is listening then)."""

    def __init__(self, spans: list[tuple[float, float]] | None = None, silence_s: float = 0.5) -> None:
        self.spans = spans or []  # (start_s, end_s) of each utterance in stream time
        self.silence_s = silence_s
        self.samples = 0
        self.open_from = 0

    def load(self) -> None:
        pass

    def restart(self, at_sample: int) -> None:
        self.samples = at_sample
        self.open_from = at_sample

    @property
    def in_speech(self) -> bool:
        t = self.samples / SAMPLE_RATE
        return any(s <= t < e + self.silence_s and s * SAMPLE_RATE >= self.open_from for s, e in self.spans)

    def _closing(self, before: int, after: int) -> list[Segment]:
        out = []
        for i, (s, e) in enumerate(self.spans):
            decide = int((e + self.silence_s) * SAMPLE_RATE)
            if before < decide <= after and s * SAMPLE_RATE >= self.open_from:
                out.append(Segment(np.full(int((e - s) * SAMPLE_RATE), i, np.float32), s, e, decide / SAMPLE_RATE))
        return out

    def accept(self, frame: np.ndarray) -> list[Segment]:
        before = self.samples
        self.samples += len(frame)
        return self._closing(before, self.samples)

    def flush(self) -> list[Segment]:
        return self._closing(self.samples, 10**12)


class ScriptedWake:
    """Hits at fixed stream times (each once), with an optional request said in the same breath; the
    phrase ended ``end_lag_s`` before the hit (0: the detection lands on the phrase's end)."""

    def __init__(self, hits: list[tuple[float, str]] | None = None, end_lag_s: float = 0.5) -> None:
        self.hits = hits or []
        self.end_lag_s = end_lag_s
        self.samples = 0
        self.restarts = 0

    def load(self) -> None:
        pass

    def restart(self, at_sample: int) -> None:
        self.samples = at_sample
        self.restarts += 1

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        before = self.samples
        self.samples += len(frame)
        for t, request in self.hits:
            if before < t * SAMPLE_RATE <= self.samples:
                return WakeHit(at_s=t, end_s=t - self.end_lag_s, text="小智小智" + request, request=request)
        return None

    def flush(self) -> WakeHit | None:
        return None


class MarkerWake:
    """Wakes on marker frames from ScriptedMic: frame value k > 0 is "小智小智，<script[k-1]>" said
    in one breath; a script item that is an exception is raised by the wake engine (a model failure)."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.seen = 0
        self.samples = 0

    def load(self) -> None:
        pass

    def restart(self, at_sample: int) -> None:
        self.samples = at_sample

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        self.samples += len(frame)
        k = int(frame[0])
        if k <= 0:
            return None
        self.seen = k
        item = self.script[k - 1]
        if isinstance(item, BaseException):
            raise item
        at = self.samples / SAMPLE_RATE
        return WakeHit(at_s=at, end_s=at, text="小智小智" + item, request=item)

    def flush(self) -> WakeHit | None:
        return None


def frames(seconds: float) -> Iterator[np.ndarray]:
    for _ in range(int(seconds * SAMPLE_RATE) // FRAME):
        yield np.zeros(FRAME, np.float32)


class ListSource:
    """``seconds`` of silent frames, as fast as they are read."""

    sample_rate = SAMPLE_RATE

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.closed = False

    def frames(self) -> Iterator[np.ndarray]:
        yield from frames(self.seconds)

    def close(self) -> None:
        self.closed = True


class ScriptedMic:
    """A microphone for MarkerWake: yields marker frame k for script item k once ``ready(k - 1)``
    says the previous one was dealt with, and silence in between, until closed."""

    sample_rate = SAMPLE_RATE
    markers = True  # no sound: the daemon's echo filter leaves it raw

    def __init__(self, n_items: int, ready: Callable[[int], bool]) -> None:
        self.n_items = n_items
        self.ready = ready
        self._closed = threading.Event()
        self.next = 1

    def frames(self) -> Iterator[np.ndarray]:
        while not self._closed.is_set():
            if self.next <= self.n_items and self.ready(self.next - 1):
                frame = np.zeros(FRAME, np.float32)
                frame[0] = self.next
                self.next += 1
                yield frame
            elif not self._closed.wait(0.005):  # test fake: a real mic blocks on its device instead
                yield np.zeros(FRAME, np.float32)  # silence: audio time goes on

    def close(self) -> None:
        self._closed.set()


class FakeVoice:
    """A TtsEngine: ``char_s`` of tone per character, ``synth_s`` of clock time per call; records what
    it said; a text containing ``boom`` fails synthesis."""

    name = "fake"
    languages = ("zh", "en")

    def __init__(self, clock: Clock | None = None, synth_s: float = 0.0, boom: str = "BOOM",
                 rate: int = 16000, char_s: float = 0.06) -> None:
        self.clock = clock or SleepingClock()
        self.char_s = char_s
        self.synth_s = synth_s
        self.boom = boom
        self.rate = rate
        self.said: list[str] = []
        self.loaded = False
        self.before: Callable[[], None] | None = None
        """Called before taking clock time: SteppedSpeaker.wait_handed, so the player thread's marks land
        at the clock time they would have in real life."""

    @property
    def sample_rate(self) -> int:
        return self.rate

    def load(self) -> None:
        self.loaded = True

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        if self.boom in text:
            raise RkvoiceError("tts", "synthesis-failed", f"cannot synthesise {text!r}")
        if self.before is not None:
            self.before()
        self.clock.sleep(self.synth_s)
        self.said.append(text)
        n = int(self.char_s * self.rate * max(1, len(text)))
        return (0.2 * np.sin(np.arange(n, dtype=np.float32) * 0.05)).astype(np.float32), self.rate


class ScriptedLlm(LlmEngine):
    """An LlmEngine: answers with ``pieces`` (one delta each, ``delta_s`` of clock time apart); a
    question containing "hang" blocks like a wedged native call until ``release`` or ``abort()``.
    With ``until_aborted`` the answer stays open after its pieces (a model still generating) until
    ``abort()``, so a test's barge-in can never come after the answer ended, however the OS
    schedules the threads (10 s real-time safety net)."""

    name = "scripted"

    def __init__(self, pieces: list[str] | None = None, clock: Clock | None = None, delta_s: float = 0.0,
                 until_aborted: bool = False) -> None:
        self.pieces = pieces or ["好的，", "这是回答。"]
        self.clock = clock or SleepingClock()
        self.delta_s = delta_s
        self.until_aborted = until_aborted
        self.release = threading.Event()
        self.aborted = threading.Event()
        self.calls: list[str] = []

    def load(self) -> None:
        pass

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        self.aborted.clear()
        question = messages[-1]["content"]
        self.calls.append(question)
        if "hang" in question:
            self.release.wait(10)  # ignores abort, like a stuck prefill
            return
        for piece in self.pieces:
            if self.aborted.is_set():
                return
            self.clock.sleep(self.delta_s)
            yield piece
        if self.until_aborted:
            self.aborted.wait(10)

    def abort(self) -> None:
        self.aborted.set()

    def close(self) -> None:
        pass


class RuledSpeaker(Speaker):
    """The product's Speaker with its text rules replaced: ``normalize`` for speakable, ``split`` for
    split_for_tts (either may be left as it is)."""

    def __init__(self, *args: Any, normalize: Callable[[str], str] | None = None,
                 split: Callable[[str, int, int], list[str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rules = {k: v for k, v in (("normalize", normalize), ("split", split)) if v is not None}

    def _pieces(self, turn: Turn) -> Pieces:
        return Pieces(self.engine, self.cfg, turn, out_rate=self.player.rate, clock=self.clock, **self._rules)


class SteppedSpeaker(RuledSpeaker):
    """The product's Speaker (with RuledSpeaker's rules) with the waits a scripted engine on a controlled clock calls before it
    "takes time", so the speaker's marks land at the clock time they would have in real life."""

    def wait_handed(self) -> None:
        """Block until every chunk queued so far has been handed to the player."""
        _until(lambda: self.backlog.audio == 0)

    def wait_synthesised(self) -> None:
        """Block until every piece said so far (of every turn) has been synthesised and handed to
        the player (for callers other than the TTS worker: a scripted LLM)."""
        _until(lambda: (b := self.backlog).text == b.synthesising == b.audio == 0)


def _until(done: Callable[[], bool], limit_s: float = 10.0) -> None:
    """Poll ``done`` in real time (the speaker's threads move on their own; the clock is the test's)."""
    end = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > end:
            raise TimeoutError(f"still waiting after {limit_s:g} s")
        time.sleep(0.0005)


class SeenTimeline(Timeline):
    """A Timeline that also hands each new mark to ``on_event`` (a test waits on marks through it)."""

    def __init__(self, clock: Clock, on_event: Callable[[Event], None]) -> None:
        super().__init__(clock)
        self._on_event = on_event

    def mark(self, name: Ev, **data: Any) -> Event:
        event = super().mark(name, **data)
        self._on_event(event)
        return event


class RecordingPlayer(NullPlayer):
    """A NullPlayer that logs what played: ``segments`` lists (start, end) clock times of audio that was
    (or is being) heard, ``clear()`` cutting the current one at its moment (what follows is a new one,
    even at that same moment of a controlled clock); ``samples``, ``blocks``."""

    def __init__(self, cfg: Config, clock: Clock | None = None, max_ahead_s: float | None = None) -> None:
        super().__init__(cfg, clock, max_ahead_s)
        self.segments: list[list[float]] = []
        self.samples = 0
        self.blocks = 0
        self._cut = False

    def write(self, block: np.ndarray) -> None:
        if not self._pace():
            return  # cleared while waiting for room: dropped, as NullPlayer does
        start, end = self._account(len(block))
        with self._cond:
            self.samples += len(block)
            self.blocks += 1
            if self.segments and not self._cut and abs(self.segments[-1][1] - start) < 1e-9:
                self.segments[-1][1] = end
            else:
                self.segments.append([start, end])
            self._cut = False

    def clear(self) -> None:
        with self._cond:
            now = self._clock.now()
            for seg in self.segments:
                seg[1] = min(seg[1], max(seg[0], now))
            self._cut = True
        super().clear()


CUE_THREAD = "rkvoice-cue"  # rkvoice.turn_loop.player_cue's thread


@dataclass
class Stillness:
    """Whether a live TurnLoop, its Speaker and player are still on a ManualClock (none of them can act
    before the clock moves or a frame comes), for a microphone that moves the clock only then
    (tests.support.feed.SteppedSource): every message of the loop's inbox handled whole (the loop's ``busy``
    goes through ``busy`` here, which counts them: ``delivered()`` frames and each turn's end), each open
    turn's answer said (Ev.ANSWER marked, as rkvoice.answer.respond does) and synthesised, the player
    thread handing nothing (or waiting on the clock), no wake cue playing (cue threads started before
    this was made, other tests' ones, do not count). The parts are looked up at each check (a daemon
    makes them late); without a speaker (a responder that speaks nothing) an open turn is still once
    it has marked Ev.ANSWER. Thread-safe enough for one settling microphone."""

    clock: ManualClock
    loop: Callable[[], TurnLoop]
    delivered: Callable[[], int]
    speaker: Callable[[], Speaker | None] = lambda: None
    player: Callable[[], RecordingPlayer | None] = lambda: None
    limit_s: float = 120.0
    """Real seconds the threads may take to go still after a frame (a Whisper decode on a loaded machine)."""
    handled: int = 0
    stuck: str | None = None
    """What never went still within ``limit_s`` (None: all always did)."""
    old_cues: set[int | None] = field(
        default_factory=lambda: {t.ident for t in threading.enumerate() if t.name == CUE_THREAD})

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        """The TurnLoop's ``busy``: counts the messages of its inbox handled whole ("hear")."""
        yield
        if what == "hear":
            self.handled += 1

    def cue_playing(self) -> bool:
        return any(t.name == CUE_THREAD and t.ident not in self.old_cues for t in threading.enumerate())

    def pending(self) -> str | None:
        """What can still act before the clock moves or a frame comes (None: nothing)."""
        turns, speaker = list(self.loop().turns), self.speaker()
        if self.handled != self.delivered() + sum(t.done.is_set() for t in turns):
            return "the turn loop (a frame or a turn's end not handled yet)"
        for turn in turns:  # each open turn has said its whole answer and waits for it to play out
            if turn.done.is_set():
                continue
            try:
                played = speaker is not None and speaker.wait(turn, 0)
            except RkvoiceError:  # not (yet) with the speaker
                played = True
            if played or not turn.timeline.find(Ev.ANSWER):
                return f"turn {turn.id}"
        if speaker is None:
            return None
        if speaker.backlog.synthesis_due:  # else the speaker's TTS worker waits for text
            return "synthesis"
        if self.player_working():
            return "the player thread"
        if self.cue_playing():
            return "the wake cue"
        return None

    def player_working(self) -> bool:
        """Whether the speaker's player thread hands audio over (or its wait for audio to play out is over)."""
        speaker = self.speaker()
        return bool(speaker is not None and speaker.backlog.audio and not self.clock.blocked("rkvoice-player"))

    def progress(self) -> tuple[int, ...]:
        turns = list(self.loop().turns)
        return (self.handled, sum(t.done.is_set() for t in turns), len(self.loop().wakes),
                sum(len(t.timeline.events) for t in turns), getattr(self.player(), "blocks", 0))

    def settle(self, closed: threading.Event) -> bool:
        """Block until still: nothing pending, twice, with no progress in between (a thread can hand work
        on to one already looked at), or ``closed`` is set. False (``stuck`` says what) after ``limit_s``."""
        end = time.monotonic() + self.limit_s
        while not closed.is_set():
            before = self.progress()
            what = self.pending() or self.pending()
            if what is None and self.progress() == before:
                return True
            if time.monotonic() > end:
                self.stuck = what or "progress"
                return False
            time.sleep(0.0005)
        return True


def heard_until(player: RecordingPlayer) -> float | None:
    """Where the player's last audio segment ends: what a listener heard until (cut by clear())."""
    with player._cond:
        return player.segments[-1][1] if player.segments else None


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Test helper: poll ``cond`` in real time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


class CountingWhisper(WhisperAsr):
    """The real Whisper, counting its encoder runs (``encodes``; the kept output reused is not one);
    ``forget_encoding`` drops the kept output, so the next decode encodes afresh."""

    encodes = 0

    def _encode_once(self, encode: Any, features: np.ndarray) -> Any:
        def counted(f: np.ndarray) -> Any:
            self.encodes += 1
            return encode(f)

        return super()._encode_once(counted, features)

    def forget_encoding(self) -> None:
        self._encoded = None
