"""`orchestrator.cli.tables`: a table that fits is rich's own; one that does not loses its box lines, wraps
its text and headers, then leaves out its least important columns (named in a footnote), and never cuts
a number, an id or a time."""

import io

from rich.console import Console
from rich.table import Table

from orchestrator.cli.tables import TEXT_MIN, Column, _share, fit_table, print_table

TIMES = ["2027-03-01T10:00:00Z", "2027-03-01T12:30:00Z", "2027-03-02T00:00:00Z"]
COLUMNS = [Column("id", "right"), Column("name", wraps=True, drop=2), Column("kind", drop=1),
           Column("start"), Column("end"), Column("memory MiB", "right"), Column("hosts", wraps=True, drop=3)]
ROWS = [[str(i + 1), f"experiment-{i}-with-a-rather-long-name", "best-effort", TIMES[i], TIMES[(i + 1) % 3],
         str(16384 * (i + 1)), ", ".join(f"lab{h}" for h in range(i + 1))] for i in range(3)]


def console(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, highlight=False, color_system=None)


def render(width: int, columns=COLUMNS, rows=ROWS, **options) -> tuple[str, list[str]]:
    out = console(width)
    table, left_out = fit_table(out, columns, rows, **options)
    out.print(table)
    return out.file.getvalue(), left_out


def test_a_table_that_fits_is_printed_as_rich_prints_it():
    text, left_out = render(200, title="leases")
    plain = Table(title="leases")
    for c in COLUMNS:
        plain.add_column(c.header, justify=c.justify)
    for row in ROWS:
        plain.add_row(*row)
    expected = console(200)
    expected.print(plain)
    assert left_out == []
    assert text == expected.file.getvalue()


def test_too_narrow_it_drops_the_box_lines_before_any_column():
    text, left_out = render(130)
    assert left_out == []
    assert "│" not in text and "┃" not in text
    assert all(len(line) <= 130 for line in text.splitlines())


def test_too_narrow_for_every_column_the_least_important_go_first():
    text, left_out = render(80)
    assert left_out == ["kind"]
    text, left_out = render(62)
    assert left_out == ["name", "kind"]          # named in the table's order, dropped by rank
    assert "best-effort" not in text and "experiment" not in text
    text, left_out = render(55)
    assert left_out == ["name", "kind", "hosts"]


def test_numbers_ids_and_times_are_never_cut_at_any_width_their_columns_fit():
    for width in (150, 120, 100, 80, 70, 62, 55):
        text, left_out = render(width)
        assert "…" not in text, width
        assert all(len(line) <= width for line in text.splitlines()), width
        for row in ROWS:
            for column, cell in zip(COLUMNS, row):
                if not column.wraps and column.header not in left_out:
                    assert cell in text, (width, cell)


def test_text_wraps_and_a_long_word_folds_instead_of_being_cut():
    columns = [Column("id", "right"), Column("detail", wraps=True)]
    rows = [["7", "planned vm " + TIMES[0] + " on a-very-long-host-name-that-cannot-fit-anywhere-at-all"]]
    text, left_out = render(40, columns, rows)
    assert left_out == [] and "…" not in text
    assert "".join(text.split()).count("a-very-long-host-name-that-cannot-fit-anywhere-at-all") == 1
    assert TIMES[0] in text                                   # a word up to the column's width stays whole


def test_headers_of_narrow_columns_wrap_between_words():
    columns = [Column("size MiB", "right"), Column("predicted downtime ms", "right"), Column("note", wraps=True)]
    rows = [["128", "97.7", "a note long enough to need wrapping when the table is narrow"]]
    text, _ = render(30, columns, rows)
    lines = text.splitlines()
    assert any("predicted" in line and "downtime" not in line for line in lines)
    assert "97.7" in text and "128" in text


def test_a_text_column_keeps_at_least_text_min_characters():
    columns = [Column("when"), Column("text", wraps=True)]
    rows = [[TIMES[0], "x" * 40]]
    text, _ = render(len(TIMES[0]) + 1 + TEXT_MIN, columns, rows)
    body = [line for line in text.splitlines() if TIMES[0] in line]
    assert body and body[0].endswith("x" * TEXT_MIN)


def test_print_table_names_what_it_left_out():
    out = console(55)
    print_table(out, COLUMNS, ROWS)
    footnote = out.file.getvalue().splitlines()[-1]
    assert footnote == "(name, kind, hosts: left out to fit 55 columns; --json has every column)"


def test_share_gives_out_exactly_the_spare_and_no_column_more_than_it_wants():
    assert _share(10, [4, 4]) == [4, 4]
    shares = _share(7, [10, 5, 0])
    assert sum(shares) == 7 and shares[2] == 0 and shares[0] >= shares[1]
    assert _share(0, [3, 3]) == [0, 0]
