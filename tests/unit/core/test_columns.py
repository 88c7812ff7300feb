"""Terminal tables (:mod:`joulestat.core.columns`): widths in terminal columns, cells that
cannot move the cursor."""

from __future__ import annotations

from joulestat.core.columns import cell, table, width


def test_width_counts_terminal_columns() -> None:
    assert width("plain") == 5
    assert width("训练") == 4  # wide
    assert width("cafe\u0301") == 4  # a combining accent takes none
    assert width("\u0915\u094d\u200d\u0937") == 2  # Devanagari with a zero-width joiner


def test_cells_escape_what_would_move_the_cursor() -> None:
    assert cell("a\tb\nc") == "a\\u0009b\\u000ac"
    assert cell("x\u202ey") == "x\\u202ey"  # a bidi override: shown, not obeyed
    assert cell("a\u200db") == "a\u200db"  # the joiner is text
    assert cell(12) == "12"


def test_every_row_has_its_columns_where_the_header_has_them() -> None:
    lines = table(("id", "name", "energy", "nodes"),
                  [("codecarbon:0f1e2d3c-4b5a-6978", "训练", "45.0 mJ", "n1 (local)"),
                   ("ab12", "cafe\u0301", "3.40 MJ", "n2 (local), n3 (g5.xlarge)")],
                  right=(2,))
    assert lines[0] == "id                             name   energy  nodes"
    starts = [lines[0].index(n) for n in ("name", "nodes")]
    for line in lines[1:]:
        # Display columns: a wide character is two, a combining mark none.
        columns = []
        for ch in line:
            if ch == "\u0301":
                columns[-1] += ch
            else:
                columns += [ch, ""] if ch in "训练" else [ch]
        assert all(columns[s - 1] == " " and columns[s] != " " for s in starts), line
        end = lines[0].index("energy") + len("energy")
        assert columns[end - 1] != " " and columns[end] == " "
    assert not any(line.endswith(" ") for line in lines)
