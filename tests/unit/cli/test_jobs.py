"""`joulestat jobs` and `joulestat jobs delete` as a user meets them: measured jobs
beside CodeCarbon runs imported with `joulestat import` (long ids, exact energies from
45 mJ to 3.4 MJ), listed in columns that hold for any script, filtered, and deleted all
or nothing, the deleted energy going back to its node. The real commands run in this
process (tests/helpers/cli.py) on the store of :mod:`tests.helpers.jobs_store`, which
stands for the one a real agent on a replayed trace left (and says how). Where a
process is what is tested (a real terminal's answer, a job a running agent still
measures): tests/system/test_jobs_command.py."""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
from datetime import datetime
from pathlib import Path

import pytest

from joulestat.core import units
from tests.helpers.burners import assert_conserved
from tests.helpers.cli import CliResult, invoke
from tests.helpers.job_delete_store import tables_with_job_rows
from tests.helpers.jobs_store import (
    MEASURED,
    NODE,
    all_counts,
    build_jobs_store,
    copy_store,
    rows_of,
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with three measured jobs (all ended) and three imported ones."""
    return build_jobs_store(tmp_path_factory.mktemp("jobs-store"))


@pytest.fixture()
def store(template: str, tmp_path: Path) -> str:
    """A copy of the template store for one test (which may delete from it)."""
    return copy_store(template, tmp_path / "store.db")


def jobs_cli(db_url: str, *args: str, prefix: tuple[str, ...] = ("jobs",)) -> CliResult:
    """``joulestat PREFIX ARGS --db URL``, stdin empty and not a terminal."""
    return invoke(*prefix, *args, "--db", db_url)


def listed(db_url: str, *args: str) -> list[dict]:
    done = jobs_cli(db_url, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cells_of(line: str) -> list[str]:
    """The terminal columns ``line`` fills: a wide character fills two (the second
    empty), a combining mark joins the column before it."""
    columns: list[str] = []
    for ch in line:
        if unicodedata.combining(ch):
            columns[-1] += ch
        elif unicodedata.east_asian_width(ch) in ("W", "F"):
            columns += [ch, ""]
        else:
            columns.append(ch)
    return columns


def table_of(stdout: str) -> tuple[list[str], list[list[str]]]:
    """Header names and each row's cells, cut at the columns where the header's names
    start (the energy column is right-aligned: it ends where its header ends). Every
    row must have each column start (or, for energy, end) exactly there."""
    header, *lines = stdout.rstrip("\n").split("\n")
    names = header.split()
    starts = [header.index(name) for name in names]
    energy = names.index("energy")
    energy_end = starts[energy] + len("energy")
    rows = []
    for line in lines:
        columns = cells_of(line)
        for i, start in enumerate(starts):
            if i != energy:  # starts here, after a gap
                assert columns[start] != " " and (i == 0 or columns[start - 1] == " "), (
                    line, names[i])
        assert columns[energy_end - 1] != " " and columns[energy_end] == " ", line
        bounds = [*starts, len(columns)]
        cells = ["".join(columns[a:b]).strip() for a, b in zip(bounds, bounds[1:],
                                                                 strict=False)]
        # "started" and the right-aligned energy share the span up to the energy's end.
        started, energy_cell = re.split(r" {2,}", "".join(
            columns[starts[energy - 1]:energy_end]).strip())
        cells[energy - 1:energy + 1] = [started, energy_cell]
        rows.append(cells)
    return names, rows


def test_jobs_lists_si_figures_in_columns_that_hold(store: str) -> None:
    jobs = listed(store)
    assert len(jobs) == 6
    done = jobs_cli(store)
    assert done.returncode == 0, done.stderr
    names, rows = table_of(done.stdout)
    assert names == ["id", "name", "kind", "status", "started", "duration", "energy", "units",
                     "nodes"]
    by_id = {row[0]: row for row in rows}
    assert [row[0] for row in rows] == [job["id"] for job in sorted(
        jobs, key=lambda j: j["started_s"], reverse=True)]  # newest first
    for job in jobs:
        started = datetime.fromtimestamp(job["started_s"]).strftime("%Y-%m-%d %H:%M:%S")
        nodes = ", ".join(f"{node} ({itype})" for node, itype in job["nodes"])
        counted = ", ".join(f"{units.count(n)} {unit}" for unit, n in
                            sorted(job["units"].items())) or "-"
        assert by_id[job["id"]] == [job["id"], job["name"], job["kind"], job["status"],
                                    started, units.duration(job["ended_s"] - job["started_s"]),
                                    units.energy(job["total_j"]), counted, nodes]
    # The CodeCarbon ids (47 characters) fit their column; energies carry their prefix.
    energy = {row[1]: row[6] for row in rows}
    assert {row[1]: row[7] for row in rows}["训练-α"] == "1.50 k sample, 50 step"
    assert {row[1]: row[5] for row in rows}["codecarbon:big"] == "1 h"
    assert (energy["codecarbon:tiny"], energy["codecarbon:mid"], energy["codecarbon:big"]) \
        == ("45.0 mJ", "1.20 kJ", "3.40 MJ")
    for name in MEASURED:  # a lone job on 0.1 W for about a second
        assert energy[name].endswith(" mJ"), energy
    # --json keeps joules.
    totals = {job["name"]: job["total_j"] for job in jobs}
    assert totals["codecarbon:tiny"] == pytest.approx(0.045)
    assert totals["codecarbon:big"] == pytest.approx(3.4e6)


def test_filters_combine_in_the_list_and_in_json(store: str) -> None:
    def names(*args: str) -> list[str]:
        return [job["name"] for job in listed(store, *args)]

    everything = listed(store)
    newest_first = [job["name"] for job in everything]
    assert [job["started_s"] for job in everything] == sorted(
        (job["started_s"] for job in everything), reverse=True)
    others = [job["name"] for job in everything if job["kind"] == "other"]
    assert names("--name", "plain") == ["plain"]
    assert names("--name", "pla") == []  # exact, not a prefix
    assert names("--kind", "training") == ["训练-α"]
    assert sorted(names("--since", "1h")) == sorted(MEASURED)
    # Ran at or after 13:30 local: the 14:00-15:00 run and today's, not the 12:59-13:00 one.
    assert sorted(names("--since", "2024-05-01T13:30")) == sorted([*MEASURED, "codecarbon:big"])
    assert names("--limit", "2") == newest_first[:2]
    assert names("--kind", "other", "--limit", "2") == others[:2]
    assert others[:2] == ["plain", "codecarbon:big"]
    assert names("--kind", "other", "--since", "2024-05-01T13:30", "--limit", "1") == ["plain"]
    assert names("--running") == []
    # --label KEY=VALUE (exact: threads=1 is not threads=10), KEY alone, repeated = all
    assert sorted(names("--label", "threads=1")) == sorted(["训练-α", "cafe\u0301"])
    assert names("--label", "threads=10") == ["plain"]
    assert names("--label", "team") == ["训练-α"]
    assert names("--label", "threads=1", "--label", "team=nlp") == ["训练-α"]
    assert names("--label", "threads=1", "--kind", "inference") == ["cafe\u0301"]
    assert names("--label", "threads=2") == []
    none = jobs_cli(store, "--label", "threads=2")
    assert none.returncode == 0 and "--label threads=2" in none.stdout
    assert jobs_cli(store, "--label", "=1").returncode == 2
    table = jobs_cli(store, "--kind", "inference", "--limit", "5")
    assert [row[1] for row in table_of(table.stdout)[1]] == ["cafe\u0301"]
    bad = jobs_cli(store, "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr
    assert jobs_cli(store, "--limit", "0").returncode == 2


def test_messages_say_what_is_true(store: str, tmp_path: Path) -> None:
    nothing = jobs_cli(store, "--running", "--kind", "training")
    assert nothing.returncode == 0
    assert "6" in nothing.stdout and "--running" in nothing.stdout
    assert "--kind training" in nothing.stdout and "no jobs yet" not in nothing.stdout
    assert jobs_cli(store, "--running", "--json").stdout.strip() == "[]"

    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    assert jobs_cli(empty, "upgrade", prefix=("db",)).returncode == 0
    for args in ((), ("--running",), ("--name", "x")):
        done = jobs_cli(empty, *args)
        assert done.returncode == 0 and "no jobs yet" in done.stdout, args


def node_sums(db_url: str) -> tuple[float, float]:
    """The node's energy and its unattributed remainder, over every stored tick."""
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        node_j = connection.execute("SELECT sum(energy_j) FROM tick_energy WHERE node = ?",
                                    (NODE,)).fetchone()[0]
        rest_j = connection.execute("SELECT sum(dynamic_j + idle_j) FROM job_energy "
                                    "WHERE node = ? AND job_id = ''", (NODE,)).fetchone()[0]
    return float(node_j), float(rest_j or 0.0)


def test_delete_moves_a_measured_jobs_energy_to_its_node(store: str) -> None:
    job = next(j for j in listed(store) if j["name"] == "plain")
    node_j, rest_j = node_sums(store)
    assert sum(rows_of(store, job["id"]).values()) > 3
    done = jobs_cli(store, "delete", job["id"][:8], "--yes")
    assert done.returncode == 0, done.stderr
    assert job["id"] in done.stdout and "plain" in done.stdout
    assert rows_of(store, job["id"]) == dict.fromkeys(tables_with_job_rows(), 0)
    assert [j["name"] for j in listed(store)].count("plain") == 0
    after_node_j, after_rest_j = node_sums(store)
    assert after_node_j == node_j
    assert after_rest_j == pytest.approx(rest_j + job["total_j"], rel=1e-9)
    assert_conserved(store, NODE)  # jobs + unattributed = node, tick by tick
    others = {j["id"]: j["total_j"] for j in listed(store)}
    assert len(others) == 5


def test_delete_imported_jobs_and_what_they_brought(store: str) -> None:
    jobs = {j["name"]: j for j in listed(store)}
    ids = [jobs["codecarbon:tiny"]["id"], jobs["codecarbon:mid"]["id"]]
    done = jobs_cli(store, "delete", *ids, "--yes")
    assert done.returncode == 0, done.stderr
    assert all(job_id in done.stdout for job_id in ids)
    for job_id in ids:
        assert rows_of(store, job_id) == dict.fromkeys(tables_with_job_rows(), 0)
    with sqlite3.connect(store.removeprefix("sqlite:///")) as connection:
        nodes = {row[0] for row in connection.execute("SELECT node FROM nodes")}
        devices = {row[0] for row in connection.execute("SELECT DISTINCT device FROM tick_energy")}
    assert nodes == {NODE, jobs["codecarbon:big"]["nodes"][0][0]}
    assert not any(job_id in device for device in devices for job_id in ids)
    assert sorted(j["name"] for j in listed(store)) == sorted([*MEASURED, "codecarbon:big"])
    assert_conserved(store, NODE)


def test_delete_is_all_or_nothing(store: str) -> None:
    jobs = {j["name"]: j for j in listed(store)}
    before = all_counts(store)
    missing = jobs_cli(store, "delete", jobs["plain"]["id"], "feedbeef", "--yes")
    assert missing.returncode == 2 and "feedbeef" in missing.stderr
    ambiguous = jobs_cli(store, "delete", "codecarbon:", "--yes")  # the start of three ids
    assert ambiguous.returncode == 2 and ambiguous.stderr.count("codecarbon:") >= 3
    by_name = jobs_cli(store, "delete", "plain", "--yes")  # a name is not an id
    assert by_name.returncode == 2 and "name" in by_name.stderr
    short = jobs_cli(store, "delete", jobs["plain"]["id"][:3], "--yes")
    assert short.returncode == 2
    mixed = jobs_cli(store, "delete", jobs["plain"]["id"], "--kind", "other", "--yes")
    assert mixed.returncode == 2
    assert all_counts(store) == before


def test_delete_refuses_without_a_terminal(store: str) -> None:
    """No terminal on stdin (here: an empty buffer, as /dev/null was for a process): no
    one to ask, so without --yes nothing is deleted, exit 2. Asking on a real terminal:
    tests/system/test_jobs_command.py."""
    job = next(j for j in listed(store) if j["name"] == "plain")
    before = all_counts(store)
    refused = jobs_cli(store, "delete", job["id"])
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert all_counts(store) == before


def test_delete_never_makes_a_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()  # a file, but no schema: not a store to delete from
    done = jobs_cli(f"sqlite:///{empty}", "delete", "abcd1234", "--yes")
    assert done.returncode == 2 and "joulestat db upgrade" in done.stderr
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]
