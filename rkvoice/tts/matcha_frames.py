"""Fixed-shape buckets for Matcha: how many mel frames a piece needs, and where to split it.

A compiled Matcha takes a fixed number of tokens (e.g. 64) and always emits a fixed number of
mel frames (e.g. 599, ~9.6 s at 16 kHz / hop 256); frames past the real speech come out as
silence plus a short noise burst. The naive frame estimate scales the bucket linearly with the
token count (599/64 frames a token) and over-estimates Chinese by 30-40 % (field measurement on
RK3576), so the vocoder/ISTFT work and the tail trim both do more than they need. The corrected
estimate counts what is spoken: Chinese syllables (characters), English phones and pauses,
each at its own speaking rate, divided by the speed, plus a safety margin.

Splitting packs units into pieces that fit a bucket (tokens and estimated frames), cutting
after punctuation where it can and otherwise between words; a unit is never cut unless it
alone is longer than the largest bucket.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

from rkvoice.errors import RkvoiceError
from rkvoice.tts.matcha_frontend import Unit, token_count

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Bucket:
    tokens: int
    frames: int

    @classmethod
    def parse(cls, text: str) -> "Bucket":
        m = re.fullmatch(r"\s*(\d+)\s*[x:]\s*(\d+)\s*", str(text))
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise RkvoiceError("config", "bad-bucket",
                               f"tts.matcha.buckets: {text!r} should be TOKENSxFRAMES, e.g. '64x599'")
        return cls(int(m.group(1)), int(m.group(2)))


@dataclass(frozen=True)
class FrameEstimator:
    """Mel frames for a piece from what is spoken in it, at ``frame_rate`` frames per second."""

    frame_rate: float = 16000 / 256
    zh_syllables_per_s: float = 4.6
    """Mandarin reading rate of the Baker-style voices (4-5 syllables a second)."""
    en_phones_per_s: float = 12.0
    pause_s: float = 0.18
    """Per punctuation mark."""
    edge_s: float = 0.2
    """Leading and trailing silence the model adds to every piece."""
    margin: float = 1.1
    """Safety factor: a cut-off word is worse than a few frames of extra silence."""

    def seconds(self, units: list[Unit], speed: float = 1.0) -> float:
        zh = sum(len(u.text) for u in units if u.kind == "zh")
        en = sum(len(u.ids) for u in units if u.kind == "en")
        pauses = sum(1 for u in units if u.kind == "punct")
        spoken = zh / self.zh_syllables_per_s + en / self.en_phones_per_s + pauses * self.pause_s
        return (spoken + self.edge_s) / max(speed, 1e-3)

    def frames(self, units: list[Unit], speed: float = 1.0) -> int:
        return int(math.ceil(self.seconds(units, speed) * self.margin * self.frame_rate))


def naive_frames(units: list[Unit], bucket: Bucket, add_blank: bool = False, speed: float = 1.0) -> int:
    """The uncorrected estimate: the bucket's frames scaled by the token count."""
    n = token_count(units, add_blank)
    return int(math.ceil(bucket.frames * n / bucket.tokens / max(speed, 1e-3)))


def choose_bucket(buckets: list[Bucket], tokens: int, frames: int) -> Bucket:
    """Smallest bucket holding ``tokens`` and ``frames``; the largest one if none does."""
    fitting = [b for b in sorted(buckets) if b.tokens >= tokens and b.frames >= frames]
    return fitting[0] if fitting else max(buckets)


def split_units(units: list[Unit], buckets: list[Bucket], estimator: FrameEstimator,
                speed: float = 1.0, add_blank: bool = False) -> list[list[Unit]]:
    """Pack ``units`` into pieces that each fit the largest bucket (tokens and estimated frames)."""
    if not buckets:
        raise RkvoiceError("config", "bad-bucket", "tts.matcha.buckets is empty; e.g. ['64x599']")
    big = max(buckets, key=lambda b: (b.tokens, b.frames))
    max_tokens = big.tokens
    max_frames = max(b.frames for b in buckets)

    def fits(piece: list[Unit]) -> bool:
        return token_count(piece, add_blank) <= max_tokens and estimator.frames(piece, speed) <= max_frames

    pieces: list[list[Unit]] = []
    cur: list[Unit] = []
    for unit in _shrink(units, max_tokens, add_blank):
        if fits(cur + [unit]):
            cur.append(unit)
            continue
        if not cur:
            log.warning("unit %r is longer than a Matcha bucket; it is spoken cut", unit.text)
            pieces.append([unit])
            continue
        if unit.kind == "punct":  # keep the pause with its clause; drop it if it can't fit
            pieces.append(cur)
            cur = []
            continue
        cut = _last_clause_end(cur)
        if cut is not None and cut >= len(cur) // 3:
            pieces.append(cur[: cut + 1])
            cur = cur[cut + 1 :]
            if not fits(cur + [unit]):
                pieces.append(cur)
                cur = []
        else:
            pieces.append(cur)
            cur = []
        cur.append(unit)
    if cur:
        pieces.append(cur)
    return [p for p in pieces if any(u.kind != "punct" for u in p)]


def _last_clause_end(piece: list[Unit]) -> int | None:
    for i in range(len(piece) - 1, -1, -1):
        if piece[i].kind == "punct":
            return i
    return None


def _shrink(units: list[Unit], max_tokens: int, add_blank: bool) -> list[Unit]:
    """Cut a unit that alone exceeds the token limit (a very long word) into token slices."""
    limit = (max_tokens - 1) // 2 if add_blank else max_tokens
    out = []
    for u in units:
        if len(u.ids) <= limit:
            out.append(u)
            continue
        log.warning("%r has %d tokens, more than a Matcha bucket holds (%d); cutting it", u.text, len(u.ids), limit)
        for k in range(0, len(u.ids), limit):
            out.append(Unit(u.text, u.ids[k : k + limit], u.kind))
    return out
