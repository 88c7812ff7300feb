"""Open the store for a long-running process: migrate out of process, then connect.

Migrations run in a child process (``joulestat db upgrade``): Alembic and the ORM cost
~16 MiB that the agent would otherwise keep as its peak RSS for its whole life.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from sqlalchemy.engine import Engine

from joulestat.core.errors import ConfigError
from joulestat.core.redact import redact_text, redact_url

log = logging.getLogger(__name__)


def open_engine(url: str | None, setting: str = "--db", wait_s: float = 0.0) -> Engine:
    """An engine on a store at the head revision; bad URLs stop the command.

    ``wait_s``: how long to keep trying a store that does not answer (a database
    starting beside the agent, a network blip at boot), saying so in the log; a URL
    that can never work (bad syntax, unknown driver) fails at once.
    """
    from sqlalchemy.exc import OperationalError

    from joulestat.store.engine import StoreError, default_db_url, make_engine
    from joulestat.store.migrate import is_at_head

    url = url or default_db_url()
    try:
        engine = make_engine(url)
    except Exception as exc:
        raise ConfigError(f"{setting} {redact_url(url)}: cannot open the store: "
                          f"{redact_text(str(exc))}") from None
    deadline, delay_s = time.monotonic() + wait_s, 1.0
    while True:
        try:
            at_head = is_at_head(engine)
            break
        except StoreError as exc:
            unreachable = isinstance(exc.__cause__, OperationalError)
            left_s = deadline - time.monotonic()
            if not unreachable or left_s <= 0:
                waited = f" (waited {wait_s:g} s)" if unreachable and wait_s else ""
                raise ConfigError(f"{setting} {redact_url(url)}: cannot open the store"
                                  f"{waited}: {redact_text(str(exc))}") from None
            log.warning("store %s does not answer (%s); retrying for up to %.0f s more",
                        redact_url(url), redact_text(str(exc.__cause__)).splitlines()[0],
                        left_s)
            time.sleep(min(delay_s, left_s))
            delay_s = min(delay_s * 2, 30.0)
    if not at_head:
        shown = engine.url.render_as_string(hide_password=True)
        log.info("migrating the store at %s", shown)
        # The URL travels in the environment, not argv, so a password never shows in ps.
        result = subprocess.run(
            [sys.executable, "-m", "joulestat", "db", "upgrade"],
            env={**os.environ, "JOULESTAT_DB": url}, capture_output=True, text=True,
        )
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or ["no message"]
            raise ConfigError(f"{setting} {shown}: migration failed: {redact_text(detail[0])}")
    return engine
