"""Run the real ``joulestat agent`` as a subprocess and scrape it, as a user would."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.cli import CliResult

JOULESTAT = str(Path(sys.executable).with_name("joulestat"))


_ports = random.Random()  # seeded from the OS: each xdist worker picks its own ports


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (the local ends of outgoing
    connections), 32768 where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds now, for a server a test starts a moment
    later (or for a URL where nothing must answer).

    Picked at random below the kernel's ephemeral range where there is room: a port of
    that range may be taken meanwhile as the local end of any outgoing connection (a test
    beside this one posting thousands of requests goes through the range in seconds),
    which left an agent that bound its port seconds later, on a loaded machine, with
    "Address already in use". Other workers' picks rarely meet one (16,000 ports);
    :func:`running_agent` starts again on new ports when one does."""
    low = _ephemeral_low()
    candidates = range(max(10_000, low - 16_000), low)
    for _ in range(100 if len(candidates) > 1000 else 0):
        port = _ports.choice(candidates)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def agent_env(**extra: str) -> dict[str, str]:
    """The environment minus any JOULESTAT_* of the developer's, and never a metadata probe."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOULESTAT_")}
    env["JOULESTAT_CLOUD_METADATA"] = "false"
    env["JOULESTAT_FLUSH_INTERVAL"] = "1"  # tests read the store soon after the agent writes
    env.update(extra)
    return env


@dataclass
class RunningAgent:
    proc: subprocess.Popen
    port: int
    db_url: str
    log_path: Path
    api_port: int = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def client_env(self, **extra: str) -> dict[str, str]:
        """Environment for `joulestat run/jobs` talking to this agent and its store."""
        return agent_env(**{"JOULESTAT_AGENT_URL": self.api_url,
                            "JOULESTAT_DB": self.db_url, **extra})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def text(self) -> str:
        with urllib.request.urlopen(self.url, timeout=5) as response:
            return response.read().decode()

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """{(sample name, sorted labels): value} from one scrape."""
        found = {}
        for family in text_string_to_metric_families(self.text()):
            for sample in family.samples:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return found

    def value(self, name: str, **labels: str) -> float:
        wanted = tuple(sorted(labels.items()))
        return self.samples()[(name, wanted)]

    def series(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: v for (n, labels), v in self.samples().items() if n == name}

    def log(self) -> str:
        return self.log_path.read_text()

    def api_accepts(self) -> None:
        """Returns once the job API's port takes a connection; raises OSError before."""
        socket.create_connection(("127.0.0.1", self.api_port), timeout=5).close()

    def stop(self, timeout_s: float = 20) -> int:
        """SIGINT, as Ctrl-C: the agent counts its last partial tick, flushes the store
        and exits; its exit status. An agent still running after ``timeout_s`` raises
        :class:`AgentHung`, which says where its threads were (py-spy, where installed)
        and the end of its log: what a hang leaves to go on once it is killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise AgentHung(self, timeout_s) from exc


class AgentHung(subprocess.TimeoutExpired):
    """An agent that did not exit ``timeout_s`` after SIGINT: its threads' stacks as
    py-spy dumps them (``pip install py-spy``; as root, or where ptrace is allowed) and
    the last lines of its log."""

    def __init__(self, agent: RunningAgent, timeout_s: float) -> None:
        super().__init__(agent.proc.args, timeout_s)
        self.pid = agent.proc.pid
        self.stacks = _stacks(agent.proc.pid)
        self.log_tail = "\n".join(agent.log().splitlines()[-40:])

    def __str__(self) -> str:
        return (f"agent pid {self.pid} still running {self.timeout:g} s after SIGINT\n"
                f"--- its threads ---\n{self.stacks}\n"
                f"--- the end of its log ---\n{self.log_tail}")


def communicate_or_explain(proc: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """``proc.communicate(timeout=timeout_s)``; a process (tree) still running then is
    killed and the test fails with what it was doing: each process's threads (py-spy,
    where installed) and everything it wrote to stderr, which a hang at exit leaves as
    the only trace."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        import psutil

        tree = [psutil.Process(proc.pid)]
        try:
            tree += tree[0].children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        stacks = "\n".join(f"--- pid {p.pid} ---\n{_stacks(p.pid)}" for p in tree)
        for process in reversed(tree):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{proc.args!r} still running {timeout_s:g} s on\n{stacks}\n"
                             f"--- its stdout ---\n{out}\n--- its stderr ---\n{err}") from None


def _stacks(pid: int) -> str:
    """``py-spy dump`` of process ``pid``, or why there is none."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.access(spy, os.X_OK):
        return "(py-spy is not installed: pip install py-spy)"
    try:
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(py-spy dump failed: {exc})"
    return done.stdout + done.stderr


_template: list[Path] = []  # this process's empty store at the head revision, once made


def store_at_head(path: Path) -> str:
    """An empty SQLite store at the head revision at ``path`` (which must not exist): a
    copy of one this process migrated once. An agent started on it need not create the
    schema, which it does in a `joulestat db upgrade` process of its own (half a CPU-second,
    seconds on a loaded machine). Returns its URL."""
    if not _template:
        from joulestat.store import migrate
        from joulestat.store.engine import make_engine

        folder = Path(tempfile.mkdtemp(prefix="joulestat-store-at-head-"))
        atexit.register(shutil.rmtree, folder, True)
        engine = make_engine(f"sqlite:///{folder / 'head.db'}")
        migrate.upgrade(engine)
        engine.dispose()  # the last connection gone: the WAL is in the file
        _template.append(folder / "head.db")
    shutil.copyfile(_template[0], path)
    return f"sqlite:///{path}"


@contextmanager
def running_agent(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                  api_port: int | None = None, port: int | None = None,
                  at_head: bool = False) -> Iterator[RunningAgent]:
    """The real agent on ``tmp_path`` (its log, its spool and, unless ``--db`` says
    otherwise, its SQLite store), ready: serving metrics and the job API. ``at_head``:
    a SQLite store that does not exist yet is put there at the head revision first
    (:func:`store_at_head`), for a test that is not about the agent creating it."""
    db_url = f"sqlite:///{tmp_path / 'agent.db'}"
    log_path = tmp_path / "agent.log"
    if "--db" in args:
        db_url = args[list(args).index("--db") + 1]
    else:
        args = ("--db", db_url, *args)
    if at_head and db_url.startswith("sqlite:///"):
        db_path = Path(db_url.removeprefix("sqlite:///"))
        if not db_path.exists():
            store_at_head(db_path)
    if "--spool-dir" not in args:  # a test's outage must never reach another test's store
        args = ("--spool-dir", str(tmp_path / "spool"), *args)
    for attempt in range(1, 4):
        offset = log_path.stat().st_size if log_path.exists() else 0
        agent = _start_agent(args, env, log_path, db_url, port or free_port(),
                             api_port or free_port())
        try:
            _wait_ready(agent, offset, api="--api-port" not in args)
        except _PortTaken:
            if attempt == 3:
                raise
            continue  # a port picked here was taken meanwhile: again, on new ports
        except BaseException:
            _end(agent.proc)
            raise
        break
    try:
        yield agent
    finally:
        _end(agent.proc)


class _PortTaken(AssertionError):
    """The agent stopped at start because a port picked for it was taken meanwhile."""


def _start_agent(args: tuple[str, ...], env: dict[str, str] | None, log_path: Path,
                 db_url: str, port: int, api_port: int) -> RunningAgent:
    argv = [JOULESTAT, "agent", "--metrics-port", str(port), "--api-port", str(api_port),
            "--nvml", "false", *args]
    with log_path.open("a") as log:
        proc = subprocess.Popen(argv, env=env or agent_env(), stdout=log, stderr=log)
    return RunningAgent(proc, port, db_url, log_path, api_port)


def _wait_ready(agent: RunningAgent, offset: int, api: bool) -> None:
    """Return once ``agent`` serves metrics and (``api``) accepts on the job API (which
    opens after the store and the jobs restored from it: on a loaded machine, seconds
    later). An agent that stopped because one of its ports was taken meanwhile raises
    :class:`_PortTaken`, what it logged (after ``offset``) gone from the log: a test
    counts what its agents logged."""
    deadline = time.monotonic() + 30
    ready = [agent.text] + ([agent.api_accepts] if api else [])
    while ready:
        if agent.proc.poll() is not None:
            log = agent.log()
            if agent.proc.returncode == 2 and "Address already in use" in log[offset:]:
                with agent.log_path.open("r+") as file:
                    file.truncate(offset)
                raise _PortTaken(f"agent exited with 2:\n{log}")
            raise AssertionError(f"agent exited with {agent.proc.returncode}:\n{log}")
        try:
            ready[0]()
            ready.pop(0)
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"agent never became ready:\n{agent.log()}") from None
            time.sleep(0.1)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def run_cli(*args: str, env: dict[str, str] | None = None, timeout_s: float = 60
            ) -> subprocess.CompletedProcess:
    return subprocess.run([JOULESTAT, *args], env=env or agent_env(), capture_output=True,
                          text=True, timeout=timeout_s)


def read_cli(*args: str, env: Mapping[str, str] | None = None) -> CliResult:
    """``joulestat ARGS`` run in this process (:func:`tests.helpers.cli.invoke`) under
    ``env`` (default :func:`agent_env`), for a test that reads what a command prints
    (``jobs``, ``report``, ``compare``) rather than tests the process: a process costs
    about a CPU-second of imports, which a wait loop polling the store would pay every
    round. The young garbage is collected afterwards, which closes the SQLite
    connections of the command's engines (cycles) in a millisecond: a full collection
    in a process that has imported the whole suite takes a tenth of a second, holding
    the GIL from the test's own servers (a fake serving engine) all the while."""
    from tests.helpers.cli import invoke

    result = invoke(*args, env=agent_env() if env is None else env)
    gc.collect(1)
    return result


def jobs_in_store(env: Mapping[str, str]) -> dict[str, dict]:
    """:func:`stored_jobs` read in this process: ``joulestat jobs --json`` by job name."""
    result = read_cli("jobs", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return {job["name"]: job for job in json.loads(result.stdout)}


def wait_for(predicate, timeout_s: float = 15, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(every_s)


def start_run(name: str, code: str, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [JOULESTAT, "run", "--name", name, "--json", *extra, "--", sys.executable, "-c", code],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def summary_of(proc: subprocess.Popen, timeout_s: float = 60) -> dict:
    _out, err = proc.communicate(timeout=timeout_s)
    lines = [line for line in err.splitlines() if line.startswith("{")]
    assert lines, err
    return json.loads(lines[-1])


def stored_jobs(env: dict[str, str]) -> dict[str, dict]:
    result = subprocess.run([JOULESTAT, "jobs", "--json"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return {job["name"]: job for job in json.loads(result.stdout)}


def in_memory(path: Path) -> Path:
    """``path`` (which must not exist) as a link to a new directory in memory (/dev/shm)
    where there is one, else a plain directory; returns ``path``. For a fake sysfs whose
    driver thread rewrites a counter file hundreds of times a second: on the disk a
    rename now and then waits a tenth of a second behind other tests' writes, and an
    agent reading the file meanwhile sees a counter that stood still (a freeze, to it).
    The directory goes when this process ends."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        target = Path(tempfile.mkdtemp(prefix="joulestat-test-", dir=shm))
        atexit.register(shutil.rmtree, target, True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target, target_is_directory=True)
    else:
        path.mkdir(parents=True)
    return path


def agent_at_head(tmp_path: Path, *args: str, **kwargs) -> AbstractContextManager[RunningAgent]:
    """:func:`running_agent` on a store already at the head revision (``at_head``)."""
    return running_agent(tmp_path, *args, at_head=True, **kwargs)


@contextmanager
def agent_on_fake_rapl(tmp_path: Path, *args: str, power_w: float = 60.0,
                       interval_s: float = 0.25, env: dict[str, str] | None = None,
                       at_head: bool = False,
                       energy_now: Callable[[], float] | None = None,
                       drivers: list[Any] | None = None) -> Iterator[RunningAgent]:
    """The real agent, node ``n1``, on a fake RAPL package drawing ``power_w`` (or, with
    ``energy_now``, whatever that says was drawn so far), ticking every ``interval_s``:
    the node the system tests measure jobs on. ``drivers`` gets the package's driver
    (to freeze its counter)."""
    from tests.fakes.powercap import FakePowercap

    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**13)
    node = ("--sysfs-root", str(tmp_path / "sys"), "--interval", str(interval_s),
            "--node", "n1")
    with fake.drive("intel-rapl:0", power_w=power_w, hz=500, energy_now=energy_now) as driver, \
            running_agent(tmp_path, *node, *args, env=env, at_head=at_head) as agent:
        if drivers is not None:
            drivers.append(driver)
        yield agent


@contextmanager
def idle_process() -> Iterator[subprocess.Popen]:
    """A process of this user that runs (blocked on its standard input) until the block
    ends: one a test's job can claim (a registration claims only processes that run)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.communicate()
