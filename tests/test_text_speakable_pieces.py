"""Speakable output: LLM-style markdown cut into pieces (split_for_tts and the stream chunker) never
gives a piece longer than its limit in any language, and no marker, bullet or emoji reaches the
voice, while every word and number survives."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from rkvoice.text.clean import clean
from rkvoice.text.normalize import speakable
from rkvoice.text.split import CutPoints, split_for_tts
from rkvoice.text.stream_chunker import StreamChunker

CJK = "今天天气不错我们出去走走吧公园里的花都开了空气也很新鲜记得带上水和帽子"
ZH = st.text(alphabet=CJK, min_size=1, max_size=30)
EN_WORD = st.from_regex(r"[A-Za-z]{1,14}", fullmatch=True)
EN = st.lists(EN_WORD, min_size=1, max_size=12).map(" ".join)
NUMBER = st.sampled_from(["3.14", "2026-10-21", "22:05", "1,000", "45", "99.5%"])
EMOJI = st.sampled_from(["😀", "👍🏽", "🎉", "❤️", "👨‍👩‍👧"])
PLAIN = st.one_of(ZH, EN, NUMBER)


def spoken_size(text: str) -> int:
    """Characters of ``text`` a voice is handed: what every piece limit measures."""
    return CutPoints(text).size(0, len(text))


@st.composite
def inline(draw: st.DrawFn) -> str:
    body = draw(PLAIN)
    kind = draw(st.sampled_from(["plain", "plain", "bold", "italic", "code", "link", "emoji", "url"]))
    if kind == "bold":
        return f"**{body}**"
    if kind == "italic":
        return f"*{body}*"
    if kind == "code":
        return f"`{body}`"
    if kind == "link":
        return f"[{body}](https://example.com/{draw(EN_WORD)})"
    if kind == "emoji":
        return body + draw(EMOJI)
    if kind == "url":
        return f"{body} https://example.com/{draw(EN_WORD)}/{draw(EN_WORD)}"
    return body


@st.composite
def markdown(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        prefix = draw(st.sampled_from(["", "", "# ", "## ", "> ", "- ", "* ", "1. ", "2) "]))
        parts = draw(st.lists(inline(), min_size=1, max_size=5))
        seps = draw(st.lists(st.sampled_from([" ", "，", "。", ", ", ". ", "！"]), min_size=len(parts),
                             max_size=len(parts)))
        lines.append(prefix + "".join(p + s for p, s in zip(parts, seps)))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "```python\nprint(1)\n```")
    return "\n".join(lines)


MARKERS = re.compile(r"[*`#>]|\]\(|https?://")
BULLET = re.compile(r"(?:^|\n)[ \t]*(?:[-•]|\d{1,3}[.)、])[ \t]")
EMOJI_CHARS = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u200d\ufe0f]")


def spoken_words(text: str) -> str:
    """Letters, digits and Chinese characters a voice gets from ``text`` (markers removed)."""
    return "".join(re.findall(r"[^\W_]", clean(text)))


def check_pieces(text: str, pieces: list[str], first: int, chunk: int) -> None:
    assert "".join(pieces) == (text if text.strip() else "")
    start = 0
    for i, piece in enumerate(pieces):
        limit = first if i == 0 else chunk
        assert spoken_size(piece) <= limit, (i, piece, limit)
        said = clean(piece)
        assert len(said) <= limit, (i, piece, said, limit)
        assert not MARKERS.search(said), (piece, said)
        assert not EMOJI_CHARS.search(said), (piece, said)
        # a list bullet at a line start never survives (mid-line "45. " is a number, kept)
        at_line_start = start == 0 or text[start - 1] == "\n"
        assert not (at_line_start and BULLET.match(said)), (piece, said)
        start += len(piece)
    assert "".join(spoken_words(p) for p in pieces) == spoken_words(text)


@settings(max_examples=150, deadline=None)
@given(markdown(), st.integers(8, 40), st.integers(12, 60))
def test_split_for_tts_pieces_fit_and_carry_no_markers(text: str, first: int, chunk: int) -> None:
    check_pieces(text, split_for_tts(text, first=first, chunk=chunk), first, chunk)


@settings(max_examples=150, deadline=None)
@given(markdown(), st.integers(8, 40), st.integers(12, 60),
       st.lists(st.integers(1, 9), min_size=1, max_size=100))
def test_stream_chunker_pieces_fit_and_carry_no_markers(text: str, first: int, chunk: int,
                                                        sizes: list[int]) -> None:
    c = StreamChunker(first=first, chunk=chunk)
    pieces: list[str] = []
    i = 0
    for k in sizes:
        pieces += c.feed(text[i : i + k])
        i += k
    pieces += c.feed(text[i:]) + c.flush()
    check_pieces(text, pieces, first, chunk)


def test_stream_chunker_never_cuts_a_link_between_its_text_and_its_url() -> None:
    # found by hypothesis: fed 5/9 characters at a time, "[2026-10-21](h" was cut after "]", and
    # "[2026-10-21]" alone is cleaned away like a citation mark: the date was never said
    text = "[2026-10-21](https://example.com/A) \n上 \n上 \n上 \n上 "
    c = StreamChunker(first=10, chunk=12)
    pieces: list[str] = []
    i = 0
    for k in [5, 9] * 10:
        pieces += c.feed(text[i : i + k])
        i += k
    pieces += c.feed(text[i:]) + c.flush()
    check_pieces(text, pieces, 10, 12)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=120), st.integers(4, 40))
def test_any_text_never_gives_a_piece_over_the_limit(text: str, size: int) -> None:
    # from 4: a piece never starts with a list number ("123. ", cut nowhere inside)
    pieces = split_for_tts(text, first=size, chunk=size)
    assert "".join(pieces) == (text if text.strip() else "")
    assert all(spoken_size(p) <= size for p in pieces)


def test_long_english_word_number_and_bracket_are_cut_to_the_limit() -> None:
    for text in ("Pneumonoultramicroscopicsilicovolcanoconiosis is a long word.",
                 "号码是" + "1234567890" * 6 + "。",
                 "前面（" + "很长的括号内容" * 8 + "）后面。"):
        pieces = split_for_tts(text, first=24, chunk=40)
        assert "".join(pieces) == text
        assert all(spoken_size(p) <= (24 if i == 0 else 40) for i, p in enumerate(pieces)), pieces


def test_markdown_answer_is_spoken_without_markers() -> None:
    answer = ("## 今天的建议\n\n"
              "1. **带伞**：下午有雨 🌧️\n"
              "2. 查看 [天气预报](https://weather.example.com/today)\n"
              "- 用 `Python` 写代码\n"
              "> 引用一句话\n"
              "```bash\nls -la\n```")
    said = [speakable(p) for p in split_for_tts(answer, first=12, chunk=40)]
    joined = "".join(said)
    assert not MARKERS.search(joined) and not EMOJI_CHARS.search(joined), said
    for words in ("今天的建议", "带伞", "下午有雨", "天气预报", "Python", "引用一句话"):
        assert words in joined, (words, said)


@pytest.mark.parametrize("text", ["**45**. 上 ", "# 45. 上 ", "[45](https://example.com/a). 上 ",
                                  "45😀. 上 ", "> **2)** 上上上上 ", "- `3、` 上上上"])
@pytest.mark.parametrize("first,chunk", [(8, 12), (24, 40)])
def test_a_list_number_behind_markup_at_a_line_start_is_not_spoken(text: str, first: int, chunk: int) -> None:
    for lead in ("", "上上上。\n", "上上上上上上上上上上上上上上上上上上。\n"):
        pieces = split_for_tts(lead + text, first=first, chunk=chunk)
        check_pieces(lead + text, pieces, first, chunk)
        assert "45" not in clean(lead + text) and not any(d in "".join(map(clean, pieces)) for d in "2345")


@pytest.mark.parametrize("text", ["价格是 **45**. 上涨了。", "他说 45. 上", "共 [45](https://example.com/a). 上",
                                  "比分 45😀. 上"])
def test_a_number_behind_markup_inside_a_line_is_spoken(text: str) -> None:
    for first, chunk in ((8, 12), (24, 40)):
        pieces = split_for_tts(text, first=first, chunk=chunk)
        check_pieces(text, pieces, first, chunk)
        assert "45" in "".join(map(clean, pieces))


@pytest.mark.parametrize("text,sizes", [("上。45. 上 上 ", [1, 2]), ("上上上上 https://example.com/A/A 45. ", [1]),
                                        ("1. 45. \n上 ", [3])])
def test_cases_hypothesis_found_in_split_and_stream(text: str, sizes: list[int]) -> None:
    check_pieces(text, split_for_tts(text, first=8, chunk=12), 8, 12)
    c = StreamChunker(first=8, chunk=12)
    pieces: list[str] = []
    i = 0
    for k in sizes:  # a number arriving a character at a time may yet become a list number
        pieces += c.feed(text[i : i + k])
        i += k
    check_pieces(text, pieces + c.feed(text[i:]) + c.flush(), 8, 12)
