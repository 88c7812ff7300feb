"""A real, throwaway PostgreSQL server for the store and system tests.

``running_postgres()`` runs ``initdb`` into a fresh temporary directory and starts the
server with ``pg_ctl`` on 127.0.0.1 (a free port) and a private unix-socket directory,
trust authentication, fsync off; it stops the server and deletes the directory
afterwards. PostgreSQL refuses to run as root, so under root every server command runs
as the ``postgres`` user through ``runuser``.

Needs the server binaries (Debian: ``apt-get install postgresql``, which provides
``/usr/lib/postgresql/<version>/bin`` and the ``postgres`` user). When the server cannot
start, the tests are skipped with the exact reason.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER_USER = "postgres"
_database_numbers = itertools.count(1)


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin``, else wherever ``pg_ctl`` is on PATH."""

    def version(path: str) -> int:
        match = re.search(r"/postgresql/(\d+)/", path)
        return int(match.group(1)) if match else 0

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for directory in candidates:
        if all(os.access(Path(directory) / tool, os.X_OK) for tool in ("initdb", "pg_ctl")):
            return Path(directory)
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path
    port: int
    run_as: list[str]

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SERVER_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, template: str | None = None,
                        exact: bool = False) -> str:
        """A new database, empty or a copy of ``template`` (which nobody may be connected
        to meanwhile); returns its SQLAlchemy URL. One server serves a whole test session,
        so ``name`` gets a number that makes it unique unless ``exact``."""
        if not exact:
            name = f"{name}_{next(_database_numbers)}"
        copy = f' TEMPLATE "{template}"' if template else ""
        self._admin(f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name``, ending any session still connected to it."""
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=SERVER_USER,
                             dbname="postgres", autocommit=True) as connection:
            connection.execute(statement)

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.run_as, *args], capture_output=True, text=True,
                              cwd=self.root, timeout=timeout)

    def start(self) -> subprocess.CompletedProcess[str]:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} "
            f"-c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        return self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l",
                         str(self.log_file), "-o", options, "-w", "-t", "60", "start",
                         timeout=90)

    def stop(self) -> subprocess.CompletedProcess[str]:
        return self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast",
                         "-w", "-t", "60", "stop", timeout=90)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway server; ``pytest.skip`` with the reason when impossible."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found: no initdb and pg_ctl in "
                    "/usr/lib/postgresql/*/bin or on PATH (apt-get install postgresql)")
    run_as: list[str] = []
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root, PostgreSQL refuses root, and there is no runuser "
                        "to run it as another user")
        try:
            owner = pwd.getpwnam(SERVER_USER)
        except KeyError:
            pytest.skip(f"running as root, PostgreSQL refuses root, and there is no "
                        f"{SERVER_USER!r} user to run initdb/pg_ctl as")
        run_as = [runuser, "-u", SERVER_USER, "--"]

    root = Path(tempfile.mkdtemp(prefix="joulestat-pg-"))
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    server = PostgresServer(bin_dir, root, free_port(), run_as)
    started = False
    try:
        init = server._run(str(bin_dir / "initdb"), "-D", str(server.data_dir), "-U",
                           SERVER_USER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync",
                           timeout=120)
        if init.returncode != 0:
            pytest.skip(f"initdb ({bin_dir}) failed with exit {init.returncode}: "
                        f"{_tail(init.stderr or init.stdout)}")
        for _attempt in range(3):  # the free port may be taken before the server binds it
            done = server.start()
            if done.returncode == 0:
                started = True
                break
            server.port = free_port()
        if not started:
            pytest.skip(f"pg_ctl start ({bin_dir}) failed with exit {done.returncode}: "
                        f"{_tail(done.stderr or done.stdout)}\nserver log:\n{server.log_tail()}")
        yield server
    finally:
        if started:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def given_or_throwaway_database(url: str | None, name: str) -> Iterator[str]:
    """``url`` as given (a benchmark's ``--db``: kept, and reused if it holds data), else
    database ``name`` on a throwaway server, gone afterwards."""
    if url:
        yield url
        return
    with running_postgres() as server:
        yield server.create_database(name)
