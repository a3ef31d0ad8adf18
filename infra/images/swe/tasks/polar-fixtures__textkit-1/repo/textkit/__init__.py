"""textkit: small text helpers."""

from textkit.slug import slugify
from textkit.truncate import truncate

__all__ = ["slugify", "truncate"]
