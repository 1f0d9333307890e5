"""The ``vits`` TTS engine: sherpa-onnx OfflineTts with a VITS voice.

Two voices:
- ``piper-joe`` (portable, English, 22.05 kHz): a Piper voice with sherpa metadata and tokens.txt
  (models/prepare_piper.py). sherpa-onnx 2.x has no espeak-ng inside, so phonemes come from
  piper-tts's bundled espeak-ng (``piper.phonemize_espeak``) and reach sherpa-onnx as
  ``GenerationConfig.phoneme_codepoints``, one list per sentence. ``stream()`` speaks the same
  phonemes through the voice's split graphs (rkvoice.tts.piper_stream) window by window.
- ``vits-zh-aishell3`` (board, Chinese, 174 speakers): sherpa-onnx's own lexicon frontend with
  its rule FSTs; sherpa-onnx reads the text itself.

sherpa-onnx terminates the process on some bad model files instead of raising, so ``load()``
checks every file first (present, structurally complete ONNX, sherpa metadata, tokens) and turns
each problem into an RkvoiceError naming the file and ``./install.sh``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.needs import FileNeed, present_file
from rkvoice.npu.runtime import ort_session
from rkvoice.tts.base import check_request
from rkvoice.tts.matcha_frontend import read_tokens
from rkvoice.tts.piper_stream import SPLIT, PiperStream, phoneme_ids

log = logging.getLogger(__name__)

WARMUP = {"en": "Hello.", "zh": "你好。"}
PIPER_NOISE = (0.333, 0.5)
"""noise_scale and noise_scale_w for Piper voices (sherpa-onnx's defaults: 0.667, 0.8). Less noise,
clearer words: Whisper heard "Python" and "GitHub" in 7 and 8 of 10 mixed-sentence takes, against
4 and 6 with the defaults (same run, bench/mixed_tts.py's sentence)."""
SPAN_NOISE = (0.0, 0.0)
"""noise_scale and noise_scale_w for an English voice speaking the Latin words inside Chinese text
(MixedTts): no sampling, the model's mean pronunciation and durations, so a sentence sounds the same
every time it is said. Over 40 mixed sentences with brand and tech words (bench/mixed_tts.py) Whisper
heard about as many English words as with PIPER_NOISE (15/42 against 49/126 in three
sampled takes), not more; the bench's sentence is heard whole in every take."""
STREAM_PIECE_CHARS = (24, 80)
"""(first, later) piece lengths of a streamed Piper voice: "Thanks for asking," whole, later pieces
a sentence or so (fewer text-encoder calls, each sees more context)."""
PHONEME_LEAD = "  "
"""Word breaks put before each sentence's Piper phonemes: without them the voice starts on the
first phoneme and swallows an opening plosive (Whisper hears "Python" said alone as "Hi then")."""


@dataclass(frozen=True)
class VitsVoice:
    name: str
    profile: str  # folder under models/: portable or board
    languages: tuple[str, ...]
    models: tuple[str, ...]  # candidate model file names, first present wins
    lexicon: str = ""
    rule_fsts: tuple[str, ...] = ()
    rule_fars: tuple[str, ...] = ()
    external_phonemes: bool = False  # phonemes from espeak-ng outside sherpa (Piper voices)
    split: tuple[str, ...] = ()  # the graph cut for streaming (models/prepare_piper.py)

    def dir(self, cfg: Config) -> Path:
        return cfg.models.path / self.profile / self.name

    def model_path(self, cfg: Config) -> Path:
        d = self.dir(cfg)
        return next((d / name for name in self.models if (d / name).is_file()), d / self.models[0])

    def files(self, cfg: Config) -> tuple[FileNeed, ...]:
        """What the voice needs: one of its model files, tokens, and its lexicon if it has one."""
        d = self.dir(cfg)
        lexicon = (FileNeed("lexicon", (d / self.lexicon,)),) if self.lexicon else ()
        split = tuple(FileNeed(name.removesuffix(".onnx"), (d / name,)) for name in self.split)
        return (FileNeed("model", tuple(d / n for n in self.models)), FileNeed("tokens", (d / "tokens.txt",)),
                *lexicon, *split)

    def installed(self, cfg: Config) -> bool:
        return all(present_file(f) is not None for f in self.files(cfg))


VOICES = {
    "piper-joe": VitsVoice("piper-joe", "portable", ("en",), ("model.onnx",), external_phonemes=True, split=SPLIT),
    "vits-zh-aishell3": VitsVoice(
        "vits-zh-aishell3",
        "board",
        ("zh",),
        ("vits-aishell3.int8.onnx", "model.int8.onnx", "vits-aishell3.onnx", "model.onnx"),
        lexicon="lexicon.txt",
        rule_fsts=("phone.fst", "date.fst", "number.fst", "new_heteronym.fst"),
        rule_fars=("rule.far",),  # optional (181 MB); used when present
    ),
}


def resolve_voice(cfg: Config, voice: str | None = None, lang: str | None = None) -> VitsVoice:
    """The voice named (or, for "auto", the installed one best for lang and the profile)."""
    name = voice or cfg.tts.vits_voice
    if name != "auto":
        try:
            return VOICES[name]
        except KeyError:
            raise RkvoiceError(
                Stage.TTS, "unknown-voice",
                f"unknown vits voice {name!r}; choose one of: auto, {', '.join(sorted(VOICES))}",
            ) from None
    return min(
        VOICES.values(),
        key=lambda v: (
            not v.installed(cfg),
            lang is not None and lang not in v.languages,
            v.profile != cfg.models.profile,
        ),
    )


def read_onnx_metadata(path: Path) -> dict[str, str]:
    """metadata_props of an ONNX file as onnxruntime reads them; ValueError if it is not a complete model.

    onnxruntime parses the whole file (a truncated or foreign file fails here, not in sherpa-onnx,
    which would end the process); graph optimisations are off, so this costs about one file read.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    try:
        session = ort_session(path, 1, optimize=False)
    except Exception as exc:  # noqa: BLE001 (onnxruntime raises several unrelated types for a bad file)
        raise ValueError(str(exc).splitlines()[0][:300]) from exc
    return dict(session.get_modelmeta().custom_metadata_map)


# --- the engine ---------------------------------------------------------------------------------


class VitsTts:
    """sherpa-onnx VITS (Piper English voice or aishell3 Chinese voices)."""

    name = "vits"
    voices = VOICES  # one voice per entry (rkvoice.tts.registry.engine_voices)

    def __init__(self, cfg: Config, voice: str | None = None, piper_noise: tuple[float, float] = PIPER_NOISE) -> None:
        self.cfg = cfg
        self.piper_noise = piper_noise
        self.voice = resolve_voice(cfg, voice)
        self.languages = self.voice.languages
        self.threads = cfg.tts.threads
        self._tts: Any = None  # sherpa_onnx.OfflineTts (the package has no type information)
        self._phonemizer: Any = None  # piper.phonemize_espeak.EspeakPhonemizer
        self._stream: PiperStream | None = None
        self._ids: dict[str, int] = {}
        self._espeak_voice = "en-us"
        self._rate = 0
        self._speakers = 1

    @property
    def fix(self) -> str:
        profile = "" if self.voice.profile == "portable" else f" --profile {self.voice.profile}"
        return f"run ./install.sh{profile} to install the {self.voice.name} voice"

    def _check_files(self) -> tuple[Path, Path, Path | None, dict[str, str]]:
        v, d, fix = self.voice, self.voice.dir(self.cfg), self.fix
        model, tokens = v.model_path(self.cfg), d / "tokens.txt"
        lexicon = d / v.lexicon if v.lexicon else None
        for path in [model, tokens] + ([lexicon] if lexicon else []):
            if not path.is_file():
                raise RkvoiceError(Stage.TTS, "missing-model", f"vits voice file {path} is missing: {fix}")
        try:
            meta = read_onnx_metadata(model)
        except (OSError, ValueError) as exc:
            why = f"vits model {model} is truncated or corrupt ({exc}): {fix}"
            raise RkvoiceError(Stage.TTS, "corrupt-model", why) from exc
        missing = [k for k in ("sample_rate", "n_speakers", "comment", "language") if k not in meta]
        if missing:
            raise RkvoiceError(
                Stage.TTS, "corrupt-model",
                f"vits model {model} lacks sherpa-onnx metadata ({', '.join(missing)}): {fix}",
            )
        try:
            lines = tokens.read_text(encoding="utf-8").splitlines()
            bad = [ln for ln in lines if ln.strip() and not ln.rsplit(" ", 1)[-1].isdigit()]
        except (OSError, UnicodeDecodeError) as exc:
            raise RkvoiceError(Stage.TTS, "corrupt-model", f"vits tokens {tokens}: {exc}: {fix}") from exc
        if not lines or bad:
            raise RkvoiceError(Stage.TTS, "corrupt-model", f"vits tokens {tokens} is empty or malformed: {fix}")
        return model, tokens, lexicon, meta

    def load(self) -> None:
        model, tokens, lexicon, meta = self._check_files()
        try:
            import sherpa_onnx
        except ImportError as exc:
            raise RkvoiceError(Stage.TTS, "missing-dependency", "vits needs sherpa-onnx: run ./install.sh") from exc
        d = self.voice.dir(self.cfg)
        fsts = ",".join(str(d / f) for f in self.voice.rule_fsts if (d / f).is_file())
        fars = ",".join(str(d / f) for f in self.voice.rule_fars if (d / f).is_file())
        vits = sherpa_onnx.OfflineTtsVitsModelConfig(model=str(model), lexicon=str(lexicon or ""), tokens=str(tokens))
        if self.voice.external_phonemes:
            vits.noise_scale, vits.noise_scale_w = self.piper_noise
        config = sherpa_onnx.OfflineTtsConfig(
            model=sherpa_onnx.OfflineTtsModelConfig(vits=vits, num_threads=max(1, self.threads), provider="cpu"),
            rule_fsts=fsts,
            rule_fars=fars,
            max_num_sentences=1,
        )
        if not config.validate():
            raise RkvoiceError(Stage.TTS, "bad-config", f"sherpa-onnx rejected the {self.voice.name} files in {d}")
        if self.voice.external_phonemes:
            self._espeak_voice = meta.get("voice") or "en-us"
            try:
                from piper.phonemize_espeak import EspeakPhonemizer
            except ImportError as exc:
                raise RkvoiceError(
                    Stage.TTS, "missing-dependency",
                    "the Piper voice needs piper-tts (espeak-ng phonemes): run ./install.sh",
                ) from exc
            self._phonemizer = EspeakPhonemizer()
        if self.voice.split:
            self._stream = PiperStream(d, self.threads, self.fix)
            self._ids = read_tokens(tokens)  # the same 'symbol id' lines as Matcha's
        self._tts = sherpa_onnx.OfflineTts(config)
        self._rate = int(self._tts.sample_rate)
        self._speakers = max(1, int(self._tts.num_speakers))
        audio, _ = self.generate(WARMUP[self.languages[0]])
        for _ in self.stream(WARMUP[self.languages[0]]) if self.streaming else ():
            pass
        log.info(
            "vits %s loaded (threads=%d, %d Hz, %d speaker(s), warm-up %.2f s)",
            self.voice.name, self.threads, self._rate, self._speakers, len(audio) / max(1, self._rate),
        )

    @property
    def num_speakers(self) -> int:
        """Speakers of the loaded voice (``sid`` picks one); 1 before load()."""
        return self._speakers

    @property
    def sample_rate(self) -> int:
        if not self._rate:
            raise RkvoiceError(Stage.TTS, "not-loaded", "vits: sample_rate read before load()")
        return self._rate

    @property
    def piece_chars(self) -> tuple[int, int] | None:
        """Streaming, a piece costs its first window, not its length: the first piece can be a whole
        clause (rkvoice.pieces.piece_chars; None: tts.first_chars / chunk_chars)."""
        return STREAM_PIECE_CHARS if self.streaming else None

    @property
    def streaming(self) -> bool:
        """stream() speaks window by window (a Piper voice with its split graphs, loaded)."""
        return self._stream is not None

    def _phonemes(self, text: str) -> list[str]:
        """Each sentence's Piper phonemes, after PHONEME_LEAD."""
        phonemized = self._phonemizer.phonemize(self._espeak_voice, text)
        return [PHONEME_LEAD + p for p in ("".join(phones).strip() for phones in phonemized) if p]

    def stream(self, text: str, sid: int = 0, speed: float = 1.0) -> Iterator[tuple[np.ndarray, bool]]:
        """``text``'s audio at sample_rate in parts as they are made, each with "is it the last";
        the same phonemes and noise as generate() (the sampled noise differs run to run)."""
        if self._stream is None:
            raise RkvoiceError(Stage.TTS, "not-loaded", f"vits voice {self.voice.name}: stream() needs load() "
                               "and the voice's split graphs")
        check_request(f"vits voice {self.voice.name}", self._speakers, sid, speed)
        sentences = self._phonemes(text) if text.strip() else []
        if not sentences:
            yield np.zeros(0, dtype=np.float32), True
        noise, noise_w = self.piper_noise
        for n, phonemes in enumerate(sentences):
            zp = self._stream.encode(phoneme_ids(phonemes, self._ids), (noise, 1.0 / speed, noise_w))
            for audio, end in self._stream.windows(zp):
                yield np.clip(audio, -1.0, 1.0), end and n == len(sentences) - 1

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        if self._tts is None:
            raise RkvoiceError(Stage.TTS, "not-loaded", "vits: generate() called before load()")
        check_request(f"vits voice {self.voice.name}", self._speakers, sid, speed)
        empty = np.zeros(0, dtype=np.float32)
        if not text.strip():
            return empty, self._rate
        if self.voice.external_phonemes:
            import sherpa_onnx

            sentences = self._phonemes(text)
            if not sentences:
                return empty, self._rate
            gen = sherpa_onnx.GenerationConfig()
            gen.sid = sid
            gen.speed = speed
            gen.phoneme_codepoints = [[ord(c) for c in s] for s in sentences]
            result = self._tts.generate("", gen)
        else:
            result = self._tts.generate(text, sid=sid, speed=speed)
        audio = np.asarray(result.samples, dtype=np.float32)
        return np.clip(audio, -1.0, 1.0), self._rate
