"""Stores at a given schema revision, for the tests of who may create and migrate a store
(docs/store.md, "Who creates and migrates the store"): made by the real ``joulestat db
upgrade --revision`` in this process (tests/helpers/cli.py), and read without opening
them for writing.

There is one revision so far (the baseline, ``0001``), so no store is older than the
head: a store without joulestat's schema is the one a reader must leave for ``joulestat
db upgrade``. With the next revision, an older store (``0001``) is one again
(docs/migrations.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from joulestat.store.migrate import HEAD_REVISION
from tests.helpers.cli import invoke

BASE = "base"  # Alembic's version table, holding no revision: no joulestat schema yet
NEWER = "0099"  # a revision no joulestat of this version knows


def revision_of(path: Path) -> list[str]:
    """The revision(s) ``alembic_version`` of the SQLite store at ``path`` holds."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        return [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]


def store_at(path: Path, revision: str) -> str:
    """A store made by `joulestat db upgrade --revision` (:data:`BASE`, or the head), or
    relabelled from the head when the revision is one no script has (what a newer
    joulestat would have left); its URL."""
    url = f"sqlite:///{path}"
    known = revision if revision in (BASE, HEAD_REVISION) else HEAD_REVISION
    done = invoke("db", "upgrade", "--db", url, "--revision", known)
    assert done.returncode == 0, done.stderr
    if known != revision:
        with sqlite3.connect(path) as connection:
            connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    assert revision_of(path) == ([] if revision == BASE else [revision])
    return url
