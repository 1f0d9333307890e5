"""Whisper base through faster-whisper (CTranslate2 int8) on the CPU: the portable ASR.

``transcribe`` keeps faster-whisper's no-speech filter (breath and room noise come back empty);
``transcribe_primed`` serves the wake check on a segment the VAD called speech, with the phrase as
hotwords and no filter (it dropped a quiet "小智小智": no-speech 0.75 at -20 dB). The encoder (a 30 s
window: most of a short decode's time) output of the last audio is kept, so the wake check's second
look at the same segment costs decoder steps only.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.home_names import CACHE_FILE, read_cache

log = logging.getLogger(__name__)

# Without a simplified-Chinese prompt Whisper often answers in traditional characters.
PROMPT = "以下是普通话的句子。"
MAX_BIAS_CHARS = 120
"""Most characters of names given as hotwords (faster-whisper keeps under half the 448-token context
for them; each name costs one to three tokens a character)."""
BIAS_CHECK_S = 5.0
"""How often the home's names file is looked at (one stat) for new names."""
_HAN = re.compile(r"[\u3400-\u9fff]")
FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.json")
QUIET_PAD_S = 0.15
"""Quiet audio kept before the first and after the last loud sample (``settle``). Chosen on the
portable voices at gains 0.9/1.0/1.1: the ten mixed sentences' mean CER 0.122 (FastSpeech2) and 0.106
(VITS) at 0.15 s, 0.136/0.135 at 0.1, 0.134/0.140 at 0.25, 0.171/0.157 at 0.5; 40 Chinese requests
and answers 0.134 at 0.1, 0.118 at 0.15, 0.114 at 0.25, 0.126 at 0.5 (gains 0.9/1.1)."""
QUIET_REL = 0.03
"""A sample is loud above this fraction of the clip's peak (-30 dB)."""


def whisper_dir(cfg: Config) -> Path:
    return cfg.models.path / "portable" / "whisper-base"


class WhisperAsr:
    name = "whisper"
    languages = ("zh",)  # run in Chinese mode

    def __init__(self, cfg: Config, beam_size: int | None = None) -> None:
        self.model_dir = whisper_dir(cfg)
        self.beam_size = beam_size or cfg.hear.whisper_beam
        self.threads = cfg.hear.threads
        self._model: Any = None  # faster_whisper.WhisperModel once loaded
        self._encoded: tuple[bytes, Any] | None = None  # (digest of the features, encoder output)
        self._encode_lock = threading.Lock()
        self._hotwords: str | None = None
        ha = cfg.home_assistant
        self._names = (cfg.state.path / CACHE_FILE, ha.url) if ha.url else None
        """The home's names file (rkvoice.home.vocab, written by whoever reads Home Assistant) and HA's url."""
        self._names_seen: tuple[float, float] = (0.0, -1.0)  # (monotonic time looked, the file's mtime)

    def bias(self, names: list[str]) -> None:
        """Hear ``names`` (the home's) more readily: they go to the decoder as hotwords in every
        transcription but the wake check's (which has the phrase); the first Chinese names up to
        ``MAX_BIAS_CHARS`` characters. An empty list ends the bias. With ``home_assistant.url`` set the
        names come from the home's names file by themselves (``_follow_names``)."""
        kept: list[str] = []
        for name in (n for n in names if _HAN.search(n)):
            if sum(map(len, kept)) + len(kept) + len(name) > MAX_BIAS_CHARS:
                break
            kept.append(name)
        self._hotwords = "，".join(kept) or None

    def load(self) -> None:
        missing = [f for f in FILES if not (self.model_dir / f).is_file()]
        if missing:
            raise RkvoiceError(Stage.ASR, "missing-model",
                               f"Whisper model files missing in {self.model_dir}: {', '.join(missing)}; run ./install.sh")
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise RkvoiceError(Stage.ASR, "missing-dependency",
                               f"whisper ASR needs faster-whisper ({exc}); pip install faster-whisper==1.2.1") from exc
        self._model = WhisperModel(
            str(self.model_dir), device="cpu", compute_type="int8", cpu_threads=self.threads, num_workers=1
        )
        self._model.encode = functools.partial(self._encode_once, self._model.encode)
        self.transcribe(np.zeros(16000, dtype=np.float32))  # warm-up: first decode allocates
        log.info("whisper loaded from %s (beam %d, %d threads)", self.model_dir, self.beam_size, self.threads)

    def _encode_once(self, encode: Any, features: np.ndarray) -> Any:
        """faster-whisper's ``encode``, remembering the last input's output (one entry, ~3 MB)."""
        key = hashlib.blake2b(np.ascontiguousarray(features).tobytes(), digest_size=16).digest() + repr(
            features.shape).encode()
        with self._encode_lock:
            if self._encoded is not None and self._encoded[0] == key:
                return self._encoded[1]
        out = encode(features)
        with self._encode_lock:
            self._encoded = (key, out)
        return out

    def transcribe_primed(self, samples: np.ndarray, phrase: str) -> str:
        """Decode a short utterance expected to hold ``phrase``: the phrase is given to the decoder
        as hotwords and the no-speech/log-prob filter is off. Only a phrase match on the result
        may count (the priming pulls sounds near the phrase towards it)."""
        return _strip_echo(self.transcribe(samples, hotwords=phrase, no_speech_threshold=None))

    def phrase_logprob(self, samples: np.ndarray, phrase: str) -> float:
        """Mean log-probability per token of ``phrase`` as the transcript of ``samples``, forced
        through the unprimed decoder (Chinese, no prompt): how well the audio supports the phrase."""
        if self._model is None:
            raise RuntimeError("WhisperAsr.load() was not called")
        try:
            from faster_whisper.audio import pad_or_trim
            from faster_whisper.tokenizer import Tokenizer

            model = self._model
            tokenizer = Tokenizer(model.hf_tokenizer, True, task="transcribe", language="zh")
            features = model.feature_extractor(settle(np.asarray(samples, dtype=np.float32)))[..., :-1]
            encoded = model.encode(pad_or_trim(features))
            ids = tokenizer.encode(phrase)
            (result,) = model.model.align(encoded, tokenizer.sot_sequence, [ids], features.shape[-1])
            probs = np.maximum(np.asarray(result.text_token_probs, dtype=np.float64), 1e-12)
        except Exception as exc:
            raise RkvoiceError(Stage.ASR, "decode-failed", f"whisper could not score {phrase!r}: {exc}") from exc
        return float(np.mean(np.log(probs)))

    def transcribe(self, samples: np.ndarray, **options: object) -> str:
        """The transcript, simplified; ``options`` go to faster-whisper's ``transcribe``."""
        if self._model is None:
            raise RuntimeError("WhisperAsr.load() was not called")
        audio = np.asarray(samples, dtype=np.float32)
        if len(audio) < 1600:  # under 0.1 s: nothing to decode
            return ""
        audio = settle(audio)
        self._follow_names()
        if self._hotwords is not None:
            options.setdefault("hotwords", self._hotwords)
        try:
            segments, _info = self._model.transcribe(
                audio,
                language="zh",
                task="transcribe",
                beam_size=self.beam_size,
                best_of=1,
                temperature=0.0,
                initial_prompt=PROMPT,
                condition_on_previous_text=False,
                without_timestamps=True,
                vad_filter=False,
                **options,
            )
            text = "".join(seg.text for seg in segments).strip()
        except Exception as exc:  # a native decode failure is this stage's error
            raise RkvoiceError(
                Stage.ASR, "decode-failed", f"whisper could not decode {len(audio) / 16000:.1f} s of audio: {exc}"
            ) from exc
        return simplify(text)


    def _follow_names(self) -> None:
        """Take the home's names from its file when it changed (looked at every ``BIAS_CHECK_S``)."""
        if self._names is None:
            return
        now = time.monotonic()
        if now - self._names_seen[0] < BIAS_CHECK_S:
            return
        path, url = self._names
        try:
            mtime = path.stat().st_mtime
        except OSError:
            mtime = -1.0
        if mtime != self._names_seen[1]:
            vocab = read_cache(path, url) if mtime >= 0 else None
            self.bias(vocab.all() if vocab is not None else [])
            log.info("whisper: the home's names as hotwords: %s", self._hotwords or "(none)")
        self._names_seen = (now, mtime)


def settle(audio: np.ndarray, pad_s: float = QUIET_PAD_S) -> np.ndarray:
    """``audio`` with its quiet head and tail cut to ``pad_s`` around the loud part (to the sample).
    Whisper's transcript depends on where the speech sits in its 10 ms frames: the same 空调调到26度
    was heard 空调调到二六冬 at 3 of 22 leading silences here, so a request streamed with whatever
    silence preceded it (a satellite's, a replayed file's) was heard differently run to run. Settled,
    the same speech is always the same clip: an edge with less quiet than ``pad_s`` is made up with
    zeros."""
    if not len(audio):
        return audio
    peak = float(np.max(np.abs(audio)))
    loud = np.flatnonzero(np.abs(audio) > peak * QUIET_REL) if peak > 0 else np.zeros(0, np.int64)
    if not len(loud):
        return audio
    pad = round(pad_s * 16000)
    first, last = int(loud[0]), int(loud[-1]) + 1
    head, tail = max(0, pad - first), max(0, last + pad - len(audio))  # too little quiet: zeros make it up
    clip = audio[max(0, first - pad) : last + pad]
    return np.concatenate([np.zeros(head, np.float32), clip, np.zeros(tail, np.float32)]) if head or tail else clip


def simplify(text: str) -> str:
    """Drop Whisper's prompt echo and the replacement characters of a character's bytes cut between two
    tokens (hotwords bring them: '打开客厅窗帘\ufffd'), and convert any traditional characters it still emits."""
    return _t2s().convert(text.removeprefix(PROMPT).replace("\ufffd", "")).strip()


def _strip_echo(text: str) -> str:
    """Cut a trailing echo of the prompt: with hotwords the decoder sees "<phrase> <PROMPT>" as the
    text before the audio and sometimes continues it ("小智小智 以下是普通话的")."""
    cut = text.find(PROMPT[:3])
    return text if cut < 0 else text[:cut].strip()


@functools.cache
def _t2s() -> Any:
    try:
        import opencc
    except ImportError as exc:
        raise RkvoiceError(
            Stage.ASR, "missing-dependency", f"simplified output needs opencc ({exc}); pip install opencc==1.4.2"
        ) from exc
    return opencc.OpenCC("t2s")
