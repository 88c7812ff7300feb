"""The secrets the no-secret-printed tests feed every command: a store URL with a
password, and labels that look like credentials (a password, a URL with userinfo, a
bearer token, a libpq DSN) beside one plain label."""

from __future__ import annotations

SECRET = "LeakPw31"
# A PostgreSQL store nothing answers at (port 1): every command fails on it, and says so.
BAD_DB = f"postgresql+psycopg://u:{SECRET}@127.0.0.1:1/x"
LABELS = {"password": SECRET, "note": f"see https://bob:{SECRET}@git.example.com/repo",
          "header": f"Bearer {SECRET}abcdef", "dsn": f"host=db password={SECRET}",
          "team": "nlp"}
