"""The dashboard opens a SQLite store in WAL mode in a directory it may not write (no
-shm file once the agent stopped), as an unprivileged user: tried in a forked child that
drops root, since root ignores directory permissions."""

from __future__ import annotations

import pytest


def test_a_wal_store_in_a_read_only_directory_is_read_as_a_snapshot(caplog):
    """The defect: the dashboard could not open a WAL-mode store in a directory it may
    not write (no -shm file once the agent stopped). Tried as an unprivileged user, since
    root ignores directory permissions."""
    import os
    import shutil
    import sqlite3
    import tempfile

    from joulestat.store.engine import open_readonly_engine

    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged user")
    directory = tempfile.mkdtemp(prefix="joulestat-ro-")
    try:
        path = os.path.join(directory, "s.db")
        writer = sqlite3.connect(path)
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("CREATE TABLE t (x)")
        writer.execute("INSERT INTO t VALUES (42)")
        writer.commit()
        writer.close()  # the last connection removes -wal and -shm
        os.chmod(path, 0o644)
        os.chmod(directory, 0o555)
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                engine = open_readonly_engine(f"sqlite:///{path}")
                with engine.connect() as connection:
                    code = 0 if connection.exec_driver_sql("SELECT x FROM t").scalar() == 42 \
                        else 3
            except Exception:
                code = 2
            os._exit(code)
        _pid, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.chmod(directory, 0o755)
        shutil.rmtree(directory)

