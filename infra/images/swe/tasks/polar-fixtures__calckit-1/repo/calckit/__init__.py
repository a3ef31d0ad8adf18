"""calckit: evaluate small arithmetic expressions."""

from calckit.evaluator import ParseError, evaluate, tokenize

__all__ = ["ParseError", "evaluate", "tokenize"]
