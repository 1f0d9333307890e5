"""Chinese readings: every example from the issue plus further cases by the same rules."""

from __future__ import annotations

from datetime import date, datetime, time

import pytest
from hypothesis import given, settings, strategies as st

from rkvoice.errors import RkvoiceError
from rkvoice.text.spoken_numbers import cn_date, cn_dec, cn_digits, cn_int, cn_time


@pytest.mark.parametrize("n, want", [
    (0, "零"), (10, "十"), (12, "十二"), (20, "二十"), (105, "一百零五"), (1000, "一千"),
    (1010, "一千零一十"), (3893, "三千八百九十三"), (10000, "一万"), (100200, "十万零二百"),
    (120000000, "一亿二千万"), (-7, "负七"),
    # further cases
    (2, "二"), (11, "十一"), (19, "十九"), (110, "一百一十"), (200, "二百"), (2222, "二千二百二十二"),
    (1001, "一千零一"), (10001, "一万零一"), (10010, "一万零一十"), (15000, "一万五千"),
    (100000, "十万"), (110000, "十一万"), (1000000, "一百万"), (10005000, "一千万零五千"),
    (100000000, "一亿"), (100010000, "一亿零一万"), (200000002, "二亿零二"), (-10, "负十"),
    (2340, "二千三百四十"),
])
def test_cn_int(n: int, want: str) -> None:
    assert cn_int(n) == want


@pytest.mark.parametrize("x, want", [
    (45.2, "四十五点二"), ("3.50", "三点五"), (-5.5, "负五点五"), (0.05, "零点零五"), ("12.0", "十二"),
    ("50.8", "五十点八"), ("0.5", "零点五"), ("100.25", "一百点二五"), (7, "七"), ("-0.0", "零"),
    ("10.10", "十点一"), (3.14159, "三点一四一五九"),
])
def test_cn_dec(x: float | str, want: str) -> None:
    assert cn_dec(x) == want


@pytest.mark.parametrize("s, want", [
    ("192.168.0.103", "一九二点一六八点零点一零三"), ("110", "一一零"), ("127.0.0.1", "一二七点零点零点一"),
    ("138-0013-8000", "一三八零零一三八零零零"), ("2026", "二零二六"), ("", ""),
])
def test_cn_digits(s: str, want: str) -> None:
    assert cn_digits(s) == want


@pytest.mark.parametrize("d, want", [
    (date(2026, 10, 21), "二零二六年十月二十一日 星期三"),
    (datetime(2026, 10, 21, 22, 5), "二零二六年十月二十一日 星期三"),
    (date(2026, 1, 1), "二零二六年一月一日 星期四"),
    (date(2026, 10, 25), "二零二六年十月二十五日 星期日"),
    (date(2000, 2, 29), "二零零零年二月二十九日 星期二"),
    (date(2026, 10, 24), "二零二六年十月二十四日 星期六"),
    (date(2026, 10, 19), "二零二六年十月十九日 星期一"),
])
def test_cn_date(d: date, want: str) -> None:
    assert cn_date(d) == want


@pytest.mark.parametrize("hm, want", [
    ((22, 5), "晚上十点零五分"), ((22, 0), "晚上十点整"), ((14, 30), "下午两点三十分"),
    ((12, 30), "中午十二点三十分"), ((0, 30), "凌晨十二点三十分"), ((7, 15), "早上七点十五分"),
    # period boundaries and the 两 / 十二 hours
    ((4, 59), "凌晨四点五十九分"), ((5, 0), "早上五点整"), ((8, 59), "早上八点五十九分"),
    ((9, 0), "上午九点整"), ((11, 10), "上午十一点十分"), ((12, 0), "中午十二点整"),
    ((13, 1), "下午一点零一分"), ((17, 9), "下午五点零九分"), ((18, 0), "晚上六点整"),
    ((23, 59), "晚上十一点五十九分"), ((2, 2), "凌晨两点零二分"), ((0, 0), "凌晨十二点整"),
    ((20, 20), "晚上八点二十分"),
])
def test_cn_time(hm: tuple[int, int], want: str) -> None:
    assert cn_time(time(*hm)) == want
    assert cn_time(datetime(2026, 10, 21, *hm)) == want


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(RkvoiceError, match="cn_int needs an int"):
        cn_int("12")  # type: ignore[arg-type]
    with pytest.raises(RkvoiceError, match="decimal"):
        cn_dec("abc")
    with pytest.raises(RkvoiceError, match="date"):
        cn_date("2026-10-21")  # type: ignore[arg-type]
    with pytest.raises(RkvoiceError, match="time"):
        cn_time("22:05")  # type: ignore[arg-type]


_VALUE = dict(zip("零一二三四五六七八九", range(10)))
_UNIT = {"十": 10, "百": 100, "千": 1000}


def _parse_cn(s: str) -> int:
    """Independent reader of cn_int output (for the round-trip property)."""
    sign = -1 if s.startswith("负") else 1
    s = s.removeprefix("负")
    total = section = digit = 0
    for ch in s:
        if ch in _VALUE:
            digit = _VALUE[ch]
        elif ch in _UNIT:
            section += (digit or 1) * _UNIT[ch]
            digit = 0
        elif ch == "万":
            total += (section + digit) * 10000
            section = digit = 0
        elif ch == "亿":
            total = (total + section + digit) * 100000000
            section = digit = 0
    return sign * (total + section + digit)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_cn_int_reads_back(n: int) -> None:
    text = cn_int(n)
    assert _parse_cn(text) == n
    assert "两" not in text
    assert "零零" not in text
    assert not text.endswith("零") or n == 0


@settings(max_examples=200, deadline=None)
@given(st.decimals(min_value=-10000, max_value=10000, places=3, allow_nan=False))
def test_cn_dec_has_no_trailing_zero(x) -> None:  # type: ignore[no-untyped-def]
    text = cn_dec(str(x))
    assert not text.endswith("点")
    if "点" in text:
        assert not text.endswith("零")
