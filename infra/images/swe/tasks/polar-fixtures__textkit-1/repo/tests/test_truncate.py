import pytest

from textkit import truncate


def test_short_text_is_unchanged():
    assert truncate("short", 10) == "short"


def test_exact_fit_is_unchanged():
    assert truncate("12345", 5) == "12345"


def test_long_text_is_cut_to_the_limit():
    out = truncate("a long sentence", 8)
    assert out == "a long \u2026" and len(out) == 8


def test_custom_ellipsis():
    assert truncate("abcdefgh", 6, ellipsis="...") == "abc..."


def test_limit_below_the_ellipsis():
    with pytest.raises(ValueError):
        truncate("abc", 2, ellipsis="...")
