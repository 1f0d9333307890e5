"""Speech segmentation with silero VAD (sherpa-onnx ``VoiceActivityDetector``), in audio time.

Requests end through rkvoice.hear.turn_end.request_end (the end-of-turn decision, itself a Segmenter).

The segmenter counts samples, never reads a clock: ``Segment.end_s`` is where speech stopped in the
stream, ``Segment.decided_s`` where the segmenter knew it (after the trailing silence, or at the
maximum request length). Tests feed audio and get exact times.

With ``early_silence_s``/``early_max_s`` (the asr-match wake's) a second silero VAD with the short
silence runs beside the main one: speech of at most ``early_max_s`` it ends is returned at once as an
``early`` segment; the main segment is dropped when it ends where the early one did. Longer speech
it ends is a pause (``on_pause``: rkvoice.hear.ahead starts its transcript).
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
WINDOW = 512  # silero's window at 16 kHz
SAME_END = 2 * WINDOW  # a main segment ending this close after an early one holds no more speech


class Verdict(enum.StrEnum):
    """How the end-of-turn decision (rkvoice.hear.turn_end) saw a request at one moment."""

    COMPLETE = "complete"  # the model judged it finished: it ends now
    WAIT = "wait"  # the model judged it unfinished: keep listening
    MAX_SILENCE = "max-silence"  # judged unfinished, but silent for hear.endpoint.max_silence_ms
    SILENCE = "silence"  # ended by hear.trailing_silence_ms (no model, or its judgement failed)
    SLOW = "slow"  # the judgement took longer than hear.endpoint.budget_ms
    FAILED = "failed"  # the judgement raised
    UNFINISHED = "unfinished words"  # judged finished, but its transcript stops on a word that needs more
    FINISHED = "finished words"  # judged unfinished, but its transcript closes a question: it ends now
    TOPIC = "topic"  # judged finished, but its transcript names a topic and nothing about it: keep listening
    CUT = "cut"  # the request reached hear.max_request_s
    NO_REQUEST = "no request"  # the wake's segment holds no request after the phrase: it ends at its pause
    END_OF_STREAM = "end-of-stream"


@dataclass(frozen=True)
class Judgement:
    """One look at a request: the silence after it so far, the model's probability that it is
    finished (None when no model answered), how long the model took, and the verdict."""

    silence_ms: float
    probability: float | None
    ms: float
    verdict: Verdict

    def to_dict(self) -> dict[str, object]:
        return {"silence_ms": self.silence_ms, "p": self.probability, "ms": self.ms, "verdict": str(self.verdict)}


@dataclass(frozen=True)
class Segment:
    samples: np.ndarray
    """The speech, 16 kHz mono float32."""
    start_s: float
    """Audio time where speech started."""
    end_s: float
    """Audio time where speech ended (the latency clock starts here)."""
    decided_s: float
    """Audio time when the segmenter closed the segment (end + trailing silence, or the cut)."""
    truncated: bool = False
    """True when the segment was cut at the maximum request length."""
    early: bool = False
    """True when closed after the short end-of-phrase silence (the speech may still go on)."""
    judgements: tuple[Judgement, ...] = ()
    """The end-of-turn decision's looks at it, the last one ending it (empty: ended by the VAD alone)."""

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def on_grid(trailing_s: float, silence_s: float) -> float:
    """The longest silence up to ``silence_s`` that ends speech on the same sample as ``trailing_s``.

    sherpa-onnx's silero VAD ends speech on a window boundary and cuts the segment ``min_silence``
    samples before it: silences that differ by whole windows cut at the same sample, so an early
    segment holds the audio the main VAD would return (0.15 s against 0.5 s cut 2 ms apart, enough to
    move a phrase score across the threshold on a noisy clip)."""
    trailing = round(trailing_s * SAMPLE_RATE)
    steps = math.ceil((trailing - silence_s * SAMPLE_RATE) / WINDOW)
    return max(0, trailing - steps * WINDOW) / SAMPLE_RATE


def vad_model_path(cfg: Config) -> Path:
    """The profile's copy of silero: models/<profile>/vad/silero_vad.onnx (both profiles install one)."""
    return cfg.models.path / cfg.models.profile / "vad" / "silero_vad.onnx"


def silero_vad(cfg: Config, min_silence_s: float, max_s: float) -> Any:
    """A sherpa-onnx silero VAD (the configured threshold and minimum speech) that ends speech after
    ``min_silence_s`` of silence and cuts it at ``max_s`` (its buffer holds that much audio)."""
    import sherpa_onnx

    path = vad_model_path(cfg)
    if not path.is_file():
        raise RkvoiceError(Stage.VAD, "missing-model", f"silero VAD model {path} is missing; run ./install.sh")
    h = cfg.hear
    silero = sherpa_onnx.SileroVadModelConfig(
        model=str(path),
        threshold=h.vad_threshold,
        min_silence_duration=min_silence_s,
        min_speech_duration=h.min_speech_ms / 1000.0,
        window_size=WINDOW,
        max_speech_duration=max_s,
    )
    config = sherpa_onnx.VadModelConfig(silero_vad=silero, sample_rate=SAMPLE_RATE, num_threads=1)
    return sherpa_onnx.VoiceActivityDetector(config, buffer_size_in_seconds=max_s)


class Segmenter:
    """Turns a stream of frames into speech segments. ``load()`` builds the VAD."""

    def __init__(self, cfg: Config, early_silence_s: float = 0.0, early_max_s: float = 0.0,
                 trailing_silence_s: float | None = None) -> None:
        self.cfg = cfg
        h = cfg.hear
        self.trailing_silence_s = h.trailing_silence_ms / 1000.0 if trailing_silence_s is None else trailing_silence_s
        # early close of phrase-length speech (early_max_s > 0), and pauses (on_pause): only with a
        # silence shorter than the trailing one
        self.early_silence_s = self.early_max_s = 0.0
        if 0 < early_silence_s < self.trailing_silence_s:
            self.early_silence_s = on_grid(self.trailing_silence_s, early_silence_s)
            self.early_max_s = early_max_s if self.early_silence_s > 0 else 0.0
        self.on_pause: Callable[[np.ndarray], object] | None = None
        """Told the speech so far at each pause (rkvoice.hear.ahead starts its transcript; the Future it
        gives back is the end-of-turn decision's second opinion)."""
        """Called with the speech so far when it paused for ``early_silence_s`` without closing
        (longer than ``early_max_s``); the segment that closes on it holds the same samples."""
        self._early: Any = None  # the short-silence VAD once loaded (early close on)
        self._early_end: int | None = None  # stream sample where the last early segment ended
        self.max_request_s = h.max_request_s
        # the VAD reports speech min_speech_ms after it started: count the request from its start
        self._detect_lag_s = h.min_speech_ms / 1000.0
        self._vad: Any = None  # sherpa_onnx.VoiceActivityDetector once loaded
        self._pending = np.zeros(0, dtype=np.float32)
        self._fed = 0  # samples given to the VAD
        self._speech_from: int | None = None  # sample index where the VAD first reported speech
        self._base = 0  # sample index of the VAD's own zero (it restarts counting on reset)

    def load(self) -> None:
        self._vad = silero_vad(self.cfg, self.trailing_silence_s, self.cfg.hear.max_request_s + 30.0)
        if self.early_silence_s:
            # a request's length (most of a VAD's memory: ~14 MB at 42 s, ~0.3 MB at 4.5 s): longer
            # speech overflows it, which sherpa-onnx fixes by copying and says on stderr each time
            self._early = silero_vad(self.cfg, self.early_silence_s, self.cfg.hear.max_request_s + 2.0)

    @property
    def in_speech(self) -> bool:
        return self._speech_from is not None

    def reset(self) -> None:
        """Forget any speech in progress (keeps the audio clock running)."""
        if self._vad is not None:
            self._vad.reset()
        if self._early is not None:
            self._early.reset()
        self._base = self._fed
        self._speech_from = None
        self._early_end = None
        # keep _pending: those samples are still "now"

    def restart(self, at_sample: int) -> None:
        """Forget everything; the next frame is stream sample ``at_sample`` (audio time continues)."""
        self._pending = np.zeros(0, dtype=np.float32)
        self._fed = at_sample
        self.reset()

    def accept(self, frame: np.ndarray) -> list[Segment]:
        """Feed one frame; return the segments that closed in it."""
        if self._vad is None:
            raise RuntimeError("Segmenter.load() was not called")
        self._pending = np.concatenate([self._pending, np.asarray(frame, dtype=np.float32)])
        out: list[Segment] = []
        while len(self._pending) >= WINDOW:
            window, self._pending = self._pending[:WINDOW], self._pending[WINDOW:]
            self._vad.accept_waveform(window)
            if self._early is not None:
                self._early.accept_waveform(window)
            self._fed += WINDOW
            out.extend(self._collect())
            if self._early is not None:
                out.extend(self._collect_early())
        return out

    def flush(self) -> list[Segment]:
        """End of stream: close any open segment."""
        if self._vad is None:
            return []
        if len(self._pending):
            self._vad.accept_waveform(np.pad(self._pending, (0, WINDOW - len(self._pending))))
            self._fed += len(self._pending)
            self._pending = self._pending[:0]
        self._vad.flush()
        out = self._collect()
        self._speech_from = None
        if self._early is not None:  # the main VAD's segments are the ones that count at the end
            self._early.reset()
        self._early_end = None
        return out

    def _collect(self) -> list[Segment]:
        vad = self._vad
        out: list[Segment] = []
        decided = self._fed / SAMPLE_RATE
        while not vad.empty():
            seg = vad.front
            n = len(seg.samples)
            if self._early_end is not None and self._base + seg.start + n <= self._early_end + SAME_END:
                vad.pop()  # decided already, at the short silence, on the same speech
                continue
            samples = np.array(seg.samples, dtype=np.float32)
            start = (self._base + seg.start) / SAMPLE_RATE
            out.append(Segment(samples, start, start + n / SAMPLE_RATE, decided))
            vad.pop()
        if vad.is_speech_detected():
            if self._speech_from is None:
                self._speech_from = self._fed
            elif (self._fed - self._speech_from) / SAMPLE_RATE >= self.max_request_s - self._detect_lag_s:
                # an over-long request: close it at the current position
                samples = np.array(vad.current_segment.samples, dtype=np.float32)
                log.info("request reached the %.1f s limit; cutting it", self.max_request_s)
                self.reset()
                out.append(Segment(samples, decided - len(samples) / SAMPLE_RATE, decided, decided, truncated=True))
        else:
            self._speech_from = None
        return out

    def _collect_early(self) -> list[Segment]:
        """Pieces the short-silence VAD ended: the speech so far, when it is of phrase length."""
        early, vad = self._early, self._vad
        out: list[Segment] = []
        while not early.empty():
            piece = early.front
            end = self._base + piece.start + len(piece.samples)
            early.pop()
            if vad.is_speech_detected():  # the main VAD's open segment: the speech from its start
                cur = vad.current_segment
                begin = self._base + cur.start
                samples = np.array(cur.samples, dtype=np.float32)[: max(0, end - begin)]
            else:
                begin = self._base + piece.start
                samples = np.array(piece.samples, dtype=np.float32)
            if len(samples) > self.early_max_s * SAMPLE_RATE:
                if self.on_pause is not None:
                    self.on_pause(samples)
                continue
            if len(samples) == 0:
                continue
            self._early_end = end
            out.append(Segment(samples, begin / SAMPLE_RATE, end / SAMPLE_RATE, self._fed / SAMPLE_RATE, early=True))
        return out
