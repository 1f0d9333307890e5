"""sherpa-onnx keyword spotter (streaming zipformer2 transducer, board profile) as a wake engine.

The keywords file is built at load time from ``hear.wake_phrase`` alone, in the model's ``ppinyin``
tokens (``x iǎo zh ì @小智``); the model files (``hear.kws_dir``) are listed by ``file_needs``.

sherpa-onnx 2.0.1, measured with the stand-in models: it exits the process on a keyword token missing
from tokens.txt or a missing metadata key (checked first: ``rkvoice.hear.sherpa_guard``); keywords
given to ``create_stream`` add to the file's (another phrase's detection is dropped); ``get_result``
clears the detection it returns. The encoder decodes whole chunks (``decode_chunk_len`` frames) plus
their right context (``T``), and a keyword counts once blank frames follow it: a keyword ending the
speech was reported 0.51 s of audio late (bench/wake_latency.py). So at a pause (silero, ``PAUSE_S``
of silence, reported 0.24 s after the phrase's end: p50 of 11 voices) the spotter is fed zeros until
the encoder has consumed everything heard, as sherpa-onnx's examples end a file.
"""

from __future__ import annotations

import logging
import tempfile
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear import sherpa_guard as guard
from rkvoice.hear.vad import SAMPLE_RATE, WINDOW, silero_vad
from rkvoice.hear.wake import WakeHit
from rkvoice.needs import FileNeed, present_file

if TYPE_CHECKING:
    from sherpa_onnx import KeywordSpotter, OnlineStream

log = logging.getLogger(__name__)

HOP = SAMPLE_RATE // 100  # samples per feature frame (10 ms)
STEMS = ("encoder", "decoder", "joiner")
PAUSE_S = 0.1  # the silence that ends speech for the pause watch
PAUSE_MAX_S = 20.0  # the pause watch's VAD cuts longer speech itself (its buffer holds this much)
ZIPFORMER2_ENCODER_KEYS = (
    "T", "decode_chunk_len", "encoder_dims", "num_encoder_layers", "left_context_len",
    "cnn_module_kernels", "query_head_dims", "value_head_dims", "num_heads",
)
TRANSDUCER_DECODER_KEYS = ("context_size", "vocab_size")
# online transducer model types sherpa-onnx 2.0.1 dispatches on; anything else crashes it
ONLINE_TRANSDUCER_TYPES = ("conformer", "lstm", "zipformer", "zipformer2")


def kws_dir(cfg: Config) -> Path:
    """``hear.kws_dir`` (relative to the install dir) or models.dir/board/kws-zh."""
    return guard.board_model_dir(cfg, "kws_dir", "kws-zh")


def fix_for(model_dir: Path) -> guard.Fix:
    return guard.Fix(Stage.WAKE,
                     f"reinstall the keyword spotter (./install.sh --profile board) or fix hear.kws_dir ({model_dir})")


def file_needs(model_dir: Path) -> tuple[FileNeed, ...]:
    """Per stem ``{stem}*.int8.onnx`` first, then ``{stem}*.onnx`` (upstream names carry the recipe,
    e.g. encoder-epoch-12-avg-2-chunk-16-left-64.int8.onnx); then ``tokens``."""
    needs = []
    for stem in STEMS:
        found = sorted(model_dir.glob(f"{stem}*.int8.onnx")) + sorted(model_dir.glob(f"{stem}*.onnx"))
        needs.append(FileNeed(stem, tuple(found) or (model_dir / f"{stem}.int8.onnx", model_dir / f"{stem}.onnx")))
    return (*needs, FileNeed("tokens", (model_dir / "tokens.txt",)))


def model_files(model_dir: Path) -> dict[str, Path]:
    """The first present file of each stem (``file_needs``), and ``tokens``."""
    files = {"tokens": model_dir / "tokens.txt"}
    for need in file_needs(model_dir)[:-1]:
        if (found := present_file(need)) is None:
            raise fix_for(model_dir).error("missing-model", f"keyword spotter model missing: {model_dir}/{need.role}*.onnx")
        files[need.role] = found
    return files


def phrase_tokens(phrase: str) -> list[str]:
    """Partial pinyin ("ppinyin"): initial and toned final per character, e.g. 小智 -> x iǎo zh ì."""
    from pypinyin import Style, pinyin

    initials = pinyin(phrase, style=Style.INITIALS, strict=False, errors="ignore")
    finals = pinyin(phrase, style=Style.FINALS_TONE, strict=False, errors="ignore")
    return [t for (ini,), (fin,) in zip(initials, finals) for t in (ini, fin) if t]


def spoken_text(phrase: str) -> str:
    """The phrase without spaces and punctuation: what the keywords file shows after ``@`` and what
    a detection reports (``@`` or a line break inside it would break the keywords file)."""
    return "".join(c for c in phrase if not c.isspace() and not unicodedata.category(c).startswith(("P", "S")))


def keywords_line(phrase: str, tokens_file: Path, known: dict[str, int], role: str = "wake phrase",
                  key: str = "hear.wake_phrase") -> str:
    """``"x iǎo zh ì x iǎo zh ì @小智小智"``: the phrase in the model's own tokens. A token missing from
    ``known`` (tokens.txt; sherpa-onnx would exit) or a character pinyin cannot spell (it drops out) is an
    error naming the phrase as ``role`` and the setting ``key``."""
    text = spoken_text(phrase)
    fix = f"choose a phrase of Chinese characters ({key})"
    foreign = [c for c in text if "CJK" not in unicodedata.name(c, "")]
    if not text or foreign:
        what = f"characters the keyword model cannot spell: {' '.join(foreign)}" if text else "no characters"
        raise RkvoiceError(Stage.WAKE, "bad-phrase", f"{role} {phrase!r} has {what}; {fix}")
    tokens = phrase_tokens(text)
    unknown = [t for t in tokens if t not in known]
    if not tokens or unknown:
        raise RkvoiceError(
            Stage.WAKE,
            "bad-phrase",
            f"{role} {phrase!r} cannot be spelled with the keyword model's tokens "
            f"(unknown: {' '.join(unknown) or 'no pinyin'}; {tokens_file}); {fix}",
        )
    return " ".join(tokens) + f" @{text}"


def check_kws(cfg: Config) -> tuple[str, dict[str, Path], dict[str, str]]:
    """Everything sherpa-onnx would exit on in the streaming transducer files a KeywordSpotter loads and
    the phrase, without loading them; returns the keywords line, the files and the encoder's metadata."""
    files, enc_meta, table = check_model(cfg)
    return keywords_line(cfg.hear.wake_phrase, files["tokens"], table), files, enc_meta


def check_model(cfg: Config) -> tuple[dict[str, Path], dict[str, str], dict[str, int]]:
    """``check_kws`` without a phrase: the files, the encoder's metadata and the token table."""
    model_dir = kws_dir(cfg)
    fix = fix_for(model_dir)
    files = model_files(model_dir)
    encoder, decoder, tokens = files["encoder"], files["decoder"], files["tokens"]
    enc_meta = guard.onnx_metadata(encoder, fix)
    kind = enc_meta.get("model_type", "")
    if kind not in ONLINE_TRANSDUCER_TYPES:
        raise fix.error(
            "bad-model",
            f"{encoder.name} has model_type {kind!r}, not one of {', '.join(ONLINE_TRANSDUCER_TYPES)} "
            "(sherpa-onnx would crash on it)",
        )
    if kind == "zipformer2":
        guard.require_keys(enc_meta, ZIPFORMER2_ENCODER_KEYS, encoder, fix)
    dec_meta = guard.onnx_metadata(decoder, fix)
    guard.require_keys(dec_meta, TRANSDUCER_DECODER_KEYS, decoder, fix)
    guard.onnx_metadata(files["joiner"], fix)
    table = guard.read_tokens(tokens, fix)
    guard.check_vocab(table, guard.require_int(dec_meta, "vocab_size", decoder, fix), tokens, decoder, fix)
    return files, enc_meta, table


class KwsWake:
    """Fed zeros when the speech pauses (see the module doc). A subclass spots other phrases by
    ``keywords`` (its keywords file's lines) and ``phrases`` (the detections it reports), and may
    watch for a shorter pause (``pause_s``)."""

    languages = ("zh",)
    pause_s = PAUSE_S

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.model_dir = kws_dir(cfg)
        self.phrase = spoken_text(cfg.hear.wake_phrase)
        self.phrases = {self.phrase}
        self.wanted = f"the wake phrase {self.phrase!r}"  # what a detection of another keyword is not
        self._kws: KeywordSpotter | None = None
        self._stream: OnlineStream | None = None
        self._samples = 0  # audio heard (stream time)
        self._fed = 0  # samples given to the current spotter stream, zeros included
        self._decoded = 0  # of those, the ones the encoder has consumed (chunks decoded x shift)
        self._shift = 0  # samples per chunk (decode_chunk_len feature frames)
        self._pad_max = 0  # zeros that always complete a chunk with its right context
        self._vad: Any = None  # the pause watch (silero)
        self._vad_zero = 0  # stream sample of the VAD's own sample 0
        self._vad_pending = np.zeros(0, dtype=np.float32)

    def keywords(self, tokens_file: Path, table: dict[str, int]) -> list[str]:
        """The keywords file's lines (``keywords_line``): the wake phrase."""
        return [keywords_line(self.cfg.hear.wake_phrase, tokens_file, table)]

    def load(self) -> None:
        files, meta, table = check_model(self.cfg)
        line = "\n".join(self.keywords(files["tokens"], table))
        chunk = guard.require_int(meta, "decode_chunk_len", files["encoder"], fix_for(self.model_dir))
        self._shift = chunk * HOP
        self._pad_max = (chunk + guard.require_int(meta, "T", files["encoder"], fix_for(self.model_dir)) + 3) * HOP
        self._vad = silero_vad(self.cfg, self.pause_s, PAUSE_MAX_S)
        import sherpa_onnx

        fd, name = tempfile.mkstemp(prefix="rkvoice-keywords-", suffix=".txt")
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
        h = self.cfg.hear
        try:  # sherpa-onnx reads the keywords file once, while constructing
            self._kws = sherpa_onnx.KeywordSpotter(
                **{part: str(path) for part, path in files.items()},  # encoder, decoder, joiner, tokens
                keywords_file=name,
                num_threads=1,
                keywords_score=h.kws_score,
                keywords_threshold=h.kws_threshold,
            )
        finally:
            Path(name).unlink(missing_ok=True)
        self._new_stream()
        log.info("keyword spotter loaded from %s (%s)", self.model_dir, line.replace("\n", "; "))

    def _new_stream(self) -> None:
        if self._kws is not None:
            self._stream = self._kws.create_stream()
        self._fed = self._decoded = 0

    def restart(self, at_sample: int) -> None:
        """A new spotter stream; the next frame is stream sample ``at_sample``. The pause watch
        keeps listening when the audio goes on from where it was (``at_sample`` is the next
        sample), and starts afresh after a gap."""
        self._new_stream()
        if at_sample != self._samples and self._vad is not None:
            self._vad.reset()
            self._vad_zero = at_sample
            self._vad_pending = self._vad_pending[:0]
        self._samples = at_sample

    def _spotter(self) -> tuple[KeywordSpotter, OnlineStream]:
        if self._kws is None or self._stream is None:
            raise RkvoiceError(Stage.WAKE, "not-loaded", "keyword spotter: call load() before accept()")
        return self._kws, self._stream

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        _, stream = self._spotter()
        samples = np.asarray(frame, dtype=np.float32)
        if samples.ndim != 1:
            raise RkvoiceError(Stage.WAKE, "bad-audio",
                               f"keyword spotter takes 16 kHz mono frames, got shape {samples.shape}")
        stream.accept_waveform(SAMPLE_RATE, samples)
        self._samples += len(samples)
        self._fed += len(samples)
        paused_at = self._pause(samples)
        hit = self._decode()
        if hit is None and paused_at is not None:
            hit = self._pad(paused_at)
        return hit

    def flush(self) -> WakeHit | None:
        """End of the stream: decode all of it."""
        if self._kws is None or self._stream is None:
            return None
        return self._pad(self._samples)

    def _pause(self, samples: np.ndarray) -> int | None:
        """Feed the pause watch; the stream sample where speech stopped when it reports a pause."""
        if self._vad is None:
            return None
        pending = np.concatenate([self._vad_pending, samples])
        whole = len(pending) - len(pending) % WINDOW
        for i in range(0, whole, WINDOW):
            self._vad.accept_waveform(pending[i : i + WINDOW])
        self._vad_pending = pending[whole:]
        ended = None
        while not self._vad.empty():
            seg = self._vad.front
            ended = self._vad_zero + seg.start + len(seg.samples)
            self._vad.pop()
        return ended

    def _pad(self, speech_end: int) -> WakeHit | None:
        """Zeros until the encoder has consumed all the audio heard; a detection in them is dated
        at ``speech_end`` (the stream sample where the speech stopped)."""
        _, stream = self._spotter()
        zeros = np.zeros(WINDOW, dtype=np.float32)
        target, padded = self._fed, 0
        while self._decoded < target and padded < self._pad_max:
            stream.accept_waveform(SAMPLE_RATE, zeros)
            self._fed += WINDOW
            padded += WINDOW
            hit = self._decode(end=speech_end)
            if hit is not None:
                return hit
        return None

    def _decode(self, end: int | None = None) -> WakeHit | None:
        kws, stream = self._spotter()
        while kws.is_ready(stream):
            kws.decode_stream(stream)
            self._decoded += self._shift
            result = kws.keyword_spotter.get_result(stream)  # clears it: read once
            keyword = result.keyword.strip()
            if not keyword:
                continue
            kws.reset_stream(stream)
            if keyword not in self.phrases:
                log.info("keyword %r is not %s: ignored", keyword, self.wanted)
                continue
            now = self._samples / SAMPLE_RATE
            end_s = now if end is None else min(now, end / SAMPLE_RATE)
            log.info("keyword spotted: %s (%s) at %.2f s%s", keyword, " ".join(result.tokens), now,
                     "" if end is None else f" (speech paused at {end_s:.2f} s)")
            return WakeHit(at_s=now, end_s=end_s, text=keyword)
        return None

    def close(self) -> None:
        self._stream = None
        self._kws = None
        self._vad = None
