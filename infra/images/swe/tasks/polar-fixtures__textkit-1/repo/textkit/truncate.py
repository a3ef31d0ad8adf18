"""Strings cut to a length."""


def truncate(text, limit, ellipsis="\u2026"):
    """``text`` if it fits in ``limit`` characters, else its start and ``ellipsis``, ``limit``
    characters in all."""
    if limit < len(ellipsis):
        raise ValueError(f"limit {limit} is shorter than the ellipsis {ellipsis!r}")
    if len(text) <= limit:
        return text
    return text[: limit - len(ellipsis)] + ellipsis
