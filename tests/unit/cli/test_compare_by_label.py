"""``joulestat compare --by label:KEY`` never pools jobs of different setups into one row.

A review found "concurrency=1" pooling a c6i job with a g5 job and reading "×7.3
throughput vs concurrency=1": a change of hardware presented as a change of load. When
the grouped jobs span several setups, each row is one label value on one setup
(``concurrency=1 · g5.xlarge``); with one setup the rows stay ``concurrency=1``. The
real command runs in this process (tests/helpers/cli.py) on a store written through
the store API (:mod:`tests.helpers.compare_store`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulestat.core.records import JobRecord
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from tests.helpers.compare_store import PINNED, T0, compare_invoke, node, run_job


def labelled(job_id: str, started_s: float, concurrency: int, setup: str) -> JobRecord:
    """A run labelled with its load level and, as ``joulestat demo`` labels its runs,
    its setup."""
    return JobRecord(id=job_id, name="bert-serve", kind="inference",
                     labels={"concurrency": str(concurrency), "setup": setup},
                     pids=frozenset({1}), started_s=started_s, origin="api",
                     ended_s=started_s + 3600)


@pytest.fixture()
def store(tmp_path: Path) -> str:
    """bert-serve at concurrency 1 and 4 on a g5, and at concurrency 1 on a c6i."""
    url = f"sqlite:///{tmp_path / 'labels.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    for job, where, units in (
            (labelled("g5-c1", T0, 1, "g5.xlarge"), node("g5-1", "g5.xlarge"), 2_500),
            (labelled("g5-c4", T0 + 3600, 4, "g5.xlarge"), node("g5-1", "g5.xlarge"), 7_500),
            (labelled("c6i-c1", T0 + 7200, 1, "c6i.4xlarge"), node("c6i-1", "c6i.4xlarge"),
             500)):
        run_job(engine, where, job, ticks=4, gpu_j=90_000.0, units={"inference": units})
    engine.dispose()
    return url


def rows(url: str, *args: str, by: str = "label:concurrency") -> list[dict]:
    result = compare_invoke(url, "--by", by, "--json", *args, *PINNED)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["rows"]


def test_a_label_row_is_one_setup_when_the_jobs_span_several(store: str) -> None:
    found = rows(store)
    assert [r["group"] for r in found] == ["concurrency=1 · g5.xlarge",
                                           "concurrency=4 · g5.xlarge",
                                           "concurrency=1 · c6i.4xlarge"]
    assert all(len(r["instance_types"]) == 1 for r in found)  # never "mixed"
    text = compare_invoke(store, "--by", "label:concurrency",
                       "--baseline", "concurrency=1 · g5.xlarge", *PINNED)
    assert text.returncode == 0, text.stderr
    assert "concurrency=4 · g5.xlarge vs concurrency=1 · g5.xlarge: ×3.0 throughput" in (
        text.stdout), text.stdout
    assert "concurrency=1 · c6i.4xlarge vs concurrency=1 · g5.xlarge: " in text.stdout


def test_a_value_on_several_setups_is_no_baseline_and_one_setup_keeps_plain_rows(
        store: str) -> None:
    ambiguous = compare_invoke(store, "--by", "label:concurrency", "--baseline", "1", *PINNED)
    assert ambiguous.returncode == 2
    assert "--baseline" in ambiguous.stderr and "one per setup" in ambiguous.stderr
    assert "concurrency=1 · g5.xlarge, concurrency=1 · c6i.4xlarge" in ambiguous.stderr
    one_setup = compare_invoke(store, "--by", "label:concurrency", "--baseline", "4", "--json",
                            *PINNED)  # "4" is on one setup only: that row
    assert one_setup.returncode == 0, one_setup.stderr
    [base] = [r for r in json.loads(one_setup.stdout)["rows"] if r["is_baseline"]]
    assert base["group"] == "concurrency=4 · g5.xlarge"
    g5_only = rows(store, "--jobs", "g5-c1", "g5-c4")
    assert [r["group"] for r in g5_only] == ["concurrency=1", "concurrency=4"]
    # A label that names each job's setup already (joulestat demo's): no " · setup" twice.
    named = rows(store, by="label:setup")
    assert [r["group"] for r in named] == ["setup=g5.xlarge", "setup=c6i.4xlarge"]
