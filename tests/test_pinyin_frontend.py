"""The FastSpeech2 pinyin frontend against the model's own symbol map (baker_mapper.json)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from rkvoice.config import load_config
from rkvoice.tts.pinyin_frontend import PinyinFrontend

MAPPER = load_config().models.path / "portable" / "fastspeech2" / "baker_mapper.json"
BREAKS = {"#0", "#1", "#2", "#3"}


def from_mapper() -> PinyinFrontend:
    data = json.loads(MAPPER.read_text(encoding="utf-8"))
    return PinyinFrontend(dict(data["symbol_to_id"]), dict(data["pinyin_dict"]))


@pytest.fixture(scope="module")
def fe() -> PinyinFrontend:
    if not MAPPER.is_file():
        pytest.skip(f"{MAPPER} not installed (run ./install.sh)")
    return from_mapper()


def syllables(fe: PinyinFrontend, text: str) -> list[str]:
    """Symbols without sil/breaks, initials joined to their finals: ['n i2', 'h ao3']."""
    out: list[str] = []
    for s in fe.symbols(text):
        if s == "sil" or s in BREAKS:
            continue
        if s[-1].isdigit():
            if out and out[-1] and not out[-1][-1].isdigit():
                out[-1] = f"{out[-1]} {s}"
            else:
                out.append(s)  # erhua er5 stands alone
        else:
            out.append(s)
    return out


def test_sequence_shape_and_ids(fe: PinyinFrontend) -> None:
    assert fe.symbols("中文") == ["sil", "zh", "ong1", "#0", "^", "uen2", "sil"]
    ids = fe.ids("中文")
    assert ids[-1] == fe.symbol_to_id["eos"]
    assert ids[:-1] == [fe.symbol_to_id[s] for s in fe.symbols("中文")]


def test_punctuation_becomes_one_major_break(fe: PinyinFrontend) -> None:
    syms = fe.symbols("“你们”，好！？……走吧。")
    assert syms[0] == "sil" and syms[-1] == "sil"
    assert syms.count("#3") == 2  # after 你们 and after 好; none at the edges
    assert all(not (a in BREAKS and b in BREAKS) for a, b in zip(syms, syms[1:]))
    assert syms[1] not in BREAKS and syms[-2] not in BREAKS


def test_third_tone_sandhi(fe: PinyinFrontend) -> None:
    assert syllables(fe, "你好") == ["n i2", "h ao3"]
    assert syllables(fe, "展览馆") == ["zh an2", "l an2", "g uan3"]
    assert syllables(fe, "好") == ["h ao3"]


def test_yi_and_bu_sandhi(fe: PinyinFrontend) -> None:
    assert syllables(fe, "一个")[0] == "^ i2"  # before tone 4
    assert syllables(fe, "一天")[0] == "^ i4"  # before tone 1
    assert syllables(fe, "第一")[1] == "^ i1"  # ordinal
    assert syllables(fe, "统一") [1] == "^ i1"  # final
    assert syllables(fe, "看一看")[1] == "^ i5"  # between reduplicated verbs
    assert syllables(fe, "不对")[0] == "b u2"
    assert syllables(fe, "不好")[0] == "b u4"
    assert syllables(fe, "是不是")[1] == "b u5"


def test_erhua_joins_the_syllable_but_real_er_stays(fe: PinyinFrontend) -> None:
    syms = fe.symbols("玩儿")
    assert syms == ["sil", "^", "uan2", "er5", "sil"]  # no #0 before the r-colouring
    assert fe.symbols("女儿") == ["sil", "n", "v3", "#0", "^", "er2", "sil"]
    assert "er5" not in fe.symbols("我儿子")


def test_neutral_tone_and_umlaut(fe: PinyinFrontend) -> None:
    assert syllables(fe, "帽子")[-1] == "z ii5"
    assert syllables(fe, "绿") == ["l v4"]
    assert syllables(fe, "学") == ["x ve2"]


def test_unpronounceable_text_gives_nothing(fe: PinyinFrontend) -> None:
    for text in ["", "   ", "😀😀", "。，！", "#@%"]:
        assert fe.symbols(text) == []
        assert fe.ids(text) == []


def test_unknown_characters_are_dropped(fe: PinyinFrontend) -> None:
    assert fe.symbols("你😀好") == fe.symbols("你好")


def test_digits_and_short_latin_words_are_read(fe: PinyinFrontend) -> None:
    assert syllables(fe, "3个") == ["s an1", "g e4"]
    gps = syllables(fe, "GPS")
    assert gps[0] == "j i4" and len(gps) == 4  # G, P, S = two syllables
    assert fe.symbols("打开internationalization") == fe.symbols("打开")  # long word dropped


def test_fullwidth_letters_and_digits_read_like_ascii(fe: PinyinFrontend) -> None:
    assert fe.symbols("３个ＧＰＳ") == fe.symbols("3个GPS")


def test_common_polyphones_follow_the_phrase(fe: PinyinFrontend) -> None:
    assert syllables(fe, "银行")[1] == "h ang2"
    assert syllables(fe, "长大")[0] == "zh ang3"
    assert syllables(fe, "睡觉")[1] == "j iao4"
    assert syllables(fe, "音乐")[1] == "^ ve4"


def test_clauses_split_after_punctuation(fe: PinyinFrontend) -> None:
    assert fe.clauses("你好，世界。再见") == ["你好，", "世界。", "再见"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("你好一不儿女的了吗。，！？ a1Z😀\n") + ["\u4e00"]), max_size=30))
def test_any_text_gives_a_well_formed_sequence(text: str) -> None:
    if not MAPPER.is_file():
        pytest.skip(f"{MAPPER} not installed (run ./install.sh)")
    fe = from_mapper()
    syms = fe.symbols(text)
    if syms:
        assert syms[0] == "sil" and syms[-1] == "sil"
        assert all(s in fe.symbol_to_id for s in syms)
        assert all(not (a in BREAKS and b in BREAKS) for a, b in zip(syms, syms[1:]))
        assert syms[1] not in BREAKS and syms[-2] not in BREAKS
