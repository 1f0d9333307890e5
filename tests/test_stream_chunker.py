"""StreamChunker: waits for the deciding character, sentence/clause/size rules, join invariant."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rkvoice.errors import RkvoiceError
from rkvoice.text.stream_chunker import StreamChunker

try:
    from test_text_strategies import (
        CJK_RUN,
        NUMBER,
        WORD,
        assert_no_cut_inside,
        mixed_text,
    )
except ImportError:  # tests/ imported as a package
    from tests.test_text_strategies import (
        CJK_RUN,
        NUMBER,
        WORD,
        assert_no_cut_inside,
        mixed_text,
    )


def rules(first: int = 24, chunk: int = 40, **rule: int) -> StreamChunker:
    """A chunker whose clause/word rules (StreamChunker's class attributes) differ as ``rule`` says."""
    return type("Rules", (StreamChunker,), rule)(first, chunk)


def run(deltas: list[str], **kw: int) -> list[list[str]]:
    """Feed deltas one by one; return what each feed returned, then what flush returned."""
    c = StreamChunker(**kw)
    return [c.feed(d) for d in deltas] + [c.flush()]


def test_decimal_waits_for_next_character() -> None:
    assert run(["Pi is 3.", "14 ", "today. ", "Then"]) == [[], [], [], ["Pi is 3.14 today. "], ["Then"]]


def test_price_waits_for_next_character() -> None:
    c = StreamChunker()
    assert c.feed("It costs $29.") == []
    assert c.feed("99") == []
    assert c.feed(" each. ") == []
    assert c.feed("Next") == ["It costs $29.99 each. "]
    assert c.flush() == ["Next"]


def test_price_with_period_then_sentence() -> None:
    c = StreamChunker()
    assert c.feed("It costs $29.") == []
    assert c.feed(" T") == ["It costs $29. "]
    assert c.flush() == ["T"]


def test_sentence_emitted_once_the_next_word_starts() -> None:
    c = StreamChunker()
    assert c.feed("Hello there.") == []
    assert c.feed(" ") == []
    assert c.feed("How") == ["Hello there. "]
    assert c.feed(" are you?") == []
    assert c.flush() == ["How are you?"]


def test_abbreviation_is_not_a_sentence_end() -> None:
    c = StreamChunker()
    assert c.feed("Ask Dr. Smith") == []
    assert c.feed(" now. Then") == ["Ask Dr. Smith now. "]


def test_english_clause_needs_more_than_min_words() -> None:
    c = rules(first=80, chunk=80, first_clause_words=6)  # the later pieces' rule for the first too
    assert c.feed("Yes, I can, ") == []
    assert c.feed("and the clinic opens early, so") == ["Yes, I can, and the clinic opens early, "]
    assert c.flush() == ["so"]


def test_the_first_piece_is_the_first_clause_of_a_few_words() -> None:
    """The first sound waits for a short first clause only; later clauses keep the longer minimum."""
    c = StreamChunker(first=80, chunk=80)
    assert c.feed("Sure, ") == []  # one word: too short to say alone
    assert c.feed("thanks for asking, the") == ["Sure, thanks for asking, "]
    assert c.feed(" weather is fine, and") == []  # four words: a later clause needs more than five
    assert c.flush() == ["the weather is fine, and"]
    zh = StreamChunker()
    assert zh.feed("好的，") == []
    assert zh.feed("它很美，月") == ["好的，它很美，"]  # 7 characters: a first clause ("好的，" alone: 3)
    assert zh.feed("亮离地球很远，") == []  # later: a clause of a useful length (13 for 40)
    assert rules(first_clause_chars=8).feed("好的，它很美，月") == []  # the rule before


def test_english_max_words_without_punctuation() -> None:
    words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    c = StreamChunker(first=80, chunk=80)
    out = []
    for w in words.split():
        out += c.feed(w + " ")
    assert out == ["one two three four five six seven eight nine ten eleven twelve "]
    assert c.flush() == ["thirteen fourteen "]


def test_word_is_not_split_across_deltas() -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    c = StreamChunker(first=80, chunk=80)  # max_words 12
    out = []
    for i in range(0, len(words), 3):
        out += c.feed(words[i:i + 3])
    assert out == []  # the twelfth word might still go on
    assert c.feed("x") == []
    assert c.feed(" nu") == [words[:-2] + "mux "]


def test_english_pieces_keep_the_character_limits() -> None:
    text = "The clinic opens at eight tomorrow morning and closes at six in the evening, every day."
    c = StreamChunker(first=24, chunk=40)
    out = [p for w in text.split(" ") for p in c.feed(w + " ")] + c.flush()
    assert "".join(out) == text + " "
    assert len(out[0].strip()) <= 24 and all(len(p.strip()) <= 40 for p in out[1:]), out
    assert out[0] == "The clinic opens at "  # cut between words, never inside one
    # 41 characters of English where the limit is 40: cut, not spoken as one piece
    sentence = "Remember to bring water and a warm hat ok."
    pieces = run([sentence + " Next"], first=40, chunk=40)
    assert all(len(p.strip()) <= 40 for feed in pieces for p in feed), pieces


def test_chinese_sentence_and_first_piece() -> None:
    c = StreamChunker()
    out = []
    for ch in "好的。现在是2026年10月21日晚上10点05分，今天天气不错，温度是45.2℃，适合出门散步。":
        out += c.feed(ch)
    out += c.flush()
    # 今天天气不错， is too short a clause on its own; with the next clause it is worth a piece
    assert out == ["好的。", "现在是2026年10月21日晚上10点05分，", "今天天气不错，温度是45.2℃，", "适合出门散步。"]


def test_chinese_closing_quote_stays_with_sentence() -> None:
    c = StreamChunker()
    assert c.feed("他说：“好。") == []
    assert c.feed("”") == []
    assert c.feed("然后") == ["他说：“好。”"]


def test_chinese_long_run_cut_at_limit_without_splitting_numbers() -> None:
    text = "这是一段没有标点的很长的文字我们的服务器地址是192.168.100.103请不要随意修改它谢谢你的配合"
    c = StreamChunker(first=24, chunk=40)
    out = []
    for ch in text:
        out += c.feed(ch)
    out += c.flush()
    assert "".join(out) == text
    assert len(out[0]) <= 24
    assert any("192.168.100.103" in p for p in out)


def test_chinese_short_clause_waits() -> None:
    c = StreamChunker()
    assert c.feed("好，") == []
    assert c.feed("我") == []  # a two-character clause is too short to be worth a TTS call
    assert c.flush() == ["好，我"]


def test_long_unbreakable_run_does_not_hold_back_earlier_words() -> None:
    c = StreamChunker()
    out = []
    for ch in "see https://example.com/" + "a" * 400:
        out += c.feed(ch)
    assert out == ["see "]
    assert c.flush() == ["https://example.com/" + "a" * 400]


def test_flush_and_empty_stream() -> None:
    c = StreamChunker()
    assert c.flush() == []
    assert c.feed("   ") == []
    assert c.flush() == []
    assert c.feed("ok") == []
    assert c.flush() == ["ok"]
    assert c.flush() == []


def test_reset_forgets_pending_text() -> None:
    c = StreamChunker()
    c.feed("Some words that")
    c.reset()
    assert c.pending == ""
    assert c.flush() == []


def test_bad_arguments() -> None:
    with pytest.raises(RkvoiceError, match="StreamChunker needs"):
        StreamChunker(first=0)
    with pytest.raises(RkvoiceError, match="needs a str"):
        StreamChunker().feed(None)  # type: ignore[arg-type]


def _feed_in_sizes(text: str, sizes: list[int], **kw: int) -> list[str]:
    c = rules(**kw)
    out: list[str] = []
    i = 0
    for k in sizes:
        if i >= len(text):
            break
        out += c.feed(text[i:i + k])
        i += k
    if i < len(text):
        out += c.feed(text[i:])
    out += c.flush()
    return out


SIZES = st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(mixed_text(), SIZES)
def test_stream_join_invariant_and_no_split_tokens(text: str, sizes: list[int]) -> None:
    pieces = _feed_in_sizes(text, sizes)
    if not text.strip():
        assert pieces == []
        return
    assert "".join(pieces) == text
    assert all(p.strip() for p in pieces)
    assert_no_cut_inside(text, pieces)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(CJK_RUN, NUMBER), min_size=1, max_size=30), st.lists(st.sampled_from(["，", "。", ""]),
                                                                               min_size=30, max_size=30), SIZES)
def test_stream_chinese_pieces_respect_limits(tokens: list[str], marks: list[str], sizes: list[int]) -> None:
    text = "".join(t + m for t, m in zip(tokens, marks))
    pieces = _feed_in_sizes(text, sizes, first=24, chunk=40)
    assert "".join(pieces) == text
    assert len(pieces[0]) <= 24
    assert all(len(p) <= 40 for p in pieces[1:])
    # every token is at most 12 characters; when no two numbers touch, a cut between tokens fits
    touching = any(a[-1:].isdigit() and m == "" and (b[:1].isdigit() or b[:1] in ".,:-/")
                   for a, m, b in zip(tokens, marks, tokens[1:]))
    if not touching:
        assert_no_cut_inside(text, pieces)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(WORD, NUMBER, st.sampled_from(["and,", "then.", "Yes!", "$29.99", "3.14"])),
                min_size=1, max_size=60), SIZES)
def test_stream_english_pieces_have_at_most_max_words(words: list[str], sizes: list[int]) -> None:
    text = " ".join(words)
    pieces = _feed_in_sizes(text, sizes, max_words=12)
    assert "".join(pieces) == text
    assert all(len(p.split()) <= 12 for p in pieces)
    assert_no_cut_inside(text, pieces)


@settings(max_examples=100, deadline=None)
@given(mixed_text(max_tokens=20))
def test_stream_whole_text_at_once(text: str) -> None:
    pieces = _feed_in_sizes(text, [len(text) or 1])
    assert "".join(pieces) == (text if text.strip() else "")
