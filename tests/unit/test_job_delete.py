"""Deleting jobs from a SQLite store (:mod:`joulestat.store.job_delete`); the same
scenario runs on PostgreSQL in tests/integration/test_store_postgres.py."""

from __future__ import annotations

from tests.helpers.job_delete_store import check_delete_keeps_node_energy


def test_delete_keeps_node_energy_and_every_total(engine):
    check_delete_keeps_node_energy(engine)
