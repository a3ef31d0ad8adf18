"""A recursive-descent evaluator for integer arithmetic.

Grammar::

    expression := term (("+" | "-") term)*
    term       := factor (("*" | "/") factor)*
    factor     := NUMBER | "-" factor | "(" expression ")"
"""

import re

_TOKEN = re.compile(r"\s*(?:(\d+)|(\S))")
OPERATORS = "+-*/()"


class ParseError(ValueError):
    """The text is not an expression."""


def tokenize(text):
    """Numbers as ints, operators and parentheses as one-character strings."""
    tokens = []
    for number, symbol in _TOKEN.findall(text):
        if number:
            tokens.append(int(number))
        elif symbol in OPERATORS:
            tokens.append(symbol)
        else:
            raise ParseError(f"unexpected character {symbol!r}")
    return tokens


class _Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        token = self.peek()
        if token is None:
            raise ParseError("unexpected end of expression")
        self.pos += 1
        return token

    def expression(self):
        left = self.term()
        if self.peek() in ("+", "-"):
            op = self.take()
            right = self.expression()
            return left + right if op == "+" else left - right
        return left

    def term(self):
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            right = self.factor()
            if op == "*":
                value = value * right
            elif right == 0:
                raise ZeroDivisionError("division by zero")
            else:
                value = value / right
        return value

    def factor(self):
        token = self.take()
        if isinstance(token, int):
            return token
        if token == "-":
            return -self.factor()
        if token == "(":
            value = self.expression()
            if self.take() != ")":
                raise ParseError("expected ')'")
            return value
        raise ParseError(f"unexpected {token!r}")


def evaluate(text):
    """The value of the expression in ``text``."""
    parser = _Parser(tokenize(text))
    value = parser.expression()
    if parser.peek() is not None:
        raise ParseError(f"unexpected {parser.peek()!r} after the expression")
    return value
