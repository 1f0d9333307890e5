"""split_for_tts(): issue examples, further cases, and property tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rkvoice.errors import RkvoiceError
from rkvoice.text.split import ABBREVIATIONS, CutPoints, split_for_tts

try:
    from test_text_strategies import CJK_RUN, assert_no_cut_inside, mixed_text
except ImportError:  # tests/ imported as a package
    from tests.test_text_strategies import (
        CJK_RUN,
        assert_no_cut_inside,
        mixed_text,
    )

# ---- abbreviations ------------------------------------------------------------------------


@pytest.mark.parametrize("abbr", sorted(ABBREVIATIONS))
def test_no_sentence_end_after_an_abbreviation(abbr: str) -> None:
    text = f"Ask {abbr} Brown today. Then go."
    assert CutPoints(text).levels[0] == [text.index("Then")]


# ---- split_for_tts --------------------------------------------------------------------------


def _size(piece: str) -> int:
    """Spoken characters (square brackets, markers, URLs and emoji are not spoken)."""
    return CutPoints(piece).size(0, len(piece))


def test_split_prefers_sentence_ends() -> None:
    text = "今天天气很好。我们去公园散步吧，然后去吃饭。晚上早点休息，明天还要上班呢。"
    pieces = split_for_tts(text)
    # greedy: two whole sentences fit the first 24 characters; the clause mark inside is not used
    assert pieces == ["今天天气很好。我们去公园散步吧，然后去吃饭。", "晚上早点休息，明天还要上班呢。"]
    assert split_for_tts(text, first=10, chunk=40) == [
        "今天天气很好。", "我们去公园散步吧，然后去吃饭。晚上早点休息，明天还要上班呢。"]


def test_split_first_piece_is_short() -> None:
    text = "现在是 2026-10-21 22:05，温度 45.2℃，IP 192.168.0.103。请拨打 110，我们明天见！"
    pieces = split_for_tts(text)
    assert "".join(pieces) == text
    assert _size(pieces[0]) <= 24
    assert pieces[0] == "现在是 2026-10-21 22:05，"
    assert all(_size(p) <= 40 for p in pieces)


def test_split_falls_back_to_clause_marks() -> None:
    text = "如果你明天早上有空的话，我们可以一起去图书馆看书，然后在附近的餐厅吃午饭，下午再去公园散步。"
    pieces = split_for_tts(text, first=24, chunk=40)
    assert pieces[0] == "如果你明天早上有空的话，"
    assert all(p.endswith(("，", "。")) for p in pieces)
    assert "".join(pieces) == text


def test_split_english_packs_sentences() -> None:
    text = "Please arrive early. Bring your ID. Call us if you are late, and we will help."
    pieces = split_for_tts(text, first=24, chunk=40)
    # the last sentence is 42 characters, so it is cut at its comma
    assert pieces == ["Please arrive early. ", "Bring your ID. ", "Call us if you are late, ", "and we will help."]
    assert split_for_tts(text, first=40, chunk=60) == [
        "Please arrive early. Bring your ID. ", "Call us if you are late, and we will help."]


@pytest.mark.parametrize("number", ["2026-10-21", "3.14159265", "1,000,000", "22:05", "192.168.0.1",
                                    "13812345678", "$3.50", "45.2℃", "99.5%"])
def test_split_never_cuts_a_number(number: str) -> None:
    for pad in range(30):
        text = "字" * pad + number + "字" * 30
        pieces = split_for_tts(text, first=24, chunk=24)
        assert "".join(pieces) == text
        assert any(number in p for p in pieces), (number, pieces)


def test_split_keeps_a_number_with_its_unit_and_chinese_dates_whole() -> None:
    text = "现在是2026年10月21日星期三晚上10点22分，温度25.5度。"
    for first in range(4, 30):
        pieces = split_for_tts(text, first=first, chunk=24)
        assert "".join(pieces) == text
        assert any("2026年10月21日" in p for p in pieces), pieces
        assert any("10点22分" in p for p in pieces), pieces
        assert any("25.5度" in p for p in pieces), pieces
    assert split_for_tts(text, first=24) == ["现在是2026年10月21日星期三晚上", "10点22分，温度25.5度。"]


@pytest.mark.parametrize("word", ["internationalization", "Python", "don't", "e-mail"])
def test_split_never_cuts_a_latin_word(word: str) -> None:
    for pad in range(30):
        text = "字" * pad + word + "字" * 30
        pieces = split_for_tts(text, first=24, chunk=24)
        assert any(word in p for p in pieces), (word, pieces)


def test_split_keeps_brackets_whole_when_they_fit_and_cuts_them_at_their_marks_when_not() -> None:
    text = "前面的文字（这是括号里的内容，很长的内容）后面的文字，还有更多。"
    pieces = split_for_tts(text, first=10, chunk=20)
    assert any("（这是括号里的内容，很长的内容）" in p for p in pieces)
    assert "".join(pieces) == text
    text = "前面的文字（这是括号里的内容，很长很长很长很长很长很长的内容，不能一起读）后面的文字，还有更多。"
    pieces = split_for_tts(text, first=10, chunk=12)
    assert "".join(pieces) == text
    assert all(_size(p) <= 12 for p in pieces), pieces
    assert "（这是括号里的内容，" in pieces  # cut at its own clause mark, not mid-word


def test_split_long_run_without_marks_is_cut_within_limits() -> None:
    text = "这是一个非常非常长的没有任何标点符号的句子它会被切开" * 5
    pieces = split_for_tts(text, first=24, chunk=40)
    assert _size(pieces[0]) == 24
    assert all(_size(p) <= 40 for p in pieces)
    assert "".join(pieces) == text


def test_split_english_long_sentence_cut_between_words() -> None:
    text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"
    pieces = split_for_tts(text, first=24, chunk=40)
    assert pieces[0] == "one two three four five "
    assert all(p.endswith(" ") for p in pieces[:-1])


def test_split_whitespace_and_edges() -> None:
    assert split_for_tts("") == []
    assert split_for_tts("  \n ") == []
    assert split_for_tts("  你好。  ") == ["  你好。  "]
    assert split_for_tts("a") == ["a"]
    with pytest.raises(RkvoiceError, match="first >= 1"):
        split_for_tts("你好", first=0)


def test_split_huge_text_is_fast_enough() -> None:
    text = ("现在是 2026-10-21 22:05，温度 45.2℃。Call 911 now. " * 600)[:20000]
    pieces = split_for_tts(text)
    assert "".join(pieces) == text
    assert all(_size(p) <= 40 for p in pieces)


@settings(max_examples=200, deadline=None)
@given(mixed_text(), st.integers(min_value=16, max_value=40), st.integers(min_value=16, max_value=60))
def test_split_properties_on_mixed_text(text: str, first: int, chunk: int) -> None:
    pieces = split_for_tts(text, first=first, chunk=chunk)
    if not text.strip():
        assert pieces == []
        return
    assert "".join(pieces) == text
    assert all(p.strip() for p in pieces)
    assert_no_cut_inside(text, pieces)
    assert _size(pieces[0]) <= first
    assert all(_size(p) <= chunk for p in pieces[1:])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.integers(min_value=1, max_value=50))
def test_split_any_text_keeps_every_character(text: str, size: int) -> None:
    pieces = split_for_tts(text, first=size, chunk=size)
    assert "".join(pieces) == (text if text.strip() else "")
    assert all(p.strip() for p in pieces)


@settings(max_examples=100, deadline=None)
@given(st.lists(CJK_RUN, min_size=1, max_size=10).map("，".join))
def test_split_chinese_clauses_only_cut_after_marks_when_they_fit(text: str) -> None:
    pieces = split_for_tts(text, first=30, chunk=30)
    for p in pieces[:-1]:
        if all(len(c) <= 29 for c in text.split("，")):
            assert p.endswith("，")
