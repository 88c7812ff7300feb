"""A job's figures from :class:`joulestat.carbon.pricing.Pricer`, what ``joulestat compare``
and the dashboard both show, against ``footprint()`` on the job's whole series (the
reference) and numbers written out by hand; and the one "ended, or now" rule of
:class:`joulestat.carbon.held.Held` that every job record uses."""

from __future__ import annotations

from dataclasses import replace

import pytest

from joulestat.carbon import live
from joulestat.carbon.catalog import lookup
from joulestat.carbon.footprint import CarbonSettings, footprint
from joulestat.carbon.intensity import resolve_intensity
from joulestat.carbon.prices import parse_prices
from joulestat.carbon.pricing import NodeFigures, Pricer, placements, prices_used
from joulestat.store.jobs import JobNodePart, JobRef, PartTotals

NOW = 1_800_000_000.0
PARTS = (  # a GPU node that ended, a CPU node still running, one nobody can price
    PartTotals("gpu-0", "p4d.24xlarge", "us-east-1", NOW - 7200.0, NOW - 1800.0, 9.0e7, {}),
    PartTotals("cpu-0", "c6i.4xlarge", "eu-west-1", NOW - 3600.0, None, 3.6e6, {}),
)
LAPTOP = PartTotals("laptop", "local", "", NOW - 600.0, NOW, 3.6e5, {})


def reference(parts, settings=None, points=None):
    """``footprint()`` on the parts' energy as one point each (no live feed: when the
    energy was used does not matter)."""
    points = [(NOW - 60.0, p.node, p.total_j) for p in parts] if points is None else points
    return footprint(points, placements(parts, NOW), settings, now_s=NOW)


def close(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None
                                         and a == pytest.approx(b, rel=1e-9))


def test_held_is_to_the_end_or_to_now_and_never_negative():
    ended = JobRef("j", "j", "training", "ended", 100.0, 250.0)
    running = JobRef("k", "k", "training", "running", 100.0)
    assert (ended.end_s(1000.0), ended.held_s(1000.0)) == (250.0, 150.0)
    assert (running.end_s(1000.0), running.held_s(1000.0)) == (1000.0, 900.0)
    assert running.held_s(50.0) == 0.0  # a clock a tick behind charges nothing
    part = JobNodePart("n", "t", "r", 10.0, None, (), {}, {}, 0.0, {})
    assert part.held_s(70.0) == PARTS[1].held_s(NOW - 3540.0) == 60.0


def test_rates_scaled_per_node_equal_footprint_on_the_whole_job():
    for parts in (PARTS, (*PARTS, LAPTOP)):
        priced = Pricer().job(parts, NOW)
        expected = reference(parts)
        assert close(priced.operational_g, expected.operational_co2e_g)
        assert close(priced.embodied_g, expected.embodied_co2e_g)
        assert close(priced.cost_usd, expected.cost_usd)
        assert close(priced.total_g, expected.total_co2e_g)
        assert priced.notes == expected.notes
        costs = {n.node: n.cost_usd for n in expected.nodes}
        for figures, part in zip(priced.nodes, parts, strict=True):
            assert (figures.node, figures.instance_type, figures.energy_j) == (
                part.node, part.instance_type, part.total_j)
            assert figures.held_s == part.held_s(NOW)
            assert close(figures.cost_usd, costs[part.node])


def test_hand_computed_cost_and_the_sums_alone():
    table = parse_prices("instance_type,usd_per_hour\np4d.24xlarge,20\nc6i.4xlarge,0.5\n",
                         "/x/prices.csv")
    pricer = Pricer(CarbonSettings(prices=table))
    priced = pricer.job(PARTS, NOW)
    assert priced.nodes == (NodeFigures("gpu-0", "p4d.24xlarge", 5400.0, 9.0e7, 30.0),
                            NodeFigures("cpu-0", "c6i.4xlarge", 3600.0, 3.6e6, 0.5))
    assert priced.cost_usd == pytest.approx(30.5) and priced.notes == ()
    summed = pricer.cost(PARTS, NOW)
    assert (summed.operational_g, summed.embodied_g, summed.cost_usd) == (
        priced.operational_g, priced.embodied_g, priced.cost_usd)
    assert (summed.nodes, summed.notes) == ((), ())
    node = pricer.node_cost("c6i.4xlarge", "eu-west-1", 3.6e6, 7200.0)
    assert node.cost_usd == pytest.approx(1.0)


def test_an_unpriced_node_leaves_the_total_unknown_with_footprints_note():
    priced = Pricer().job((*PARTS, LAPTOP), NOW)
    assert priced.cost_usd is None and priced.embodied_g is None
    assert priced.nodes[-1].cost_usd is None and priced.operational_g > 0
    assert any("cost unknown for node laptop" in note for note in priced.notes)
    assert Pricer().cost((LAPTOP,), NOW).cost_usd is None


def test_live_intensity_prices_the_series_and_only_then_reads_it(monkeypatch):
    static = Pricer()
    assert static.job(PARTS, NOW, series=lambda: pytest.fail("read without live")) == (
        static.job(PARTS, NOW))

    class Client:  # Electricity Maps' latest value, without the network
        ttl_s = 900.0

        def latest(self, zone):
            return replace(resolve_intensity("eu-west-1"), g_per_kwh=500.0,
                           source=f"electricitymaps:{zone}")

    monkeypatch.setattr(live, "shared_client", lambda *args: Client())
    settings = CarbonSettings(electricity_maps_token="token")
    pricer = Pricer(settings)
    with pytest.raises(ValueError, match="series"):
        pricer.job(PARTS, NOW)
    points = [(NOW - 10.0, "cpu-0", 3.6e6), (NOW - 5400.0, "gpu-0", 9.0e7)]
    priced = pricer.job(PARTS, NOW, series=lambda: points)
    expected = reference(PARTS, settings, points)
    assert close(priced.operational_g, expected.operational_co2e_g)
    assert priced.operational_g > static.job(PARTS, NOW).operational_g  # the live 500 g
    assert close(priced.cost_usd, static.job(PARTS, NOW).cost_usd)
    assert pricer.cost(PARTS, NOW, series=lambda: points) == priced


def test_prices_used_name_where_each_price_came_from():
    table = parse_prices("instance_type,usd_per_hour\np4d.24xlarge,20\n", "/x/prices.csv")
    used = prices_used(["p4d.24xlarge", "c6i.4xlarge", "local", "p4d.24xlarge"],
                       CarbonSettings(prices=table))
    assert [(u.instance_type, u.usd_per_hour, u.source.split(":")[0]) for u in used] == [
        ("c6i.4xlarge", lookup("c6i.4xlarge").usd_per_hour, "catalog"),
        ("local", None, "unknown"),
        ("p4d.24xlarge", 20.0, "prices file /x/prices.csv"),
    ]
    [override] = prices_used(["local"], CarbonSettings(price_per_hour_usd=2.0))
    assert (override.usd_per_hour, override.source) == (2.0, "override")
