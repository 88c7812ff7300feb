"""Fixtures the in-process CLI tests share (tests/helpers/cli.py runs the commands)."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from tests.helpers.cli import cli_env
from tests.helpers.report_store import Totals


@pytest.fixture
def report_env(filled: tuple[Engine, Totals]) -> tuple[dict[str, str], Totals]:
    """The report tests' store (:func:`tests.helpers.report_store.fill_store`: dist-1,
    solo, secretive) and the environment that points the CLI at it."""
    engine, totals = filled
    return cli_env(JOULESTAT_DB=engine.url.render_as_string(hide_password=False)), totals
