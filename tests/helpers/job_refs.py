"""The jobs the resolver's scenario (tests/store/test_job_refs.py) resolves, for any
store, written through the store API (:class:`~joulestat.store.writer.StoreWriter`).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

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
