"""``--prices FILE``: reading the file, and where its rows sit in the price precedence.

The CLI side (compare, report, instances, the dashboard command, env and TOML) is in
tests/system/test_prices_cli.py; here the parser and ``price_per_hour()`` alone,
with every expected value written out by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.carbon.catalog import lookup, price_per_hour
from joulestat.carbon.footprint import CarbonSettings, NodePlacement, footprint
from joulestat.carbon.prices import PricesError, load_prices, parse_prices, prices_option

GOOD = """\
# negotiated rates, us-east-1
instance_type,usd_per_hour,note

ML.P4D.24xlarge,25.10,1-year Savings Plan
g5.xlarge , 0.61 ,spot average
my-own-box,0,"on-prem, paid for"
"""


def write(tmp_path: Path, text: str, name: str = "prices.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_rows_comments_blanks_case_and_extra_columns(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    table = load_prices(path)
    assert table.path == str(path.resolve())
    assert table.source == f"prices file {path.resolve()}"
    assert [(r.instance_type, r.usd_per_hour, r.line) for r in table.rows] == [
        ("ML.P4D.24xlarge", 25.10, 4), ("g5.xlarge", 0.61, 5), ("my-own-box", 0.0, 6)]
    assert table.get("ml.p4d.24XLARGE").usd_per_hour == 25.10  # case-insensitive
    assert table.get("p4d.24xlarge") is None  # exact: EC2 is not SageMaker
    assert table.get(None) is None
    # frozen and hashable: the same file read twice is the same (cache) key
    assert load_prices(path) == table and hash(load_prices(path)) == hash(table)


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("", 1, "empty"),
    ("# only a comment\n", 1, "empty"),
    ("g5.xlarge,1.0\n", 1, "expected a header"),
    ("instance_type,price\ng5.xlarge,1.0\n", 1, "expected a header"),
    ("instance_type,usd_per_hour\n", None, "no prices after the header"),
    ("instance_type,usd_per_hour\n# fine\ng5.xlarge,cheap\n", 3, "not a number: 'cheap'"),
    ("instance_type,usd_per_hour\ng5.xlarge,-1\n", 2, "finite number >= 0"),
    ("instance_type,usd_per_hour\ng5.xlarge,nan\n", 2, "finite number >= 0"),
    ("instance_type,usd_per_hour\ng5.xlarge,inf\n", 2, "finite number >= 0"),
    ("instance_type,usd_per_hour\ng5.xlarge,1\nG5.XLARGE,2\n", 3, "already priced on line 2"),
    ("instance_type,usd_per_hour\ng5.xlarge\n", 2, "expected 2 columns"),
    ("instance_type,usd_per_hour\ng5 xlarge,1\n", 2, "one word"),
    ("instance_type,usd_per_hour\n,1\n", 2, "one word"),
])
def test_every_fault_names_the_file_and_line(tmp_path: Path, text: str, line: int | None,
                                             problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PricesError) as error:
        load_prices(path)
    message = str(error.value)
    where = f"{path.resolve()} line {line}:" if line is not None else f"{path.resolve()}:"
    assert message.startswith(where), message
    assert problem in message, message


def test_missing_file_and_empty_setting(tmp_path: Path) -> None:
    with pytest.raises(PricesError, match="cannot read"):
        load_prices(tmp_path / "nope.csv")
    assert prices_option(None) is None and prices_option("  ") is None
    with pytest.raises(PricesError, match="path of a CSV file"):
        prices_option(3)


def test_precedence_override_then_file_then_catalog_then_unknown(tmp_path: Path) -> None:
    table = parse_prices(GOOD, "/x/prices.csv")
    # 1. --price-per-hour: one price for everything, the file notwithstanding
    price = price_per_hour("ml.p4d.24xlarge", 2.0, table)
    assert (price.usd_per_hour, price.source) == (2.0, "override")
    assert "--price-per-hour" in price.note
    # 2. the file's row for this exact type
    price = price_per_hour("ml.p4d.24xlarge", None, table)
    assert (price.usd_per_hour, price.source) == (25.10, "prices file /x/prices.csv")
    assert "line 4 of --prices /x/prices.csv" in price.note
    assert price_per_hour("my-own-box", None, table).usd_per_hour == 0.0  # free, not unknown
    # 3. the catalog for a type the file leaves out (SageMaker column for ml.*)
    price = price_per_hour("ml.g5.xlarge", None, table)
    spec = lookup("ml.g5.xlarge")
    assert spec is not None and price.usd_per_hour == spec.sagemaker_usd_per_hour
    assert price.source.startswith("catalog:")
    # 4. unknown, saying what to type and that the file has no row for it
    price = price_per_hour("zz9.large", None, table)
    assert price.usd_per_hour is None and price.source == "unknown"
    assert "/x/prices.csv has no row for it" in price.note
    assert "--price-per-hour USD or --prices FILE" in price.note


def test_footprint_charges_each_node_its_own_files_price() -> None:
    table = parse_prices(GOOD, "/x/prices.csv")
    found = footprint([], {"a": NodePlacement("ml.p4d.24xlarge", "us-east-1", 7200.0),
                           "b": NodePlacement("g5.xlarge", "us-east-1", 1800.0)},
                      CarbonSettings(prices=table), now_s=0.0)
    assert found.cost_usd == pytest.approx(25.10 * 2 + 0.61 * 0.5)
    assert {n.node: n.price.source for n in found.nodes} == {
        "a": "prices file /x/prices.csv", "b": "prices file /x/prices.csv"}
    assert "--price-per-hour" in found.methodology and "--prices" in found.methodology
