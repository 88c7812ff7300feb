"""TDP lookup against the real CSV: CodeCarbon 3.3.2's, shipped in joulestat's package data."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from joulestat.devices.cpu_tdp import bundled_table, lookup_tdp, normalise_cpu_name


@pytest.fixture(scope="module")
def table() -> dict[str, str]:
    path = bundled_table()
    assert path.is_file(), "cpu_power.csv must ship in joulestat's package data"
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["Name", "TDP"]
    return {row[0]: row[1] for row in rows[1:]}


@pytest.mark.parametrize(
    "cpuinfo_name, row, spec_tdp_w",
    [
        # Intel ARK / AMD specs: 8375C 300 W, Gold 6148 150 W, E5-2686 v4 145 W, 7R13 225 W.
        ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "Intel Xeon Platinum 8375C", 300),
        ("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", "Intel Xeon Gold 6148", 150),
        ("Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "Intel Xeon E5-2686 v4", 145),
        ("AMD EPYC 7R13 48-Core Processor", "AMD EPYC 7R13", 225),
    ],
)
def test_cpuinfo_names_resolve_to_the_right_row(
    table: dict[str, str], cpuinfo_name: str, row: str, spec_tdp_w: float
) -> None:
    match = lookup_tdp(cpuinfo_name)
    assert match is not None
    assert match.matched_name == row
    assert match.tdp_w == float(table[row]) == spec_tdp_w
    assert match.exact is False


def test_exact_row_name_is_an_exact_match(table: dict[str, str]) -> None:
    match = lookup_tdp("Intel Xeon Platinum 8375C")
    assert match is not None and match.exact
    assert match.tdp_w == float(table["Intel Xeon Platinum 8375C"])


@pytest.mark.parametrize(
    "name",
    [
        "Totally Fake CPU 9000",
        "Intel(R) Xeon(R) Processor",  # what KVM guests often report: a family, not a part
        "Intel(R) Xeon(R) Gold 6148X CPU @ 2.40GHz",  # not a real part: no near-miss match
        "Intel Xeon Platinum 837",  # a prefix of a real row
        "",
        "unknown",
    ],
)
def test_garbage_and_near_misses_do_not_match(name: str) -> None:
    assert lookup_tdp(name) is None


def test_rows_that_disagree_make_a_name_ambiguous(table: dict[str, str]) -> None:
    # The table lists the Atom E625CT twice, with two different TDPs.
    variants = {v for k, v in table.items() if normalise_cpu_name(k) == "atom e625ct"}
    assert len({float(v) for v in variants}) > 1
    assert lookup_tdp("Intel(R) Atom(TM) CPU E625CT") is None


def test_rows_that_agree_still_match(table: dict[str, str]) -> None:
    rows = [k for k in table if normalise_cpu_name(k) == "ryzen 7 1700"]
    assert len(rows) > 1 and len({float(table[r]) for r in rows}) == 1
    match = lookup_tdp("AMD Ryzen(TM) 7 1700")
    assert match is not None and match.tdp_w == float(table[rows[0]])


def test_normalisation_drops_only_decoration() -> None:
    assert normalise_cpu_name("Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz") == "core i7-8700k"
    assert normalise_cpu_name("AMD Ryzen 7 5800U with Radeon Graphics") == "ryzen 7 5800u"
    assert normalise_cpu_name("AMD EPYC 9654 96-Core Processor") == "epyc 9654"
    assert normalise_cpu_name("Intel Core  i5+8400   X") == "core i5+8400 x"


def test_custom_table_with_bad_header_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "cpu.csv"
    bad.write_text("Model,Watts\nFoo 1,10\n")
    with pytest.raises(ValueError, match="Name,TDP"):
        lookup_tdp("Foo 1", table_path=bad)


def test_unreadable_tdp_rows_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "cpu.csv"
    path.write_text("Name,TDP\nFoo 1,27.29.5\nFoo 2,35\n")
    assert lookup_tdp("Foo 1", table_path=path) is None
    match = lookup_tdp("Foo 2", table_path=path)
    assert match is not None and match.tdp_w == 35.0
