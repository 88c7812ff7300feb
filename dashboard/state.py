"""The dashboard's one door to the store: which URL, a read-only engine, cached reads.

Pages and the other dashboard modules never build SQL, never hold an engine and import
no store module: they call the functions here, and take the store's record types from
here (``state.JobTotals``, ``state.SeriesPoint``...). The functions call the store's
reads (:mod:`joulestat.store.nodes`, :mod:`~joulestat.store.jobs`,
:mod:`~joulestat.store.jobs`, :mod:`~joulestat.store.series`,
:mod:`~joulestat.store.provenance`, the same ones reports and commands use) through one
engine per URL (``st.cache_resource``) and keep results for ten seconds
(``st.cache_data(ttl=10)``), about two store flushes of the agent: fresh enough to
watch a job, and a page rerun on every widget change costs no query. Time windows
ending "now" are rounded to the same ten seconds so they hit the cache too.

The URL comes from ``--db`` after the script's ``--`` (``streamlit run app.py -- --db
URL``), else ``JOULESTAT_DB`` (what ``joulestat dashboard`` sets, so a password never
shows in ``ps``), else the agent's default SQLite file.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import streamlit as st
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from joulestat.dashboard import analysis, comparison, costing, fmt
from joulestat.dashboard.bulk import gc_paused
from joulestat.reports.bounds import EnergyBounds, stored_bounds
from joulestat.reports.compare.by_model import by_model
from joulestat.reports.compare.figures import totals_figures
from joulestat.reports.compare.groups import CompareError
from joulestat.reports.compare.latency import latency_by_job
from joulestat.reports.compare.setups import compare_setups
from joulestat.store.engine import (
    StoreError,
    StoreMissingError,
    describe_error,
    open_readonly_engine,
    redact_url,
)
from joulestat.store.job_pools import units_by_kind as pooled_units_by_kind
from joulestat.store.job_refs import JobRefError, resolve_job
from joulestat.store.jobs import (
    JobDetail,
    JobFilter,
    JobRef,
    JobSummary,
    JobTotals,
    PartTotals,
    UnknownJobError,
    count_jobs,
    count_matching,
    job_choices,
    job_detail,
    job_node_latency,
    job_totals,
    label_key_counts,
)
from joulestat.store.migrate import HEAD_REVISION, SchemaState, current_revision, schema_state
from joulestat.store.model_split import ModelSplit, model_splits
from joulestat.store.nodes import (
    NodeSummary,
    latest_tick_ends_s,
    list_nodes,
    node_covered_s,
    nodes_latest_power_w,
)
from joulestat.store.provenance import (
    SourceEnergy,
    energy_by_source,
    imported_nodes,
    job_energy_by_source,
    node_sources,
)
from joulestat.store.series import (
    SeriesPoint,
    choose_bucket_s,
    job_energy_series,
    job_min_bucket_s,
    job_power_series,
    node_power_range,
    node_power_series,
)
from joulestat.store.series import job_unit_rows as store_unit_rows

# The store's records the pages and modules use, taken from here (see the docstring).
__all__ = ["HEAD_REVISION", "JobDetail", "JobRef", "JobSummary", "JobTotals", "ModelSplit",
           "NodeSummary", "PartTotals", "SeriesPoint", "SourceEnergy"]

ENV_DB = "JOULESTAT_DB"
TTL_S = 10
# A comparison is kept a minute: over a fleet it takes seconds to build (issue 28), and a
# page rebuilt every ten seconds would rebuild it on nearly every click; the page says
# what time its figures are of.
COMPARE_PERIOD_S = 60


def db_url() -> str:
    """The store URL: ``--db`` script argument, else ``JOULESTAT_DB``, else the default."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db")
    known, _rest = parser.parse_known_args(sys.argv[1:])
    if known.db:
        return str(known.db)
    if os.environ.get(ENV_DB, "").strip():
        return os.environ[ENV_DB].strip()
    from joulestat.store.engine import default_db_url

    return default_db_url()


_run = threading.local()  # script runs are per thread: one flag per run


@contextlib.contextmanager
def inside_app() -> Iterator[None]:
    """Marks a page run as started by app.py's ``navigation.run()``."""
    _run.active = True
    try:
        yield
    finally:
        _run.active = False


def in_app() -> bool:
    """Whether this script run went through app.py (see :func:`joulestat.dashboard.ui.enter`)."""
    return bool(getattr(_run, "active", False))


def now_s(period_s: int = TTL_S) -> float:
    """Now, rounded down to the cache period so "last hour" windows share cache entries."""
    return math.floor(time.time() / period_s) * period_s


def window_end_s(now: float, period_s: int = TTL_S) -> float:
    """Where a window "up to now" ends, for ``now`` from :func:`now_s`: the end of the
    current cache period. ``now`` itself is up to a period in the past, and a window
    ending there would leave out the jobs and ticks of the last seconds: a job just
    started was missing from Jobs (and its node from "reporting") until the next
    period. Nothing is stored past the real now, so ending later adds nothing else,
    and the cache key still changes once a period (``period_s``, what ``now`` was
    rounded to)."""
    return now + period_s


@st.cache_resource(show_spinner=False)
def engine(url: str) -> Engine:
    return open_readonly_engine(url)


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """``ok``, ``missing`` (no file), ``no-schema``, ``outdated`` (an older revision),
    ``newer`` (a revision this code does not know), ``empty`` or ``error``."""

    state: str
    detail: str = ""


@st.cache_data(ttl=TTL_S, show_spinner=False)
def status(url: str) -> StoreStatus:
    """Whether there is anything to show, and if not, why."""
    try:
        eng = engine(url)
        revision = current_revision(eng)
        if revision is None:
            return StoreStatus("no-schema")
        if revision != HEAD_REVISION:
            newer = schema_state(revision) is SchemaState.NEWER
            return StoreStatus("newer" if newer else "outdated", revision)
        if not list_nodes(eng):
            return StoreStatus("empty")
    except StoreMissingError as exc:
        engine.clear()  # so the file is found once an agent creates it
        return StoreStatus("missing", str(exc))
    except (StoreError, SQLAlchemyError) as exc:
        engine.clear()
        return StoreStatus("error", describe_error(exc))
    return StoreStatus("ok")


def shown_url(url: str) -> str:
    return redact_url(url)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def nodes(url: str) -> list[NodeSummary]:
    return list_nodes(engine(url))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def current_power(url: str) -> dict[str, dict[str, float]]:
    """Node -> component -> watts over its latest tick (devices summed); one read for
    every node (:func:`joulestat.store.nodes.nodes_latest_power_w`)."""
    result: dict[str, dict[str, float]] = {}
    for node, latest in nodes_latest_power_w(engine(url)).items():
        per_component = result.setdefault(node, {})
        for (component, _device), watts in latest.items():
            per_component[component] = per_component.get(component, 0.0) + watts
    return result


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sources(url: str, since_s: float, until_s: float) -> list[SourceEnergy]:
    return energy_by_source(engine(url), since_s, until_s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def covered(url: str, since_s: float, until_s: float) -> dict[str, float]:
    return node_covered_s(engine(url), since_s, until_s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def last_ticks_s(url: str, until_s: float, lookback_s: float) -> dict[str, float]:
    """Per node, when its newest tick within ``lookback_s`` before ``until_s`` ended (at
    most ``until_s``); a node without one is absent. From the ticks themselves
    (:func:`joulestat.store.nodes.latest_tick_ends_s`, one read for every node): a
    node's heartbeat (``last_seen_s``) says its agent runs, not that it still measures."""
    return {node: min(end_s, until_s)
            for node, end_s in latest_tick_ends_s(engine(url)).items()
            if end_s > until_s - lookback_s}


@st.cache_data(ttl=TTL_S, show_spinner=False)
def energy_sources(url: str, names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """node -> the sources of its energy (:func:`joulestat.store.provenance.node_sources`,
    as ``joulestat compare`` reads them): what a table's "energy is" is said from."""
    return node_sources(engine(url), names)


@st.cache_data(ttl=TTL_S, show_spinner=False)
@gc_paused
def jobs(url: str, kind: str | None = None, status: str | None = None,
         since_s: float | None = None, until_s: float | None = None, node: str | None = None,
         instance_type: str | None = None, newest: int | None = None) -> list[JobTotals]:
    """The matching jobs by start; only the ``newest`` of them when given."""
    where = JobFilter(kind, status, since_s, until_s, node, instance_type, newest=newest)
    return job_totals(engine(url), where)


@st.cache_data(ttl=TTL_S, show_spinner=False)
@gc_paused
def job_table(url: str, kind: str | None, status: str | None, since_s: float | None,
              until_s: float | None, node: str | None, instance_type: str | None,
              at_s: float, newest: int | None = None) -> pd.DataFrame:
    """The Jobs table (one row per job, ``started`` in epoch seconds), cached as a frame:
    a frame is cheap to copy out of the cache, ten thousand job objects are not. Only
    the ``newest`` matching jobs when given (:func:`matching_count` says how many match)."""
    where = JobFilter(kind, status, since_s, until_s, node, instance_type, newest=newest)
    found = job_totals(engine(url), where)
    frame = pd.DataFrame(analysis.job_rows(found, costing.job_costs(found, at_s), at_s))
    by_node = node_sources(engine(url), {n for job in found for n, _t in job.nodes})
    said: dict[frozenset[str], str] = {}  # a few distinct node sets among 10,000 jobs
    column = []
    for job in found:
        key = frozenset(s for n, _t in job.nodes for s in by_node.get(n, ()))
        column.append(said.get(key) or said.setdefault(key, fmt.energy_is(key)))
    frame.insert(1, fmt.ENERGY_IS, column)
    return frame


@st.cache_data(ttl=TTL_S, show_spinner=False)
def matching_count(url: str, kind: str | None, status: str | None, since_s: float | None,
                   until_s: float | None, node: str | None, instance_type: str | None) -> int:
    """How many jobs :func:`job_table` would list without its ``newest``."""
    return count_matching(engine(url), JobFilter(kind, status, since_s, until_s, node,
                                                 instance_type))


@st.cache_data(ttl=COMPARE_PERIOD_S, show_spinner=False)
@gc_paused
def compare(url: str, kind: str, unit: str, since_s: float | None, until_s: float | None,
            at_s: float, picked: tuple[str, ...] | None = None,
            by: str = "instance_type") -> comparison.Comparison | None:
    """``compare()`` per ``unit`` of the jobs of ``kind`` in the window: a row per setup
    (``by="instance_type"``), per value of a label (``by="label:KEY"``), per model of
    model served (``by="model"``: jobs that served none are left out, and the notes say
    so), or per job when ``picked`` names the jobs; None when none counted ``unit``.
    Against the first row and unsized: the page moves the baseline and SLA on the rows
    alone."""
    where = JobFilter(kind, None, since_s, until_s, job_ids=picked)
    if by == "instance_type" and picked is None:
        # Per setup over a window's jobs: the store adds up the single-node ones, as
        # `joulestat compare --by instance_type` does (the same table; a fleet's week of
        # 10^5 jobs in a few seconds instead of tens); None where it cannot.
        try:
            pooled = compare_setups(engine(url), where, costing.pricer(), at_s, unit=unit,
                                    with_ids=False)
        except CompareError:  # nothing counted the unit
            return None
        if pooled is not None:
            return comparison.pooled(pooled.table, pooled.notes)
    found = comparison.in_order(job_totals(engine(url), where), picked)
    # Built as `joulestat compare` builds them, by the same function: each job's sources,
    # accelerators, served latency (p50/p99 beside the energy per unit) and bounds (the
    # rows' error bars and the "not distinguishable" rule) read once for all the jobs.
    jobs = totals_figures(engine(url), found, costing.pricer(), at_s)
    left_out: list[str] = []
    if by == "model" and picked is None:
        parts = by_model(jobs, model_splits(engine(url), [j.id for j in found]))
        jobs, left_out = list(parts.parts), parts.notes()
    return comparison.comparison(jobs, unit, "job" if picked is not None else by, left_out)


@st.cache_data(ttl=TTL_S, show_spinner=False)
@gc_paused
def compare_candidates(url: str, kind: str, unit: str, since_s: float | None,
                       until_s: float | None, limit: int = 500
                       ) -> list[tuple[str, str, float, str]]:
    """(job id, name, started_s, setup) of the newest jobs that counted ``unit``, for
    the job picker ("name · started · instance type", started in the viewer's clock)."""
    found = job_totals(engine(url), JobFilter(kind, None, since_s, until_s))
    newest = sorted((j for j in found if j.units.get(unit, 0) > 0),
                    key=lambda j: j.started_s, reverse=True)[:limit]
    return [(j.id, j.name, j.started_s, analysis.setup_of(j)) for j in newest]


@st.cache_data(ttl=TTL_S, show_spinner=False)
@gc_paused
def served_latency(url: str, job_ids: tuple[str, ...]) -> dict[str, dict]:
    """Per job, the latency histograms its serving engine reported (``--serving-metrics``),
    per kind, over its nodes and models; jobs without any are absent."""
    return latency_by_job(job_node_latency(engine(url), list(job_ids)))


@st.cache_data(ttl=TTL_S, show_spinner=False)
@gc_paused
def label_keys(url: str, kind: str | None, since_s: float | None = None,
               until_s: float | None = None) -> list[str]:
    """Label keys of the jobs of ``kind`` whose values are numbers on two jobs or more
    (Load curve's level), most used first."""
    found = job_totals(engine(url), JobFilter(kind, None, since_s, until_s))
    return analysis.numeric_label_keys(found)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def all_label_keys(url: str, kind: str | None) -> list[str]:
    """Every label key the jobs of ``kind`` carry, most used first (Compare's grouping),
    counted in the store (:func:`joulestat.store.jobs.label_key_counts`)."""
    counts = label_key_counts(engine(url), kind)
    return sorted(counts, key=lambda k: (-counts[k], k))


@st.cache_data(ttl=TTL_S, show_spinner=False)
@gc_paused
def load_jobs(url: str, unit: str, label_key: str) -> list[JobTotals]:
    """Inference jobs carrying ``label_key`` that counted ``unit``, by start."""
    found = job_totals(engine(url), JobFilter(kind="inference", label_key=label_key))
    return [j for j in found if j.units.get(unit, 0) > 0]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def splits(url: str, job_ids: tuple[str, ...]) -> dict[str, ModelSplit]:
    """The energy of each of ``job_ids`` that served several models, split among them
    (:func:`joulestat.store.model_split.model_splits`)."""
    return model_splits(engine(url), job_ids)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def imported(url: str) -> set[str]:
    """Nodes known only from imported files
    (:func:`joulestat.store.provenance.imported_nodes`)."""
    return imported_nodes(engine(url))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def running_count(url: str) -> int:
    return count_jobs(engine(url), running=True)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def choices(url: str) -> list[JobRef]:
    return job_choices(engine(url))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def units_by_kind(url: str) -> dict[str, list[str]]:
    """Kind -> the units its jobs counted, most counted first: the first is the unit
    ``joulestat compare`` picks for the kind when none is asked
    (:func:`joulestat.store.job_pools.units_by_kind`)."""
    return pooled_units_by_kind(engine(url))


@dataclass(frozen=True)
class JobLookup:
    """What a ``?job=`` reference resolved to: ``job_id`` and the notes to show, or the
    resolver's error (``job_id`` None). Plain data, so the result can be cached."""

    job_id: str | None
    notes: tuple[str, ...] = ()
    error: str | None = None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def lookup_job(url: str, ref: str) -> JobLookup:
    """``ref`` as every command reads a job: id, name (its latest run) or unique id prefix
    (:func:`joulestat.store.job_refs.resolve_job`), so a link with a name or a short id works."""
    try:
        found = resolve_job(engine(url), ref)
    except JobRefError as exc:
        return JobLookup(None, error=str(exc))
    return JobLookup(found.latest.id, tuple(found.notes("showing")))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def detail(url: str, job_id: str) -> JobDetail | None:
    try:
        return job_detail(engine(url), job_id)
    except UnknownJobError:
        return None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def job_series(url: str, job_id: str, span_s: float) -> tuple[int, list[SeriesPoint]]:
    """(bucket_s, power points) for a job lasting ``span_s``."""
    eng = engine(url)
    bucket_s = choose_bucket_s(span_s, 300, job_min_bucket_s(eng, job_id))
    return bucket_s, job_power_series(eng, job_id, bucket_s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def job_energy_rows(url: str, job_id: str) -> list[tuple[float, str, float, float]]:
    """``(t_end_s, component, dynamic_j, idle_j)``: a job's energy rows over its nodes
    (:func:`joulestat.store.series.job_energy_series`)."""
    return job_energy_series(engine(url), job_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def job_unit_rows(url: str, job_id: str) -> list[tuple[str, float, str, float]]:
    """``(node, t_end_s, unit, count)``: a job's unit rows
    (:func:`joulestat.store.series.job_unit_rows`)."""
    return store_unit_rows(engine(url), job_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def node_series(url: str, node: str, since_s: float, until_s: float,
                bucket_s: int) -> list[SeriesPoint]:
    return node_power_series(engine(url), node, since_s, until_s, bucket_s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def power_range(url: str, node: str) -> dict[str, tuple[float, float]]:
    return node_power_range(engine(url), node)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def job_sources(url: str, job_id: str) -> list[SourceEnergy]:
    return job_energy_by_source(engine(url), job_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def job_bounds(url: str, job_id: str) -> EnergyBounds:
    """The job's energy bounds by component and in total, as its report gives them
    (:func:`joulestat.reports.bounds.stored_bounds`)."""
    return stored_bounds(engine(url), [job_id])[job_id]
