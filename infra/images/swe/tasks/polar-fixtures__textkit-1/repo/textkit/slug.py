"""URL slugs."""


def slugify(text, separator="-"):
    """``text`` lower-cased, its letters and digits kept, every run of anything else
    between them turned into one ``separator``; none at either end."""
    pieces = []
    for char in text.lower():
        if char.isalnum():
            pieces.append(char)
        else:
            pieces.append(separator)
    return "".join(pieces).strip(separator)
