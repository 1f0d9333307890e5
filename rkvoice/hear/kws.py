"""sherpa-onnx keyword spotter (zipformer zh, board profile) as a streaming wake engine.

The keywords file is built at load time from ``hear.wake_phrase``: its pinyin tokens (the model's
``ppinyin`` token set, e.g. ``x iǎo zh ì``) followed by ``@phrase``. Files, as unpacked from
sherpa-onnx-kws-zipformer-wenetspeech-3.3M-2024-01-01: ``models/board/kws-zh/{encoder*.onnx,
decoder*.onnx, joiner*.onnx, tokens.txt}`` (``*.int8.onnx`` preferred when present).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.hear.wake import WakeHit

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000


def kws_dir(cfg: Config) -> Path:
    return cfg.models.path / "board" / "kws-zh"


def phrase_tokens(phrase: str) -> list[str]:
    """Partial pinyin ("ppinyin"): initial and toned final per character, e.g. 小智 -> x iǎo zh ì."""
    from pypinyin import Style, pinyin

    initials = pinyin(phrase, style=Style.INITIALS, strict=False, errors="ignore")
    finals = pinyin(phrase, style=Style.FINALS_TONE, strict=False, errors="ignore")
    tokens: list[str] = []
    for (ini,), (fin,) in zip(initials, finals):
        tokens += [t for t in (ini, fin) if t]
    return tokens


def keywords_line(phrase: str, tokens_file: Path) -> str:
    """``"x iǎo zh ì x iǎo zh ì @小智小智"``: the phrase in the model's own tokens."""
    known = {line.split()[0] for line in tokens_file.read_text(encoding="utf-8").splitlines() if line.strip()}
    tokens = phrase_tokens(phrase)
    unknown = [t for t in tokens if t not in known]
    if not tokens or unknown:
        raise RkvoiceError(
            "wake",
            "bad-phrase",
            f"wake phrase {phrase!r} cannot be spelled with the keyword model's tokens "
            f"(unknown: {' '.join(unknown) or 'no pinyin'}); choose a Chinese phrase (hear.wake_phrase)",
        )
    return " ".join(tokens) + f" @{phrase}"


class KwsWake:
    def __init__(self, cfg: Config, model_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.model_dir = model_dir or kws_dir(cfg)
        self.phrase = cfg.hear.wake_phrase
        self._kws = None
        self._stream = None
        self._samples = 0
        self._keywords_file: Path | None = None

    def _pick(self, stem: str) -> Path:
        # upstream names carry the recipe (encoder-epoch-12-avg-2-chunk-16-left-64.int8.onnx)
        for pattern in (f"{stem}*.int8.onnx", f"{stem}*.onnx"):
            found = sorted(self.model_dir.glob(pattern))
            if found:
                return found[0]
        raise RkvoiceError(
            "wake",
            "missing-model",
            f"keyword spotter model missing: {self.model_dir}/{stem}.onnx; run ./install.sh --profile board",
        )

    def load(self) -> None:
        encoder, decoder, joiner = (self._pick(s) for s in ("encoder", "decoder", "joiner"))
        tokens = self.model_dir / "tokens.txt"
        if not tokens.is_file():
            raise RkvoiceError("wake", "missing-model", f"{tokens} is missing; run ./install.sh --profile board")
        import sherpa_onnx

        line = keywords_line(self.phrase, tokens)
        fd, name = tempfile.mkstemp(prefix="rkvoice-keywords-", suffix=".txt")
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
        self._keywords_file = Path(name)
        h = self.cfg.hear
        self._kws = sherpa_onnx.KeywordSpotter(
            tokens=str(tokens),
            encoder=str(encoder),
            decoder=str(decoder),
            joiner=str(joiner),
            keywords_file=name,
            num_threads=1,
            keywords_score=h.kws_score,
            keywords_threshold=h.kws_threshold,
        )
        self._stream = self._kws.create_stream()
        log.info("keyword spotter loaded (%s)", line)

    def restart(self, at_sample: int) -> None:
        if self._kws is not None:
            self._stream = self._kws.create_stream()
        self._samples = at_sample

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        if self._kws is None:
            raise RuntimeError("KwsWake.load() was not called")
        self._stream.accept_waveform(SAMPLE_RATE, np.asarray(frame, dtype=np.float32))
        self._samples += len(frame)
        return self._decode()

    def flush(self) -> WakeHit | None:
        if self._kws is None:
            return None
        self._stream.accept_waveform(SAMPLE_RATE, np.zeros(SAMPLE_RATE // 2, dtype=np.float32))
        return self._decode()

    def _decode(self) -> WakeHit | None:
        while self._kws.is_ready(self._stream):
            self._kws.decode_stream(self._stream)
            keyword = self._kws.get_result(self._stream)
            if keyword:
                self._kws.reset_stream(self._stream)
                now = self._samples / SAMPLE_RATE
                log.info("keyword spotted: %s at %.2f s", keyword, now)
                return WakeHit(at_s=now, end_s=now)
        return None

    def close(self) -> None:
        if self._keywords_file is not None:
            self._keywords_file.unlink(missing_ok=True)
