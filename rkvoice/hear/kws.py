"""sherpa-onnx keyword spotter (streaming zipformer2 transducer, board profile) as a wake engine.

The keywords file is built at load time from ``hear.wake_phrase`` alone: its pinyin tokens (the
model's ``ppinyin`` token set, e.g. ``x iǎo zh ì``) followed by ``@phrase``. Files, as unpacked from
sherpa-onnx-kws-zipformer-wenetspeech-3.3M-2024-01-01 (``hear.kws_dir``, default
``models/board/kws-zh``): ``encoder*.onnx``, ``decoder*.onnx``, ``joiner*.onnx`` (``*.int8.onnx``
preferred when present) and ``tokens.txt``.

sherpa-onnx facts this code is built on (2.0.1, measured with the stand-in models):
- it exits the process when a keyword token is not in tokens.txt or a metadata key is missing,
  so every file and token is checked first (``rkvoice.hear.sherpa_guard``);
- keywords passed to ``create_stream`` are added to the file's, they do not replace them: streams
  are created without extra keywords and a detection of anything but the configured phrase is
  dropped;
- ``get_result`` (and ``tokens``/``timestamps``) clear the detection they return: the result is
  read once, as one KeywordResult, before anything else asks.
"""

from __future__ import annotations

import logging
import tempfile
import unicodedata
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rkvoice.config import ROOT, Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.hear.sherpa_guard import Fix, check_kws_model, read_tokens
from rkvoice.hear.wake import WakeHit
from rkvoice.needs import FileNeed, present_file

if TYPE_CHECKING:
    from sherpa_onnx import KeywordSpotter, OnlineStream

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
STEMS = ("encoder", "decoder", "joiner")


def kws_dir(cfg: Config) -> Path:
    """``hear.kws_dir`` (relative to the install dir) or models.dir/board/kws-zh."""
    configured = cfg.hear.kws_dir.strip()
    if not configured:
        return cfg.models.path / "board" / "kws-zh"
    p = Path(configured).expanduser()
    return p if p.is_absolute() else ROOT / p


def fix_for(model_dir: Path) -> Fix:
    return Fix(Stage.WAKE, f"reinstall the keyword spotter (./install.sh --profile board) or fix hear.kws_dir ({model_dir})")


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


def keywords_line(phrase: str, tokens_file: Path, known: dict[str, int] | None = None) -> str:
    """``"x iǎo zh ì x iǎo zh ì @小智小智"``: the phrase in the model's own tokens.

    A token missing from tokens.txt would make sherpa-onnx exit the process, and a character
    pinyin cannot spell (Latin letters, digits) would silently drop out of the phrase: both are
    errors here.
    """
    text = spoken_text(phrase)
    fix = "choose a phrase of Chinese characters (hear.wake_phrase)"
    foreign = [c for c in text if "CJK" not in unicodedata.name(c, "")]
    if not text or foreign:
        what = f"characters the keyword model cannot spell: {' '.join(foreign)}" if text else "no characters"
        raise RkvoiceError(Stage.WAKE, "bad-phrase", f"wake phrase {phrase!r} has {what}; {fix}")
    if known is None:
        known = read_tokens(tokens_file, fix_for(tokens_file.parent))
    tokens = phrase_tokens(text)
    unknown = [t for t in tokens if t not in known]
    if not tokens or unknown:
        raise RkvoiceError(
            Stage.WAKE,
            "bad-phrase",
            f"wake phrase {phrase!r} cannot be spelled with the keyword model's tokens "
            f"(unknown: {' '.join(unknown) or 'no pinyin'}; {tokens_file}); {fix}",
        )
    return " ".join(tokens) + f" @{text}"


def check_kws(cfg: Config, model_dir: Path | None = None) -> str:
    """Everything sherpa-onnx would exit on, without loading it; returns the keywords line."""
    model_dir = model_dir or kws_dir(cfg)
    files = model_files(model_dir)
    table = check_kws_model(files["encoder"], files["decoder"], files["joiner"], files["tokens"], fix_for(model_dir))
    return keywords_line(cfg.hear.wake_phrase, files["tokens"], table)


class KwsWake:
    languages = ("zh",)

    def __init__(self, cfg: Config, model_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.model_dir = model_dir or kws_dir(cfg)
        self.phrase = spoken_text(cfg.hear.wake_phrase)
        self._kws: KeywordSpotter | None = None
        self._stream: OnlineStream | None = None
        self._samples = 0
        self.ignored: deque[str] = deque(maxlen=16)
        """Keywords detected that are not the configured phrase (dropped)."""

    def load(self) -> None:
        line = check_kws(self.cfg, self.model_dir)
        files = model_files(self.model_dir)
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
        self._stream = self._kws.create_stream()
        log.info("keyword spotter loaded from %s (%s)", self.model_dir, line)

    def restart(self, at_sample: int) -> None:
        if self._kws is not None:
            self._stream = self._kws.create_stream()
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
        return self._decode()

    def flush(self) -> WakeHit | None:
        if self._kws is None or self._stream is None:
            return None
        self._stream.accept_waveform(SAMPLE_RATE, np.zeros(SAMPLE_RATE // 2, dtype=np.float32))
        return self._decode()

    def _decode(self) -> WakeHit | None:
        kws, stream = self._spotter()
        while kws.is_ready(stream):
            kws.decode_stream(stream)
            result = kws.keyword_spotter.get_result(stream)  # clears it: read once
            keyword = result.keyword.strip()
            if not keyword:
                continue
            kws.reset_stream(stream)
            if keyword != self.phrase:
                self.ignored.append(keyword)
                log.info("keyword %r is not the wake phrase %r: ignored", keyword, self.phrase)
                continue
            now = self._samples / SAMPLE_RATE
            log.info("keyword spotted: %s (%s) at %.2f s", keyword, " ".join(result.tokens), now)
            return WakeHit(at_s=now, end_s=now, text=keyword)
        return None

    def close(self) -> None:
        self._stream = None
        self._kws = None
