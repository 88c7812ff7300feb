"""The dashboard prices with the file ``joulestat dashboard --prices`` hands it.

``JOULESTAT_PRICES`` (what the command sets) must change every cost the pages show, be
named where cost is shown, and never leave a rate cached from other prices: the table is
part of ``joulestat.dashboard.costing``'s cache keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from joulestat.carbon.catalog import lookup
from joulestat.dashboard import costing
from tests.helpers.dashboard_app import sample_store_url

APP = str(Path(__file__).resolve().parents[3] / "dashboard" / "app.py")


def prices_file(tmp_path: Path, usd_per_hour: float, name: str = "prices.csv") -> Path:
    path = tmp_path / name
    path.write_text(f"# ours\ninstance_type,usd_per_hour\nml.g5.xlarge,{usd_per_hour}\n")
    return path


def test_costing_uses_the_file_in_the_environment(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    spec = lookup("ml.g5.xlarge")
    assert spec is not None and spec.sagemaker_usd_per_hour is not None
    monkeypatch.delenv(costing.ENV_PRICES, raising=False)
    catalog = costing.node_cost("ml.g5.xlarge", "us-east-1", 0.0, 7200.0)
    assert catalog.cost_usd == pytest.approx(2 * spec.sagemaker_usd_per_hour)

    monkeypatch.setenv(costing.ENV_PRICES, str(prices_file(tmp_path, 0.5)))
    assert costing.node_cost("ml.g5.xlarge", "us-east-1", 0.0, 7200.0).cost_usd == (
        pytest.approx(1.0))  # 2 h x the file's 0.5, not the cached catalog rate
    assert costing.node_cost("g5.xlarge", "us-east-1", 0.0, 3600.0).cost_usd == (
        pytest.approx(lookup("g5.xlarge").usd_per_hour))  # not in the file: catalog
    assert f"prices file `{tmp_path / 'prices.csv'}`" in costing.price_source()

    monkeypatch.setenv(costing.ENV_PRICES, str(prices_file(tmp_path, 0.25, "other.csv")))
    assert costing.node_cost("ml.g5.xlarge", "us-east-1", 0.0, 7200.0).cost_usd == (
        pytest.approx(0.5))  # another file, another key
    monkeypatch.delenv(costing.ENV_PRICES)
    assert costing.node_cost("ml.g5.xlarge", "us-east-1", 0.0, 7200.0).cost_usd == (
        pytest.approx(2 * spec.sagemaker_usd_per_hour))
    assert "catalog list prices" in costing.price_source()


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return sample_store_url(tmp_path_factory.mktemp("dash-prices"))


def run_overview(url: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("JOULESTAT_DB", url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/overview.py").run()
    return at


def test_the_pages_name_the_prices_file(sample_url: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = prices_file(tmp_path, 0.5)
    monkeypatch.setenv(costing.ENV_PRICES, str(path))
    at = run_overview(sample_url, monkeypatch)
    assert not at.exception, [e.value for e in at.exception]
    captions = [c.value for c in at.sidebar.caption]
    assert any(f"prices file `{path}`" in c for c in captions), captions
    [cost] = [m for m in at.metric if m.label == "Cost"]
    assert str(path) in cost.proto.help


def test_a_bad_file_stops_the_pages_naming_file_and_line(sample_url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("instance_type,usd_per_hour\nml.g5.xlarge,cheap\n")
    monkeypatch.setenv(costing.ENV_PRICES, str(bad))
    at = run_overview(sample_url, monkeypatch)
    errors = [e.value for e in at.error]
    assert any(f"{bad} line 2" in e and "JOULESTAT_PRICES" in e for e in errors), errors
    assert not at.metric  # nothing priced with a file that cannot be read
