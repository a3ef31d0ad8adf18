import pytest

from calckit import ParseError, evaluate, tokenize


def test_tokens():
    assert tokenize(" 12+(3 *4)") == [12, "+", "(", 3, "*", 4, ")"]


def test_a_number_is_its_own_value():
    assert evaluate("42") == 42


def test_addition():
    assert evaluate("1 + 2 + 3") == 6


def test_subtraction():
    assert evaluate("7 - 2") == 5


def test_multiplication_binds_tighter_than_addition():
    assert evaluate("2 + 3 * 4") == 14


def test_parentheses():
    assert evaluate("(1 + 2) * 3") == 9


def test_unary_minus():
    assert evaluate("-3 * -2") == 6


def test_division():
    assert evaluate("7 / 2") == 3.5


def test_division_by_zero():
    with pytest.raises(ZeroDivisionError):
        evaluate("1 / (2 - 2)")


def test_unknown_character():
    with pytest.raises(ParseError, match="unexpected character"):
        evaluate("2 ^ 3")


def test_trailing_tokens():
    with pytest.raises(ParseError, match="after the expression"):
        evaluate("1 2")


def test_unbalanced_parenthesis():
    with pytest.raises(ParseError):
        evaluate("(1 + 2")
