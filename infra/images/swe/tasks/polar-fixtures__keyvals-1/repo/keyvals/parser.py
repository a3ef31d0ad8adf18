"""The parser: text in, ``{section: {key: value}}`` out (keys before any header go in "")."""

COMMENT_PREFIXES = ("#", ";")


class ParseError(ValueError):
    """A line that is none of header, setting, comment or blank; names its line number."""

    def __init__(self, lineno, message):
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


def parse(text):
    sections = {}
    current = sections.setdefault("", {})
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(COMMENT_PREFIXES):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ParseError(lineno, "unterminated section header")
            current = sections.setdefault(line[1:-1].strip(), {})
            continue
        if "=" not in line:
            raise ParseError(lineno, f"expected 'key = value', got {line!r}")
        key, value = line.split("=")
        key = key.strip()
        if not key:
            raise ParseError(lineno, "empty key")
        current[key] = value.strip()
    if not sections[""]:
        del sections[""]
    return sections
