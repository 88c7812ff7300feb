"""Open the store for a long-running process: migrate out of process, then connect.

Migrations run in a child process (``joulestat db upgrade``): Alembic and the ORM cost
~16 MiB that the agent would otherwise keep as its peak RSS for its whole life.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from sqlalchemy.engine import Engine

from agent.config import ConfigError

log = logging.getLogger(__name__)


def open_engine(url: str | None, setting: str = "--db") -> Engine:
    """An engine on a store at the head revision; bad URLs stop the command."""
    from agent.store.engine import default_db_url, make_engine
    from agent.store.migrate import is_at_head

    url = url or default_db_url()
    try:
        engine = make_engine(url)
        at_head = is_at_head(engine)
    except Exception as exc:
        raise ConfigError(f"{setting} {url}: cannot open the store: {exc}") from None
    if not at_head:
        shown = engine.url.render_as_string(hide_password=True)
        log.info("migrating the store at %s", shown)
        # The URL travels in the environment, not argv, so a password never shows in ps.
        result = subprocess.run(
            [sys.executable, "-m", "agent", "db", "upgrade"],
            env={**os.environ, "JOULESTAT_DB": url}, capture_output=True, text=True,
        )
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or ["no message"]
            raise ConfigError(f"{setting} {shown}: migration failed: {detail[0]}")
    return engine
