"""Text people give, and text shown back to people: what a name may hold, and how stored text is printed.

A terminal obeys escape codes, a newline starts a row of its own, and a right-to-left override (U+202E)
turns what follows around: a name holding them would make every other user's `lease list` print what its
owner chose. So text that names something (a lease, a note, a host) is refused when it holds characters of
the Unicode categories Cc (controls), Cf (format: bidi overrides, zero-width), Zl and Zp (line and paragraph
separators) or Cs (lone surrogates, which no encoder writes) -- `check_printable` -- and every text read
back from the store is shown through `printable`, which spells such characters out (`\\x1b`, `\\u202e`), so
rows written before these checks are harmless too.
"""

from __future__ import annotations

import unicodedata

from orchestrator.model.errors import InvalidRequest, shown

#: the categories no name may hold and no output shows as they are
UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def unprintable_at(text: str) -> int | None:
    """The index of the first character of `UNPRINTABLE` categories in `text`, or None."""
    if text.isprintable():   # (the usual case, in C: no Cc, Cf, Cs, Co, Cn, Zl, Zp, nor Zs but ' ')
        return None
    for index, ch in enumerate(text):
        if unicodedata.category(ch) in UNPRINTABLE:
            return index
    return None


def escaped(ch: str) -> str:
    """One character as Python writes it in a string literal: `\\x1b`, `\\u202e`, `\\U000e0001`."""
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: object) -> str:
    """`text` (any value: its str) as it may reach a terminal, a log or a page: each character of the
    `UNPRINTABLE` categories spelled out as an escape. The one function every output of stored text goes
    through (tables, `lease show`, notices, logs, the web pages)."""
    if not isinstance(text, str):
        text = str(text)
    if text.isprintable():
        return text
    return "".join(escaped(ch) if unicodedata.category(ch) in UNPRINTABLE else ch for ch in text)


def printable_lines(text: str) -> str:
    """`printable`, line by line: the newlines of a text meant to have several (a log's traceback) stay."""
    return "\n".join(printable(line) for line in text.split("\n"))


def check_printable(value: object, field: str, *, max_length: int, allow_empty: bool = False) -> str:
    """`value` if it is a string of at most `max_length` characters, without characters of the
    `UNPRINTABLE` categories (and not blank, unless `allow_empty`); else one `InvalidRequest` naming `field`."""
    if not isinstance(value, str):
        raise InvalidRequest(field, f"must be text (got {shown(value)})")
    if not allow_empty and not value.strip():
        raise InvalidRequest(field, "must not be empty")
    if len(value) > max_length:
        raise InvalidRequest(field, f"is too long ({len(value)} characters; at most {max_length})")
    at = unprintable_at(value)
    if at is not None:
        raise InvalidRequest(field, f"must not hold control or format characters (newlines, escape codes, "
                                    f"bidi overrides: {escaped(value[at])} at character {at + 1})")
    return value
