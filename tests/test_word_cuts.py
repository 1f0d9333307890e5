"""No TTS piece ends inside a word: over a corpus of real sentences (tests/fixtures/cut_corpus.txt:
news, questions, mixed Chinese and English, numbers and dates, the assistant's own answers), cut
whole (split_for_tts) and streamed in random deltas (StreamChunker), at the piece sizes the
product uses and others.

"A word" is what jieba's dictionary makes of the whole sentence (rjieba, the segmenter the cutter
uses; the reference segmentation is of the finished sentence, so a streamed cut made before the
rest of a word arrived is caught) and every run of Latin letters and digits. A cut inside one is
allowed only when that word alone is longer than the piece's limit.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import rjieba
from hypothesis import given, settings, strategies as st

from rkvoice.text.split import CutPoints, split_for_tts
from rkvoice.text.stream_chunker import StreamChunker

CORPUS = [line for line in (Path(__file__).parent / "fixtures" / "cut_corpus.txt").read_text(encoding="utf-8")
          .splitlines() if line.strip() and not line.startswith("#")]
HAN = re.compile(r"[\u4e00-\u9fff]")
LATIN_RUN = re.compile(r"[A-Za-z0-9]+")
SIZES = [(8, 16), (12, 40), (16, 24), (24, 40)]
"""(first, later) piece sizes: the product's (tts.first_chars 12 and 24, chunk 40) and smaller."""


def words(text: str) -> list[tuple[int, int]]:
    """(start, end) of every word of two or more characters: jieba's with Chinese in it, Latin runs."""
    spans = [(a, b) for w, a, b in rjieba.tokenize(text) if b - a > 1 and HAN.search(w)]
    return spans + [m.span() for m in LATIN_RUN.finditer(text) if len(m.group()) > 1]


def split_words(text: str, pieces: list[str], first: int, later: int) -> list[str]:
    """The words a cut between ``pieces`` falls inside, each as 'left|right', unless that word alone
    is longer than the limit of the piece it ends."""
    assert "".join(pieces) == text
    bad = []
    k = 0
    for i, piece in enumerate(pieces[:-1]):
        k += len(piece)
        limit = first if i == 0 else later
        for a, b in words(text):
            if a < k < b and CutPoints(text[a:b]).size(0, b - a) <= limit:
                bad.append(f"{text[a:k]}|{text[k:b]}")
    return bad


@pytest.mark.parametrize(("first", "later"), SIZES)
def test_no_piece_of_a_whole_text_ends_inside_a_word(first: int, later: int) -> None:
    failures = {}
    for text in CORPUS:
        pieces = split_for_tts(text, first, later)
        if bad := split_words(text, pieces, first, later):
            failures[text] = (bad, pieces)
    assert not failures, failures


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CORPUS), st.sampled_from(SIZES), st.lists(st.integers(1, 4), min_size=60, max_size=60))
def test_no_streamed_piece_ends_inside_a_word(text: str, sizes: tuple[int, int], steps: list[int]) -> None:
    """Deltas of 1-4 characters, as an LLM's tokens arrive: the cut is decided on the text so far,
    and must still fall between words of the finished sentence."""
    chunker = StreamChunker(*sizes)
    pieces: list[str] = []
    k = 0
    for step in steps:
        if k >= len(text):
            break
        pieces += chunker.feed(text[k:k + step])
        k += step
    pieces += chunker.feed(text[k:]) + chunker.flush()
    assert not split_words(text, pieces, *sizes), pieces


def test_the_mixed_sentence_keeps_write_code_whole() -> None:
    """The sentence that showed it: at the 12-character first piece, '写代' | '码' was the cut."""
    text = "我每天用Python写代码，也用GitHub管理项目。"
    first = split_for_tts(text, 12, 40)[0]
    assert first == "我每天用Python"
    chunker = StreamChunker(12, 40)
    streamed = [p for ch in text for p in chunker.feed(ch)] + chunker.flush()
    assert streamed[0] == "我每天用Python"


def test_a_word_longer_than_the_limit_is_still_cut() -> None:
    """The fallback stays: a stretch with no boundary within the limit is cut where it must be."""
    pieces = split_for_tts("中华人民共和国", 4, 4)
    assert "".join(pieces) == "中华人民共和国"
    assert all(CutPoints(p).size(0, len(p)) <= 4 for p in pieces)
