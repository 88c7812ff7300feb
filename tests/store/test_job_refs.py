"""The job reference resolver (:mod:`joulestat.store.job_refs`), on SQLite and on
PostgreSQL: exact ids win, names take the latest run, unique prefixes (exact, not LIKE:
PostgreSQL's LIKE has case), kinds, ids only for deletes."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from joulestat.store.job_refs import MIN_PREFIX, AmbiguousJobRef, UnknownJobRef, resolve_job
from tests.helpers.job_refs import MID, NEW, OLD, fill, ids


def test_ids_names_and_prefixes_resolve(engine: Engine) -> None:
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
