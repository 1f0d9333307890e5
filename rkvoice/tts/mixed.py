"""One voice per script: Chinese spans to a Chinese voice, Latin words to an English voice.

    engine = MixedTts(FastSpeech2Tts(cfg), {"en": VitsTts(cfg, "piper-joe")})
    engine.load()                       # loads the primary voice only
    samples, rate = engine.generate("我每天用Python写代码。")

Text in the primary voice's language alone goes straight to the primary voice (the other is not
loaded), also when streamed: ``stream()`` gives the primary voice's own parts for such text and the
routed whole for any other, so a streaming primary (the Piper voice) never reads another language's
spans itself. Otherwise ``rkvoice.text.script_spans`` cuts it into spans, each synthesised by the voice
for its language (acronyms spelled: USB -> "you ess bee"); at every join the silence is trimmed to
a short faded pre/post-roll and a pause of known length put in. The other voice's spans are
resampled to the primary rate, brought to the main voice's speech level (never past PEAK) and
their pitch moved toward the main voice's (``pitch_ratio``): the main voice is the one for the
text's own language (``preload``), else the primary. ``rkvoice.tts.registry.with_other_language``
builds it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from rkvoice.audio.post import resample, window_rms
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.tts.base import TtsEngine

log = logging.getLogger(__name__)

LANGS = ("zh", "en")
PAUSE_MS = {"word": 40.0, "clause": 200.0, "sentence": 320.0}
"""Silence put between two spans, by the punctuation at the join (``Span.pause_after``)."""
KEEP_MS = 40.0
"""Pre/post-roll kept before the first and after the last voiced window at a join: a word's
opening plosive (the p of Python) is quiet and comes before its first loud window."""
FADE_MS = 6.0
"""Raised-cosine fade at a trimmed edge, so a cut through low-level noise does not click."""
WINDOW_MS = 10.0
QUIET = 0.02
"""A window is silent below this fraction of the span's loudest window (-34 dB)."""
PEAK = 0.95
GAIN_RANGE = (0.25, 4.0)
LEVEL_TEXT = {"zh": "今天天气不错，我们出去走走吧。", "en": "The weather is nice today."}
"""Reference sentences for a voice's speech level and pitch."""
MAX_PITCH_SHIFT = 1.3
"""Most a span's pitch is moved toward the main voice's (a ratio, either way). The shift is a
resampling, so the formants move with it: a male English voice said up a full octave to meet a
female Chinese one sounds like a toy. Whisper, hearing ten mixed sentences (bench/mixed_tts.py
--set), lost most English words and the Chinese after them when the voice changed from Baker's
~260 Hz to Joe's ~110 Hz mid-sentence (CER 0.32); moved x1.3 it heard them (0.13); x1.4 0.15,
x1.5 0.24, x1.7 0.40 (docs/decisions/0008-english-spans.md)."""
MIN_PITCH_SHIFT = 1.05
"""Voices closer than this are left as they are."""


def _voiced(x: np.ndarray, rate: int) -> tuple[int, np.ndarray]:
    """(window length, each window's RMS where it is voiced, within QUIET of the loudest, else 0)."""
    n = max(1, round(rate * WINDOW_MS / 1000.0))
    w = window_rms(x, n)
    top = float(w.max()) if len(w) else 0.0
    return n, np.where(w >= QUIET * top, w, 0.0) if top > 1e-6 else np.zeros_like(w)


def speech_rms(x: np.ndarray, rate: int) -> float:
    """RMS over the voiced windows; 0.0 for silence."""
    w = _voiced(x, rate)[1]
    return float(np.sqrt(np.mean(w[w > 0] ** 2))) if w.any() else 0.0


def speech_f0(x: np.ndarray, rate: int) -> float:
    """Median fundamental frequency (Hz) of the voiced 40 ms frames (autocorrelation, 70-400 Hz);
    0.0 when nothing is voiced."""
    x = np.asarray(x, dtype=np.float64)
    n = round(0.04 * rate)
    if len(x) < n:
        return 0.0
    frames = np.lib.stride_tricks.sliding_window_view(x, n)[:: n // 2] * np.hanning(n)
    loud = frames[np.sqrt((frames**2).mean(axis=1)) >= 0.2 * speech_rms(x, rate)]
    lo, hi = int(rate / 400), int(rate / 70)
    found = []
    for frame in loud:
        ac = np.correlate(frame, frame, "full")[n - 1 :]
        lag = lo + int(np.argmax(ac[lo:hi]))
        if ac[0] > 0 and ac[lag] > 0.5 * ac[0]:  # periodic enough to be voiced
            found.append(rate / lag)
    return float(np.median(found)) if found else 0.0


def pitch_ratio(main_f0: float, other_f0: float) -> float:
    """How much to raise (>1) or lower (<1) a voice at ``other_f0`` toward ``main_f0``: their ratio,
    capped at MAX_PITCH_SHIFT either way; 1.0 when they are within MIN_PITCH_SHIFT or unknown."""
    if main_f0 <= 0.0 or other_f0 <= 0.0:
        return 1.0
    ratio = main_f0 / other_f0
    if 1.0 / MIN_PITCH_SHIFT < ratio < MIN_PITCH_SHIFT:
        return 1.0
    return float(min(max(ratio, 1.0 / MAX_PITCH_SHIFT), MAX_PITCH_SHIFT))


def trim_joins(x: np.ndarray, rate: int, head: bool, tail: bool) -> np.ndarray:
    """Cut the silence at the start (``head``) and/or end (``tail``) to KEEP_MS, fading the cut edges.
    All-silent input gives an empty array."""
    x = np.asarray(x, dtype=np.float32)
    if len(x) == 0 or not (head or tail):
        return x
    n, w = _voiced(x, rate)
    voiced = np.flatnonzero(w)
    if len(voiced) == 0:
        return x[:0]
    keep = round(rate * KEEP_MS / 1000.0)
    start = max(0, int(voiced[0]) * n - keep) if head else 0
    end = min(len(x), (int(voiced[-1]) + 1) * n + keep) if tail else len(x)
    y = np.array(x[start:end], dtype=np.float32, copy=True)
    f = min(round(rate * FADE_MS / 1000.0), len(y) // 2)
    if f > 0:
        ramp = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, f + 2)[1:-1])).astype(np.float32)
        if head and start > 0:
            y[:f] *= ramp
        if tail and end < len(x):
            y[-f:] *= ramp[::-1]
    return y


class MixedTts:
    """A primary voice for one language and, loaded when first needed, voices for the others."""

    def __init__(self, primary: TtsEngine, others: dict[str, TtsEngine], preload: str | None = None) -> None:
        """``preload``: a language the text will mostly be in that the primary does not speak (``--tts
        vits`` on Chinese): its voice and the primary's reference level are made in ``load()``, not
        in the first piece's synthesis."""
        self.primary = primary
        self.preload = preload if preload in others and preload not in primary.languages else None
        self.primary_lang = primary.languages[0]
        self.voices: dict[str, TtsEngine] = {lang: e for lang, e in others.items() if lang != self.primary_lang}
        for lang in primary.languages:
            self.voices[lang] = primary
        self.name = primary.name
        """The primary voice's name: the engine that was asked for (``voices`` lists all)."""
        self.languages = tuple(lang for lang in LANGS if lang in self.voices)
        self._loaded: set[int] = set()
        self._refs: dict[int, tuple[float, float]] = {}  # each voice's (level, pitch) on LEVEL_TEXT, by id()

    # What the primary voice says of itself, named one by one: a capability passed through
    # wholesale (as __getattr__ did) would bypass the routing, as the Piper voice's stream() did.

    @property
    def voice(self) -> Any:
        """The primary VITS voice (rkvoice.tts.vits.VitsVoice), None for other engines."""
        return getattr(self.primary, "voice", None)

    @property
    def piece_chars(self) -> tuple[int, int] | None:
        """(first, later) piece lengths of the voice that will say most of the text, if it has its own:
        the primary's, or the ``preload`` language's voice's unless it streams (here its spans are
        made whole, and a streaming voice's sizes count on streaming)."""
        main = self.voices[self.preload] if self.preload is not None else self.primary
        if main is not self.primary and getattr(main, "streaming", False):
            return None
        own: tuple[int, int] | None = getattr(main, "piece_chars", None)
        return own

    @property
    def num_speakers(self) -> int:
        """The primary voice's speakers (``sid`` picks one of them)."""
        return int(getattr(self.primary, "num_speakers", 1))

    @property
    def streaming(self) -> bool:
        """``stream()`` works: the primary voice streams."""
        return bool(getattr(self.primary, "streaming", False))

    def close(self) -> None:
        """Close every loaded voice that can be closed."""
        for engine in {id(e): e for e in self.voices.values()}.values():
            if id(engine) in self._loaded and callable(getattr(engine, "close", None)):
                engine.close()  # type: ignore[attr-defined]
        self._loaded.clear()

    def load(self) -> None:
        """Load the primary voice (and the ``preload`` language's); the others load when a span first
        needs them."""
        self.primary.load()
        self._loaded.add(id(self.primary))
        if self.preload is not None:
            self._voice(self.voices[self.preload])
            self._reference_level(0)
            self._pitch_shift(self.primary)

    @property
    def sample_rate(self) -> int:
        return self.primary.sample_rate

    def needs_other(self, text: str) -> bool:
        """Whether ``text`` has a span for a voice other than the primary."""
        from rkvoice.text.script_spans import HAN, has_latin

        other = next((lang for lang in self.voices if lang != self.primary_lang), None)
        return other is not None and (has_latin(text) if other == "en" else bool(HAN.search(text)))

    def stream(self, text: str, sid: int = 0, speed: float = 1.0) -> Iterator[tuple[np.ndarray, bool]]:
        """``text``'s audio in parts, each with "is it the last": the primary voice's own stream when
        it speaks the text alone, else the routed text whole (``generate``) as one part."""
        if id(self.primary) not in self._loaded:
            raise RkvoiceError(Stage.TTS, "not-loaded", f"{self.name}: stream() called before load()")
        if not self.needs_other(text):
            stream = getattr(self.primary, "stream", None)
            if stream is None or not self.streaming:
                raise RkvoiceError(Stage.TTS, "not-streaming", f"{self.name}: the primary voice does not stream")
            yield from stream(text, sid=sid, speed=speed)
            return
        samples, _ = self.generate(text, sid=sid, speed=speed)
        yield samples, True

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        from rkvoice.text.script_spans import english_reading, script_spans

        if id(self.primary) not in self._loaded:
            raise RkvoiceError(Stage.TTS, "not-loaded", f"{self.name}: generate() called before load()")
        if not self.needs_other(text):
            return self.primary.generate(text, sid=sid, speed=speed)
        spans = script_spans(text)
        rate = self.sample_rate
        parts: list[np.ndarray] = []
        pause = ""
        target = 0.0
        audio_by_span: list[tuple[np.ndarray, bool]] = []
        for span in spans:
            engine = self.voices.get(span.lang, self.primary)
            said = english_reading(span.text) if span.lang == "en" else span.text
            own = engine is self.primary
            shift = self._pitch_shift(self._voice(engine))
            # said slower by ``shift`` and played back faster by it: the pitch moves, the length stays
            samples, src = engine.generate(said, sid=sid if own else 0, speed=speed / shift)
            samples = resample(np.asarray(samples, dtype=np.float32).reshape(-1), round(src * shift), rate)
            if own:
                target = target or speech_rms(samples, rate)
            audio_by_span.append((samples, own))
        if not target:
            target = self._reference_level(sid)
        last = len(spans) - 1
        for i, (span, (samples, own)) in enumerate(zip(spans, audio_by_span)):
            samples = trim_joins(samples, rate, head=i > 0, tail=i < last)
            if not own:
                samples = self._match_level(samples, rate, target)
            if len(samples) == 0:
                continue
            if parts and pause:
                parts.append(np.zeros(round(rate * PAUSE_MS[pause] / 1000.0), dtype=np.float32))
            parts.append(samples)
            pause = span.pause_after or "word"
        if not parts:
            return np.zeros(0, dtype=np.float32), rate
        return np.clip(np.concatenate(parts), -1.0, 1.0).astype(np.float32, copy=False), rate

    # --- internals --------------------------------------------------------------------------

    def _voice(self, engine: TtsEngine) -> TtsEngine:
        if id(engine) not in self._loaded:
            log.info("loading %s for a span the %s voice does not speak", engine.name, self.primary.name)
            engine.load()
            self._loaded.add(id(engine))
        return engine

    def _main_voice(self) -> TtsEngine:
        return self.voices[self.preload] if self.preload is not None else self.primary

    def _reference(self, engine: TtsEngine, sid: int = 0) -> tuple[float, float]:
        """(speech RMS, pitch in Hz) of ``engine`` saying its LEVEL_TEXT: one synthesis per voice, made
        when first needed (``sid`` counts for the primary voice's first measurement only)."""
        if id(engine) not in self._refs:
            lang = next(lang for lang in LANGS if self.voices.get(lang) is engine)
            samples, rate = engine.generate(LEVEL_TEXT[lang], sid=sid if engine is self.primary else 0)
            x = np.asarray(samples, dtype=np.float32)
            self._refs[id(engine)] = (speech_rms(x, rate), speech_f0(x, rate))
            log.debug("%s: speech level %.3f, pitch %.0f Hz", engine.name, *self._refs[id(engine)])
        return self._refs[id(engine)]

    def _pitch_shift(self, engine: TtsEngine) -> float:
        """The ratio ``engine``'s spans are moved by toward the main voice's pitch (1.0 for the main
        voice itself)."""
        main = self._main_voice()
        if engine is main:
            return 1.0
        return pitch_ratio(self._reference(self._voice(main))[1], self._reference(engine)[1])

    def _reference_level(self, sid: int) -> float:
        return self._reference(self.primary, sid)[0]

    @staticmethod
    def _match_level(samples: np.ndarray, rate: int, target: float) -> np.ndarray:
        level = speech_rms(samples, rate)
        if level <= 0.0 or target <= 0.0:
            return samples
        gain = min(max(target / level, GAIN_RANGE[0]), GAIN_RANGE[1])
        peak = float(np.abs(samples).max()) * gain
        if peak > PEAK:
            gain *= PEAK / peak
        return (samples * gain).astype(np.float32)
