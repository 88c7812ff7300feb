"""The job reference resolver's whole scenario (:mod:`joulestat.store.jobs`), for any store.

Jobs are written through the store API (:class:`~joulestat.store.writer.StoreWriter`);
:func:`check_resolver` runs on SQLite in tests/unit/test_job_refs.py and unchanged against
PostgreSQL in tests/integration/test_store_postgres.py.
"""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from joulestat.store.job_refs import (
    MIN_PREFIX,
    AmbiguousJobRef,
    UnknownJobRef,
    resolve_job,
)
from joulestat.store.writer import StoreWriter
from tests.helpers.report_store import LOADER, T0, make_job, node_devices

OLD, MID, NEW = ("3f2a9c1e5b7d4e2f8a6c0b1d3e5f7a9c", "3f2a77005b7d4e2f8a6c0b1d3e5f7a9c",
                 "3f2b00115b7d4e2f8a6c0b1d3e5f7a9c")
JOBS = (  # id, name, kind, start offset
    (MID, "train", "training", 100), (OLD, "train", "training", 0),
    (NEW, "train", "training", 200),
    ("c0ffee00000000000000000000000001", "3f2b", "inference", 300),  # a name, and a prefix
    ("dist-1", "dist", "training", 400), ("dist-10", "dist-x", "training", 500),
    ("ab_cd-1", "under", "other", 600), ("abxcd-2", "cross", "other", 700),
    ("probe", "p", "other", 800), ("p-1", "probe", "other", 900),
)


def fill(engine: Engine) -> None:
    writer = StoreWriter(engine, LOADER, node_devices(LOADER), raw_retention_s=3600)
    for job_id, name, kind, offset in JOBS:
        writer.save_job(make_job(job_id, name, kind, T0 + offset, T0 + offset + 50))
    assert writer.flush()


def ids(found) -> list[str]:
    return [job.id for job in found.jobs]


def check_resolver(engine: Engine) -> None:
    fill(engine)
    # an exact id wins, even over a name, and says so
    found = resolve_job(engine, OLD)
    assert (found.how, ids(found), found.notes("reporting")) == ("id", [OLD], [])
    probe = resolve_job(engine, "probe")
    assert (probe.how, ids(probe)) == ("id", ["probe"])
    assert [j.id for j in probe.shadowed] == ["p-1"]
    assert probe.notes("reporting") == [
        "'probe' is a job id and also the name of p-1; using the id"]
    assert ids(resolve_job(engine, "dist-1")) == ["dist-1"]  # not a prefix of dist-10

    # a name: every run by start time; a single-job command takes the latest and says so
    train = resolve_job(engine, "train")
    assert (train.how, ids(train), train.latest.id) == ("name", [OLD, MID, NEW], NEW)
    [note] = train.notes("reporting")
    assert note.startswith(f"'train' names 3 runs; reporting the latest, {NEW} started ")
    assert note.endswith("(give an id for another)")
    assert resolve_job(engine, "dist").how == "name"  # the name, not dist-1's/10's prefix

    # a name beats another job's id prefix, and says so
    named = resolve_job(engine, "3f2b")
    assert (named.how, ids(named), [j.id for j in named.shadowed]) == (
        "name", ["c0ffee00000000000000000000000001"], [NEW])
    assert "using the name" in named.notes("reporting")[0]

    # a unique prefix of at least MIN_PREFIX characters; exact, not LIKE
    assert (resolve_job(engine, "3f2a9").how, ids(resolve_job(engine, "3f2a9"))) == (
        "prefix", [OLD])
    assert ids(resolve_job(engine, "ab_c")) == ["ab_cd-1"]  # '_' is no wildcard
    with pytest.raises(UnknownJobRef):
        resolve_job(engine, "3F2A9")  # case counts (SQLite's LIKE would ignore it)

    # a prefix of several ids: an error listing each (id, name, start)
    with pytest.raises(AmbiguousJobRef) as ambiguous:
        resolve_job(engine, "3f2a")
    assert [j.id for j in ambiguous.value.candidates] == [OLD, MID]
    message = str(ambiguous.value)
    assert "'3f2a' is the start of 2 job ids" in message
    for job_id in (OLD, MID):
        assert f"{job_id}  train  started " in message

    # too short to be a prefix: unknown, with a hint
    short = "3f2"
    assert len(short) < MIN_PREFIX
    with pytest.raises(UnknownJobRef) as unknown:
        resolve_job(engine, short)
    assert "3 id(s) start with it: give at least 4 characters" in str(unknown.value)

    # nothing: the fixed message, with close names
    with pytest.raises(UnknownJobRef) as typo:
        resolve_job(engine, "trian")
    assert str(typo.value).startswith(
        "no job with id, id prefix or name 'trian' in the store; did you mean 'train'?")
    assert typo.value.suggestions == ("train",)
    with pytest.raises(UnknownJobRef) as nothing_close:
        resolve_job(engine, "zzzzzz")
    assert nothing_close.value.suggestions == () and "did you mean" not in str(
        nothing_close.value)

    # scoped to a kind
    assert ids(resolve_job(engine, "3f2b", kind="training")) == [NEW]  # now a prefix
    with pytest.raises(UnknownJobRef) as other_kind:
        resolve_job(engine, "train", kind="inference")
    assert "no inference job with id, id prefix or name 'train'" in str(other_kind.value)

    # ids and prefixes only (`joulestat jobs delete`): a name is never taken for a job
    assert (resolve_job(engine, "3f2b", by_name=False).how,
            ids(resolve_job(engine, "3f2b", by_name=False))) == ("prefix", [NEW])
    probe_only = resolve_job(engine, "probe", by_name=False)
    assert (probe_only.how, ids(probe_only), probe_only.shadowed) == ("id", ["probe"], ())
    with pytest.raises(UnknownJobRef) as a_name:
        resolve_job(engine, "train", by_name=False)
    assert "'train' is the name of 3 job(s)" in str(a_name.value)
    with pytest.raises(AmbiguousJobRef) as several:
        resolve_job(engine, "3f2a", by_name=False)
    assert "or the name" not in str(several.value)
    with pytest.raises(UnknownJobRef) as too_short:
        resolve_job(engine, "3f2", by_name=False)
    assert "give at least 4 characters" in str(too_short.value)
