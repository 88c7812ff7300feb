"""Stores at a given schema revision, for the tests of who may create and migrate a store
(docs/store.md, "Who creates and migrates the store"): made by the real ``joulestat db
upgrade --revision`` in this process (tests/helpers/cli.py), and read without opening
them for writing.

The baseline (``0001``) and the revisions after it, up to the head
(``migrate.HEAD_REVISION``). A store at the baseline (:data:`OLDER`) is older than the
head: a reader or the agent must leave it as it is for ``joulestat db upgrade``, as a
reader must a store without joulestat's schema (:data:`BASE`); a store at a revision no
script has (:data:`NEWER`) is one a newer joulestat made (docs/migrations.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from joulestat.store.migrate import HEAD_REVISION, known_revisions
from tests.helpers.cli import invoke

BASE = "base"  # Alembic's version table, holding no revision: no joulestat schema yet
OLDER = "0001"  # the baseline: a revision this code knows, before the head
NEWER = "0099"  # a revision no joulestat of this version knows

assert OLDER in known_revisions() and OLDER != HEAD_REVISION


def revision_of(path: Path) -> list[str]:
    """The revision(s) ``alembic_version`` of the SQLite store at ``path`` holds."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        return [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]


def store_at(path: Path, revision: str) -> str:
    """A store made by `joulestat db upgrade --revision` (:data:`BASE`, :data:`OLDER`,
    any revision a script has), or relabelled from the head when the revision is one no
    script has (what a newer joulestat would have left); its URL."""
    url = f"sqlite:///{path}"
    known = revision if revision == BASE or revision in known_revisions() else HEAD_REVISION
    done = invoke("db", "upgrade", "--db", url, "--revision", known)
    assert done.returncode == 0, done.stderr
    if known != revision:
        with sqlite3.connect(path) as connection:
            connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    assert revision_of(path) == ([] if revision == BASE else [revision])
    return url
