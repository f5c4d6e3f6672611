"""Tables that stay readable at any width: a number, an id or a time is never cut.

rich fits a table too wide for the terminal by wrapping its cells and, when that is not enough, by
cutting every column short with "…", numbers included; in a pipe (80 columns) most tables came out as
`+8.…` and `pred…`. Here each column says what it holds: values to keep whole on one line (numbers, ids,
times, states) or text that may wrap (names, hosts, details), and how soon it may be left out. A table
that fits is printed as rich prints it. One that does not first loses its box lines (as `leasewise
report` does when narrow), then wraps its text and its headers; and when even that is too wide, its
least important columns are left out and a footnote names them (`--json` has every column). Every cell
is shown as `printable` makes it: a name holding escape codes or a bidi override prints them spelled out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from orchestrator.model.text import printable

#: a text column is not made narrower than this (or than its longest word, if shorter) before a column
#: is left out: words up to this long, numbers among them, stay whole
TEXT_MIN = 12
#: a narrow table's layout: no box lines, one space between columns
COMPACT: dict[str, Any] = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "padding": (0, 0)}
_UNBOUNDED = 1 << 20


@dataclass(frozen=True)
class Column:
    """One column of a table: its header, and how it gives way when the table is too wide."""

    header: str
    justify: JustifyMethod = "left"
    wraps: bool = False   # text that may wrap (names, hosts, details); else each value stays on one line
    drop: int = 0         # too narrow: columns with drop 1 are left out first, then 2, ...; 0: always shown
    style: str | None = None


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]],
                **table_options: Any) -> None:
    """Print the table fitted to the console's width, then a footnote naming the columns left out."""
    table, left_out = fit_table(console, columns, rows, **table_options)
    console.print(table)
    if left_out:
        console.print(f"({', '.join(left_out)}: left out to fit {console.width} columns; --json has every column)",
                      style="dim", markup=False, soft_wrap=True)


def fits(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], **table_options: Any) -> bool:
    """Whether the table fits the console's width as rich prints it (nothing wrapped or left out)."""
    return _width(console, _table(columns, rows, range(len(columns)), table_options)) <= console.width


def fit_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]],
              **table_options: Any) -> tuple[Table, list[str]]:
    """The table to print at the console's width, and the headers of the columns left out of it.

    `rows` hold rich markup, one string per column; `table_options` go to `rich.table.Table`."""
    shown = list(range(len(columns)))
    if fits(console, columns, rows, **table_options):
        return _table(columns, rows, shown, table_options), []
    options = {**table_options, **COMPACT}
    texts = [[console.render_str(printable(cell)) for cell in row] for row in rows]
    while True:
        table = _table(columns, rows, shown, options)
        if _width(console, table) <= console.width:
            break
        least = [_least_width(console, columns[i], [row[i] for row in texts]) for i in shown]
        spare = console.width - _width(console, _table(columns, rows, shown, options, least))
        droppable = [i for i in shown if columns[i].drop]
        if spare >= 0 or not droppable:
            most = [_most_width(console, columns[i], [row[i] for row in texts]) for i in shown]
            extra = _share(max(spare, 0), [m - w for m, w in zip(most, least)])
            table = _table(columns, rows, shown, options, [w + e for w, e in zip(least, extra)])
            break
        shown.remove(min(droppable, key=lambda i: (columns[i].drop, -i)))
    left_out = [" ".join(Text.from_markup(c.header).plain.split()) for i, c in enumerate(columns) if i not in shown]
    return table, left_out


def _table(columns: Sequence[Column], rows: Sequence[Sequence[str]], shown: Sequence[int],
           options: dict[str, Any], widths: Sequence[int] | None = None) -> Table:
    if isinstance(options.get("title"), str):
        options = {**options, "title": printable(options["title"])}
    table = Table(**options)
    for n, i in enumerate(shown):
        c = columns[i]
        table.add_column(c.header, justify=c.justify, style=c.style, overflow="fold",
                         width=None if widths is None else widths[n])
    for row in rows:
        table.add_row(*(printable(row[i]) for i in shown))   # (stored text: its control codes spelled out)
    return table


def _width(console: Console, table: Table) -> int:
    """How wide `table` is when nothing makes it narrower."""
    return console.measure(table, options=console.options.update_width(_UNBOUNDED)).maximum


def _lines(text: Text) -> list[str]:
    return text.plain.split("\n")


def _words(text: Text) -> list[str]:
    return text.plain.split()


def _least_width(console: Console, column: Column, cells: Sequence[Text]) -> int:
    """The narrowest the column can be: its longest value (whole columns) or TEXT_MIN (text), and its
    header's longest word (headers wrap between words)."""
    header = console.render_str(column.header)
    header_word = max((cell_len(w) for w in _words(header)), default=1)
    if column.wraps:
        longest_word = max((cell_len(w) for cell in cells for w in _words(cell)), default=1)
        return max(min(max(longest_word, header_word), TEXT_MIN), 1)
    longest_value = max((cell_len(line) for cell in cells for line in _lines(cell)), default=1)
    return max(longest_value, header_word)


def _most_width(console: Console, column: Column, cells: Sequence[Text]) -> int:
    """The widest the column needs to be: its longest line, header included."""
    header = console.render_str(column.header)
    return max(cell_len(line) for text in (header, *cells) for line in _lines(text))


def _share(spare: int, wants: Sequence[int]) -> list[int]:
    """`spare` characters shared among columns in proportion to what each still wants (none more)."""
    wants = [max(w, 0) for w in wants]
    total = sum(wants)
    if total <= spare:
        return list(wants)
    shares = [spare * w // total for w in wants]
    left = spare - sum(shares)
    for i in sorted(range(len(wants)), key=lambda i: wants[i] - shares[i], reverse=True)[:left]:
        shares[i] += 1
    return shares
