"""Hypothesis strategies for random mixed Chinese / English / number text, shared by the text tests.

No tests here; imported by test_text_split.py and test_stream_chunker.py."""

from __future__ import annotations

import re

from hypothesis import strategies as st

# What must never be cut: Latin words, digit runs with their separators.
PROTECTED = re.compile(r"[A-Za-z]+|\d+(?:[.,:/\-]\d+)*")

CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严龙飞"
CJK_RUN = st.text(alphabet=CJK, min_size=1, max_size=12)
WORD = st.from_regex(r"[A-Za-z]{1,12}", fullmatch=True)
NUMBER = st.one_of(
    st.from_regex(r"\d{1,6}", fullmatch=True),
    st.from_regex(r"\d{1,3}\.\d{1,3}", fullmatch=True),
    st.from_regex(r"\d{4}-\d{2}-\d{2}", fullmatch=True),
    st.from_regex(r"\d{1,2}:\d{2}", fullmatch=True),
    st.from_regex(r"\d{1,3}(,\d{3}){1,2}", fullmatch=True),
    st.from_regex(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}", fullmatch=True),
)
PUNCT = st.sampled_from(["，", "。", "！", "？", "；", "、", "：", ",", ".", "!", "?", ";", ":", "…"])
SEPARATOR = st.sampled_from([" ", " ", "，", "。", "、", ", ", ". ", "! ", "？", "  ", "\n"])


@st.composite
def bracketed(draw: st.DrawFn) -> str:
    opener, closer = draw(st.sampled_from([("(", ")"), ("（", "）"), ("[", "]"), ("【", "】"), ("“", "”")]))
    inner = draw(st.lists(st.one_of(WORD, CJK_RUN, NUMBER, PUNCT), min_size=1, max_size=3))
    text = " ".join(inner)[:14]
    return opener + text + closer


TOKEN = st.one_of(CJK_RUN, WORD, NUMBER, PUNCT, bracketed())


@st.composite
def mixed_text(draw: st.DrawFn, max_tokens: int = 40) -> str:
    """Tokens always joined by a separator, so no unbreakable stretch is longer than 16 chars."""
    tokens = draw(st.lists(TOKEN, min_size=1, max_size=max_tokens))
    seps = draw(st.lists(SEPARATOR, min_size=len(tokens), max_size=len(tokens)))
    lead = draw(st.sampled_from(["", "", " "]))
    return lead + "".join(t + s for t, s in zip(tokens, seps))


def protected_spans(text: str) -> list[tuple[int, int]]:
    """Spans that no cut may fall strictly inside: words, digit runs, bracket groups."""
    spans = [m.span() for m in PROTECTED.finditer(text)]
    pairs = {"(": ")", "（": "）", "[": "]", "【": "】", "“": "”"}
    i = 0
    while i < len(text):
        closer = pairs.get(text[i])
        if closer is not None:
            j = text.find(closer, i + 1)
            if j > 0:
                spans.append((i, j + 1))
                i = j + 1
                continue
        i += 1
    return spans


def cut_positions(pieces: list[str]) -> list[int]:
    out, pos = [], 0
    for p in pieces[:-1]:
        pos += len(p)
        out.append(pos)
    return out


NUMBER_AFTER = re.compile(r"[ \t]*\d{1,3}[.)、][ \t]")
"""A number that would read as a list number if a piece started with it ("0. "): the splitter never
cuts before it inside a line, so a span right before it may have to be cut inside when too long."""


def assert_no_cut_inside(text: str, pieces: list[str]) -> None:
    spans = [(a, b) for a, b in protected_spans(text) if not NUMBER_AFTER.match(text, b)]
    for cut in cut_positions(pieces):
        for a, b in spans:
            assert not a < cut < b, f"cut at {cut} splits {text[a:b]!r} in {pieces!r}"
