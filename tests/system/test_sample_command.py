"""The sample store's command, run exactly as docs/dashboard.md and the dashboard's
empty-store hint write it (``python -m joulestat.demo.sample_store URL``), from outside
the repo."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from joulestat.dashboard.ui import SAMPLE_HINT
from joulestat.store import migrate
from joulestat.store.engine import make_engine

DOCS = Path(__file__).resolve().parents[2] / "docs" / "dashboard.md"


def documented_command() -> list[str]:
    """The sample command of docs/dashboard.md, checked to be the dashboard hint's too."""
    [line] = [line for line in DOCS.read_text().splitlines()
              if line.startswith("python -m joulestat.demo.sample_store ")]
    assert line in SAMPLE_HINT.splitlines()
    return shlex.split(line)


@pytest.mark.slow
def test_the_documented_sample_command_fills_a_store(tmp_path: Path) -> None:
    argv = documented_command()
    assert argv[:3] == ["python", "-m", "joulestat.demo.sample_store"] and len(argv) == 4
    url = f"sqlite:///{tmp_path / 'sample.db'}"  # the documented URL, in a place of our own
    done = subprocess.run([sys.executable, *argv[1:3], url], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote 22 jobs on 5 nodes to {url}"
    engine = make_engine(url)
    assert migrate.is_at_head(engine)
    with engine.connect() as connection:
        counts = {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                  for table in ("nodes", "jobs", "tick_energy", "job_energy", "job_units",
                                "job_minute_units")}
    engine.dispose()
    assert counts["nodes"] == 5 and counts["jobs"] == 22, counts
    assert counts["tick_energy"] > 0 and counts["job_energy"] > 0 and counts["job_units"] > 0
    assert counts["job_minute_units"] > 0
