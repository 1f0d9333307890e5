"""Pieces and windows for fixed-shape Matcha and Vocos buckets.

An NPU call costs the same whatever part of its fixed shape is used (measured on a board: ~0.3 s for the
64-token Matcha, ~55 ms for the 600-frame Vocos; docs/performance.md), so a piece runs in the smallest bucket holding
it: text is packed into pieces that fit the largest Matcha bucket (``split_units``), a piece whose
frames overflow every window is cut in two (``halve``), and a mel longer than the largest Vocos
bucket runs through it in overlapping windows (``vocos_windows``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.tts.matcha_frontend import Unit

log = logging.getLogger(__name__)

Counter = Callable[[list[Unit]], int]
"""Tokens a piece feeds the model (blanks included)."""


def split_units(units: list[Unit], max_tokens: int, count: Counter) -> list[list[Unit]]:
    """Pack ``units``, in order and none dropped, into pieces of at most ``max_tokens`` tokens: a full
    piece is cut after its last punctuation mark when that keeps a third of it, else between words;
    a unit longer than the limit alone is cut into token slices."""
    if max_tokens < 1:
        raise RkvoiceError(Stage.TTS, "bad-bucket", f"a Matcha bucket of {max_tokens} tokens holds nothing")
    pieces: list[list[Unit]] = []
    cur: list[Unit] = []
    for unit in _shrink(units, max_tokens, count):
        if count(cur + [unit]) <= max_tokens:
            cur.append(unit)
            continue
        cut = next((i for i in range(len(cur) - 1, -1, -1) if cur[i].kind == "punct"), None)  # the last mark
        if cut is not None and cut + 1 < len(cur) and cut + 1 >= len(cur) // 3:
            pieces.append(cur[: cut + 1])
            cur = cur[cut + 1 :]
            if count(cur + [unit]) > max_tokens:
                pieces.append(cur)
                cur = []
        else:
            pieces.append(cur)
            cur = []
        cur.append(unit)
    if cur:
        pieces.append(cur)
    return [p for p in pieces if any(u.kind != "punct" for u in p)]


def halve(piece: list[Unit]) -> tuple[list[Unit], list[Unit]]:
    """Cut a piece in two near its middle: after a punctuation mark if one is near, else between
    units; a single unit is cut between its tokens."""
    if len(piece) == 1:
        u = piece[0]
        if len(u.ids) < 2:
            raise RkvoiceError(Stage.TTS, "too-long", f"Matcha cannot fit {u.text!r} (one token) into any frame window")
        mid = len(u.ids) // 2
        return [Unit(u.text, u.ids[:mid], u.kind)], [Unit(u.text, u.ids[mid:], u.kind, u.blank_after)]
    mid = len(piece) // 2
    marks = [i + 1 for i, u in enumerate(piece[:-1]) if u.kind == "punct"]
    near = [m for m in marks if abs(m - mid) <= max(1, len(piece) // 4)]
    cut = min(near, key=lambda m: abs(m - mid)) if near else mid
    return piece[:cut], piece[cut:]


def vocos_windows(total: int, frames: int, context: int) -> list[tuple[int, int, int]]:
    """(window start, kept start, kept end) covering ``total`` frames with ``frames``-frame windows, each
    keeping its centre; ``context`` frames either side (where the mel has them) only feed the convolutions.
    Vocos sees 27 frames either side: from 27 on, the kept frames are one whole-mel run's (stand-in, 700
    frames in 200-frame windows: identical at 27 and 32, 164 dB at 16, 43 dB with none)."""
    if frames - 2 * context < 1:
        raise RkvoiceError(Stage.CONFIG, "bad-value", f"tts.matcha.vocoder_context {context} leaves no centre in a "
                           f"{frames}-frame Vocos window; use less than {frames // 2}")
    if total <= frames:
        return [(0, 0, total)]
    out = []
    kept = 0
    while kept < total:
        start = max(0, min(kept - context, total - frames))
        end = total if start + frames >= total else start + frames - context
        out.append((start, kept, end))
        kept = end
    return out


def _shrink(units: list[Unit], max_tokens: int, count: Counter) -> list[Unit]:
    """Cut a unit that alone exceeds the token limit (a very long word) into token slices."""
    out = []
    for u in units:
        if count([u]) <= max_tokens:
            out.append(u)
            continue
        log.warning("%r has %d tokens, more than a Matcha bucket holds (%d); it is spoken in slices",
                    u.text, len(u.ids), max_tokens)
        for k in range(0, len(u.ids), max_tokens):
            last = k + max_tokens >= len(u.ids)
            out.append(Unit(u.text, u.ids[k : k + max_tokens], u.kind, u.blank_after and last))
    return out
