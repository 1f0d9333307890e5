"""Remove what a voice should not read: markdown, emoji, URLs, citation marks, control characters.

Words are kept: a markdown link keeps its text, code keeps its content, a heading keeps its words.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata

log = logging.getLogger(__name__)

_FULLWIDTH = {c: c - 0xFEE0 for c in list(range(0xFF10, 0xFF1A)) + list(range(0xFF21, 0xFF3B))
              + list(range(0xFF41, 0xFF5B))}
_FULLWIDTH[0x3000] = 0x20

_FENCE = re.compile(r"^\s*(```|~~~)[^\n]*$", re.MULTILINE)
LINK = re.compile(r"!?\[([^\]\n]*)\]\((?:[^()\s]|\([^()\s]*\))*\)")
LINK_TAIL = re.compile(r"\]\((?:[^()\s]|\([^()\s]*\))*\)")
"""The "](target)" of a link whose text was cut off in another piece."""
URL = re.compile(r"(?:\b(?:https?|ftp)://|\bwww\.)[!-~]+", re.IGNORECASE)
_CITATION = re.compile(r"\s?\[(?:kb-[^\]\n]*|\d+(?:\s*[,，-]\s*\d+)*)\]|\s?【\d+(?:†[^】\n]*)?】")
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+", re.MULTILINE)
_QUOTE = re.compile(r"^[ \t]*>+[ \t]?", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*[-*+•·▪‣◦][ \t]+", re.MULTILINE)
_NUMBERED = re.compile(r"^[ \t]*(?:\d{1,3}[.)、][ \t]+)+", re.MULTILINE)
"""A numbered list item's number ("1. ", "2) ", "3、") at a line start once the markup around it is
gone ("**45**. ", "# 2) ", "[3](url)、"), nested ones too ("1. 2. "): a list read aloud, not "one point"."""
_RULE = re.compile(r"^[ \t]*([-*_=])(?:[ \t]*\1){2,}[ \t]*$", re.MULTILINE)
_EMPHASIS = re.compile(r"\*+|`+")
_STRIKE = re.compile(r"~~")
_UNDERSCORE = re.compile(r"_+")  # __bold__ markers, and snake_case reads better as words
_LEADING_MARK = re.compile(r"^(?:[-*+•·▪‣◦]+\s+|>+\s*|#{1,6}\s+)+")
_TABLE_PIPE = re.compile(r"[ \t]*\|[ \t]*")
_SPACE = re.compile(r"\s+")
_GAP = "\x00"
"""Left where a URL, a link target or a citation mark was removed, until list numbers are dropped:
a number after one ("https://a.b 45. ") is no list number, even at the start of a piece."""


@functools.lru_cache(maxsize=20000)
def dropped(ch: str) -> bool:
    """True for a character ``clean`` removes: emoji, pictographs, their joiners and modifiers,
    control and format characters."""
    o = ord(ch)
    if ch in "\n\t":
        return False
    if (0x1F000 <= o <= 0x1FAFF or 0x2600 <= o <= 0x27BF or 0x2B00 <= o <= 0x2BFF
            or 0x2300 <= o <= 0x23FF or 0xE0000 <= o <= 0xE007F or 0xFE00 <= o <= 0xFE0F
            or o in (0x200D, 0x20E3, 0x3030, 0x303D, 0x3297, 0x3299, 0x00A9, 0x00AE, 0x2122)):
        return True
    return unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Cn")


def _drop_chars(text: str) -> str:
    out = []
    for ch in text:
        if " " <= ch < "\x7f" or ch in "\n\t":
            out.append(ch)
            continue
        if ch.isdecimal():  # any script's digit (٣, ３) becomes an ASCII digit
            out.append(str(unicodedata.decimal(ch)))
            continue
        if not dropped(ch):
            out.append(ch)
        elif unicodedata.category(ch) == "Cc":
            out.append(" ")
    return "".join(out)


_MARKUP = ((_FENCE, " "), (LINK, r"\1"), (LINK_TAIL, _GAP), (URL, " " + _GAP), (_CITATION, _GAP),
           (re.compile(r"[\[\]]"), " "),  # never spoken; a link's cut-off half
           (_RULE, " "), (_BULLET, ""), (_EMPHASIS, ""), (_STRIKE, ""), (_HEADING, ""), (_QUOTE, ""),
           (_UNDERSCORE, " "), (_TABLE_PIPE, " "))
"""What ``strip_markup`` replaces, in this order."""


def strip_markup(text: str) -> str:
    """``clean`` without its last steps: list numbers stay, and so do line breaks, spaces and _GAP."""
    text = _drop_chars(text.translate(_FULLWIDTH))
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return text


def starts_with_list_number(text: str) -> bool:
    """True when ``text`` opens with what ``clean`` drops as a list number at a line start."""
    return bool(_NUMBERED.match(strip_markup(text)))


def clean(text: str) -> str:
    """Strip markup and symbols a voice cannot read; collapse whitespace to single spaces."""
    if not text:
        return ""
    text = _NUMBERED.sub("", strip_markup(text)).replace(_GAP, "")
    text = _SPACE.sub(" ", text).strip()
    return _LEADING_MARK.sub("", text)  # bullet or quote marks the line rules could not see before collapsing
