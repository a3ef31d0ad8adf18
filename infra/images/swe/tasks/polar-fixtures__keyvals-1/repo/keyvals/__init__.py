"""keyvals: INI-style settings files."""

from keyvals.parser import ParseError, parse

__all__ = ["ParseError", "parse"]
