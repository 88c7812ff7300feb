"""``joulestat dashboard``: the Streamlit dashboard on a store, read-only.

The command replaces itself with ``python -m streamlit run dashboard/app.py`` (exec, not
a child), so Ctrl-C and SIGTERM reach Streamlit directly and no wrapper is left
behind. The store URL travels in ``JOULESTAT_DB``, not argv, so a password never shows
in ``ps``; a ``--prices`` file (validated here, before Streamlit starts) travels as its
absolute path in ``JOULESTAT_PRICES``, which :mod:`joulestat.dashboard.costing` reads. Nothing
here migrates or creates the store: the dashboard only reads, and tells the user how to
start the agent when there is nothing to read yet.

Before the exec it writes where it listens to ``<data dir>/dashboard.json`` (its URL,
pid and store, password hidden), so ``joulestat demo`` prints the URL of the dashboard
that actually runs (``make run DASHBOARD_ARGS="--port 8600"``), not the default port's.
The pid survives the exec; a file whose pid has gone, or whose port no longer answers,
is ignored.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from joulestat.core.errors import ConfigError
from joulestat.core.extras import Extra, require_installed
from joulestat.runtime.settings import add_options, resolve

DASHBOARD_OPTIONS = ("config", "db", "log_level", "prices")
# What the dashboard's pages import (the ``dashboard`` extra), checked before Streamlit starts.
DASHBOARD_MODULES = ("streamlit", "pandas", "altair")
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8501
# --host and --port are Streamlit's, not settings of the store's kind (no TOML key),
# but like every option they can come from the environment (a unit file, compose).
ENV_HOST, ENV_PORT = "JOULESTAT_DASHBOARD_HOST", "JOULESTAT_DASHBOARD_PORT"
ANNOUNCE_FILE = "dashboard.json"


@dataclass(frozen=True)
class RunningDashboard:
    """A dashboard that announced itself and still answers: its base URL and store."""

    url: str
    db: str  # the store URL, password hidden


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {value!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1..65535, got {port}")
    return port


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="browse jobs, compare instance types (Streamlit, read-only)",
        description="Serve the dashboard on a store: overview, jobs, job detail, "
        "comparison across instance types and load curves. It opens the store read-only "
        "(SQLite mode=ro, PostgreSQL read-only transactions), so a SELECT-only role is "
        "enough.",
    )
    parser.add_argument("--host", default=None,
                        help=f"address to listen on [default: {DEFAULT_HOST}]; anything else "
                        f"exposes your measurements to the network; env {ENV_HOST}")
    parser.add_argument("--port", type=_port, default=None,
                        help=f"port to listen on [default: {DEFAULT_PORT}]; env {ENV_PORT}")
    add_options(parser, DASHBOARD_OPTIONS)
    parser.set_defaults(func=_run)


def app_path() -> Path:
    spec = importlib.util.find_spec("joulestat.dashboard")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / "app.py" if locations else None
    if path is None or not path.is_file():
        raise ConfigError(f"the dashboard app is not installed (joulestat.dashboard at {path}): "
                          "reinstall joulestat")
    return path


def streamlit_argv(app: Path, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(app),
            "--server.address", host, "--server.port", str(port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none", "--server.runOnSave", "false",
            "--client.toolbarMode", "viewer"]


def _announce(url: str, host: str, port: int, db: str) -> None:
    """Say where this dashboard listens, for ``joulestat demo``; a data directory that
    cannot be written only costs that (the demo then names the default port)."""
    from joulestat.store.engine import StoreError, data_dir

    record = {"url": url, "host": host, "port": port, "pid": os.getpid(), "db": db}
    try:
        path = data_dir() / ANNOUNCE_FILE
        path.write_text(json.dumps(record) + "\n")
    except (OSError, StoreError):
        return


def running_dashboard() -> RunningDashboard | None:
    """The dashboard announced in the data directory, if its process lives and its port
    answers; else None."""
    from joulestat.store.engine import data_dir_path

    try:
        record = json.loads((data_dir_path() / ANNOUNCE_FILE).read_text())
        pid, host, port = int(record["pid"]), str(record["host"]), int(record["port"])
        url, db = str(record["url"]), str(record["db"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # another user's process: it lives
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    try:
        socket.create_connection((connect_host, port), timeout=0.5).close()
    except OSError:
        return None
    return RunningDashboard(url, db)


def _run(args: argparse.Namespace) -> int:
    from joulestat.store.engine import check_driver, default_db_url, redact_url

    require_installed(DASHBOARD_MODULES, Extra.DASHBOARD, "the dashboard")
    settings = resolve(args, DASHBOARD_OPTIONS)
    url = settings["db"] or default_db_url()
    check_driver(url)
    host = args.host or os.environ.get(ENV_HOST, "").strip() or DEFAULT_HOST
    port = args.port
    if port is None:
        try:
            port = _port(os.environ.get(ENV_PORT, "").strip() or str(DEFAULT_PORT))
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"{ENV_PORT}: {exc}") from None
    argv = streamlit_argv(app_path(), host, port)
    shown_host = f"[{host}]" if ":" in host else host
    base = f"http://{shown_host}:{port}"
    print(f"joulestat dashboard: {base} (store {redact_url(url)}, "
          "read-only; Ctrl-C to stop)", flush=True)
    _announce(base, host, port, redact_url(url))
    env = {**os.environ, "JOULESTAT_DB": url,
           "STREAMLIT_LOGGER_LEVEL": settings["log_level"].lower()}
    env.pop("JOULESTAT_PRICES", None)
    if settings["prices"] is not None:
        env["JOULESTAT_PRICES"] = settings["prices"].path
        print(f"joulestat dashboard: prices per instance type from {settings['prices'].path}",
              flush=True)
    os.execve(sys.executable, argv, env)
    return 0  # pragma: no cover - execve does not return
