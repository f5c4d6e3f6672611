"""Reading what a command printed: its non-empty lines, and whether a rich table has a given row."""

from __future__ import annotations

import re


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def has_row(text: str, *cells: str) -> bool:
    """Whether a rich table in `text` has a row starting with these cells (whatever the column widths)."""
    pattern = r"│\s*" + r"\s*│\s*".join(re.escape(c) for c in cells) + r"\s*│"
    return re.search(pattern, text) is not None
