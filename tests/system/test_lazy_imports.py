"""What a fresh interpreter imports, where a test process that has imported everything
cannot tell: the carbon footprint and the CPU TDP lookup never import codecarbon or
pandas (the agent's memory budget; the data ships in joulestat), and a node without the
NVIDIA driver never imports pynvml. Each runs ``python -c`` and reads its sys.modules.
(The modules' behaviour: tests/unit/carbon/test_intensity.py,
tests/unit/devices/test_cpu_tdp.py, tests/unit/devices/test_nvidia.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.agent_process import agent_env, free_port


def test_resolving_never_imports_codecarbon_or_pandas() -> None:
    """codecarbon's __init__ pulls in pandas (tens of MiB); its data ships in joulestat."""
    code = ("import sys\n"
            "from joulestat.carbon.footprint import NodePlacement, footprint\n"
            "placement = NodePlacement('p4d.24xlarge', 'us-east-1', 60)\n"
            "footprint([(1.0, 'n', 3.6e6)], {'n': placement})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('codecarbon', 'pandas')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_lookup_does_not_import_codecarbon_or_pandas() -> None:
    """The agent's 50 MiB budget: the table is read without importing codecarbon."""
    code = (
        "import sys; from joulestat.devices.cpu_tdp import lookup_tdp; "
        "assert lookup_tdp('Intel Xeon Gold 6148') is not None; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('codecarbon', 'pandas')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_driver_library_means_pynvml_is_never_imported() -> None:
    """A node without the NVIDIA driver does not pay for pynvml's module (about 1 MiB of
    the agent's RSS): the library nvmlInit would load is tried first. In a fresh
    interpreter, so no other test's import of pynvml hides it."""
    code = ("import sys, joulestat.devices.nvidia as n\n"
            "n.NVML_LIBRARY = 'libjoulestat-absent-nvml.so.1'\n"
            "assert n.open_nvidia(now_s=0.0) is None\n"
            "assert 'pynvml' not in sys.modules, 'pynvml imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


# The real agent on a SQLite store, in a fresh interpreter; once its writer has
# flushed a tick into the store, a thread beside it writes the modules loaded then.
AGENT_MODULES = """
import functools, json, os, sqlite3, sys, threading
from joulestat.cli.main import main
from joulestat.store.writer import StoreWriter
db, out, *flags = sys.argv[1:]
stored = threading.Event()
flush = StoreWriter.flush
@functools.wraps(flush)
def flush_then_look(self):
    done = flush(self)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as store:
        if store.execute("SELECT count(*) FROM tick_energy").fetchone()[0]:
            stored.set()
    return done
StoreWriter.flush = flush_then_look
def write_modules():
    if stored.wait(120):
        with open(out, "w") as written:
            json.dump(sorted(sys.modules), written)
    os._exit(0)
threading.Thread(target=write_modules, daemon=True).start()
main(["agent", "--db", f"sqlite:///{db}", *flags])
"""


def test_an_agent_on_sqlite_loads_no_postgresql_code_and_no_reader_code(tmp_path: Path) -> None:
    """The agent's memory (issue 48): on a SQLite store it never loads SQLAlchemy's
    PostgreSQL dialect (2 MiB of RSS, loaded by any ``postgresql_*`` option in the schema),
    psycopg, Alembic, or what only the readers use (the comparison, the dashboard)."""
    out = tmp_path / "modules.json"
    flags = ["--interval", "0.2", "--metrics-port", str(free_port()), "--api-port",
             str(free_port()), "--nvml", "false", "--spool-dir", str(tmp_path / "spool")]
    done = subprocess.run([sys.executable, "-c", AGENT_MODULES, str(tmp_path / "agent.db"),
                           str(out), *flags], env=agent_env(), capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]
    loaded = json.loads(out.read_text())
    assert "joulestat.runtime.daemon" in loaded  # the agent ran, and stored a tick
    forbidden = ("sqlalchemy.dialects.postgresql", "psycopg", "alembic", "streamlit",
                 "pandas", "joulestat.reports.compare", "joulestat.store.job_pools")
    assert [m for m in loaded if m.startswith(forbidden)] == []
