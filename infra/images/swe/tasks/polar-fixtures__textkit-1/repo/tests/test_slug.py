from textkit import slugify


def test_words_are_joined():
    assert slugify("Hello World") == "hello-world"


def test_digits_are_kept():
    assert slugify("Top 10 Tips") == "top-10-tips"


def test_another_separator():
    assert slugify("snake case please", separator="_") == "snake_case_please"


def test_no_separator_at_the_ends():
    assert slugify(" padded ") == "padded"


def test_non_ascii_letters_are_letters():
    assert slugify("Crème Brûlée") == "crème-brûlée"
