import pytest

from keyvals import ParseError, parse


def test_sections_and_keys():
    text = "[server]\nhost = example.org\nport = 8080\n\n[client]\nretries = 3\n"
    assert parse(text) == {"server": {"host": "example.org", "port": "8080"}, "client": {"retries": "3"}}


def test_keys_before_any_section():
    assert parse("name = demo\n[a]\nx = 1\n") == {"": {"name": "demo"}, "a": {"x": "1"}}


def test_comments_and_blank_lines_are_skipped():
    assert parse("# a comment\n; another\n\n[a]\nx = 1\n") == {"a": {"x": "1"}}


def test_empty_value():
    assert parse("[a]\nx =\n") == {"a": {"x": ""}}


def test_a_later_key_wins():
    assert parse("[a]\nx = 1\nx = 2\n") == {"a": {"x": "2"}}


def test_a_line_without_equals_names_its_line():
    with pytest.raises(ParseError, match="line 3"):
        parse("[a]\nx = 1\noops\n")


def test_unterminated_header():
    with pytest.raises(ParseError, match="unterminated"):
        parse("[a\n")
