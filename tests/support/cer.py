"""Character error rate for Chinese transcripts (punctuation and spaces ignored, digits read out):
the benches' and the tests' measure of what was heard."""

from __future__ import annotations

import re
import unicodedata

from rkvoice.hear.pinyin_match import edit_distance

_DROP = re.compile(r"[\s\W_]+", re.UNICODE)
_NUM = re.compile(r"\d+")


def normalise(text: str, read_digits: bool = True) -> str:
    """NFKC, digit runs read out as Chinese numbers (unless ``read_digits`` is False: then a
    digit is a character like any other), punctuation and spaces dropped, lower case."""
    from rkvoice.text.spoken_numbers import cn_int

    text = unicodedata.normalize("NFKC", text)
    if read_digits:
        text = _NUM.sub(lambda m: cn_int(int(m.group())), text)
    return _DROP.sub("", text).lower()


def cer(reference: str, hypothesis: str, read_digits: bool = True) -> float:
    """Edits / reference characters after normalising both; 1.0 for a non-empty hypothesis of ''.
    ``read_digits=False`` scores digits as written (a transcript verbatim)."""
    ref, hyp = normalise(reference, read_digits), normalise(hypothesis, read_digits)
    if not ref:
        return 0.0 if not hyp else 1.0
    return edit_distance(ref, hyp) / len(ref)
