"""``joulestat run -- CMD``: run a command as a measured job.

The wrapper starts CMD, registers it (through the local agent's API, or in-process
when no agent answers), forwards SIGINT/SIGTERM, waits, reports the job's total CPU
time from ``wait4`` so the last moments are counted, waits for the job's final tick to
be attributed and stored, prints that summary on stderr and exits with CMD's exit code
(128 + N when CMD died of signal N, as shells do).

Where the node allows it (a writable cgroup v2 subtree, else v1 cpuacct), CMD runs in
a cgroup of its own, ``joulestat-job-<id>`` below the wrapper's (:mod:`joulestat.host.cgroup_jobs`),
and its CPU time is that cgroup's counter; elsewhere it is read from CMD's process tree.
Which one is said in the log and in the job's ``cpu_source`` agent label (what joulestat
records about how it measured the job, apart from the user's ``--label`` labels:
:mod:`joulestat.attribution.agent_labels`).

CMD gets ``JOULESTAT_JOB_ID``, ``JOULESTAT_AGENT_URL``, ``JOULESTAT_JOB_TOKEN`` (the
job's registrant credential; the job is registered just before CMD starts, so it can)
and, where needed, ``JOULESTAT_API_TOKEN`` (:mod:`joulestat.client.context`): a
``track()`` or ``count()`` inside it adds to this job, through the agent or, in
embedded mode, through the wrapper's own loopback API, and the node is measured once.
It also gets ``JOULESTAT_RUN_TRACKERS``, a file in a private directory where the
integrations hand over the MLflow runs they log to: once the job's last tick is
stored, the wrapper logs the job's final figures and report to them
(:mod:`joulestat.integrations.run_trackers`), since only it sees the job end.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from joulestat.attribution.agent_labels import (
    CPU_SOURCE,
    SERVING_METRICS,
    validate_serving_url,
)
from joulestat.attribution.registry import RUN_ORIGIN
from joulestat.core import jsonout
from joulestat.core.errors import ConfigError
from joulestat.core.validation import (
    KINDS,
    JobError,
    validate_job_id,
    validate_labels,
    validate_name,
)
from joulestat.host.cgroup_jobs import Placement
from joulestat.integrations.run_trackers import ENV_RUN_TRACKERS
from joulestat.runtime.embedded import EMBEDDED_OPTIONS
from joulestat.runtime.settings import ResolvedSettings, add_options, resolve

log = logging.getLogger("joulestat.run")

# How long the wrapper keeps trying to end its job at an agent that does not answer
# (restarting after a crash, or overloaded): the job's end, with the command's exit
# time, must reach it; past this the summary says the job could not be ended.
END_RETRY_S = 60.0
# How long `joulestat run` waits for an agent that answered its health check to answer a
# registration, a count or an end (finding one takes the client's 2 s at most).
AGENT_ANSWER_TIMEOUT_S = 10.0

RUN_OPTIONS = tuple(dict.fromkeys(("agent_url", "api_token", "log_level",
                                   *EMBEDDED_OPTIONS)))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a command as a measured job",
        description="Run CMD as a job: its whole process tree is measured, energy is "
        "attributed to it, and a summary is printed on stderr once its last tick is "
        "stored. With an agent running (--agent-url / JOULESTAT_AGENT_URL) the job "
        "registers through its API; without one, joulestat samples in-process and "
        "writes the same store (--db), and says so. CMD gets JOULESTAT_JOB_ID, "
        "JOULESTAT_AGENT_URL, JOULESTAT_JOB_TOKEN (and JOULESTAT_API_TOKEN): track() and "
        "count() in it add to this job; and JOULESTAT_RUN_TRACKERS, where the "
        "integrations hand over the MLflow runs they log to: once the job has ended, "
        "they get its final figures and report. To join or reopen a job with --job-id, "
        "JOULESTAT_JOB_TOKEN must hold that job's token. If the agent does not answer "
        "when CMD exits (restarting), the "
        f"job's end, with CMD's exit time, is retried for up to {END_RETRY_S:g} s.",
        usage="joulestat run --name NAME [--kind KIND] [--label K=V]... [options] -- CMD [ARG...]",
    )
    parser.add_argument("--name", required=True,
                        help="job name (no backslash, control or bidirectional characters)")
    parser.add_argument("--kind", default="other", choices=KINDS, help="default: other")
    parser.add_argument("--label", action="append", default=[], metavar="K=V",
                        help="a label; repeat for more")
    parser.add_argument("--job-id", help="join an existing job id (multi-node or multi-step "
                        "jobs report under one id)")
    parser.add_argument("--serving-metrics", metavar="URL",
                        help="the Prometheus endpoint of the serving engine CMD runs or "
                             "talks to (vLLM, TGI, SGLang: http://HOST:PORT/metrics); the "
                             "agent reads its output_token, prompt_token and request "
                             "counters and latency histograms into the job every tick")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--embedded", action="store_true",
                        help="measure in-process even if an agent answers")
    add_options(parser, RUN_OPTIONS)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD")
    parser.set_defaults(func=_run)


def parse_labels(items: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--label {item!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


class _Forwarder:
    """Passes SIGINT/SIGTERM on to the child.

    A Ctrl-C typed at the terminal already reaches the child (same foreground process
    group), so SIGINT is forwarded only when the wrapper is not in the foreground
    (e.g. sent by ``kill`` or a scheduler); SIGTERM is always forwarded.
    """

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT,
                                                                       signal.SIGTERM)}

    def _handle(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and _in_terminal_foreground():
            return
        try:
            self.child.send_signal(signum)
        except ProcessLookupError:
            pass

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def _in_terminal_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError):
        return False


def _wait(child: subprocess.Popen) -> tuple[int, float]:
    """Exit code and the child tree's CPU seconds, from wait4's rusage."""
    while True:
        try:
            _pid, status, usage = os.wait4(child.pid, 0)
            break
        except InterruptedError:
            continue
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_utime + usage.ru_stime


def _run(args: argparse.Namespace) -> int:
    from joulestat.core.logs import quiet_startup_logs, setup_logging

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise ConfigError("no command given: joulestat run --name NAME -- CMD [ARG...]")
    settings = resolve(args, RUN_OPTIONS)
    setup_logging(settings["log_level"])
    if "log_level" not in vars(args) and "JOULESTAT_LOG_LEVEL" not in os.environ:
        quiet_startup_logs()  # measured in-process, the sensor inventory is --log-level INFO
    labels = parse_labels(args.label)
    try:  # refuse bad input before anything starts
        validate_name(args.name)
        labels = validate_labels(labels)
        if args.job_id is not None:
            validate_job_id(args.job_id)
        if args.serving_metrics is not None:
            validate_serving_url(args.serving_metrics, "--serving-metrics")
    except JobError as exc:
        raise ConfigError(str(exc)) from None
    tracker = _Tracker(args, settings, labels)
    tracker.place()
    handed = Path(tempfile.mkdtemp(prefix="joulestat-run-")) / "trackers.jsonl"
    try:
        tracker.prepare()
        try:
            child = _spawn(cmd, {**os.environ, **tracker.child_env(),
                                 ENV_RUN_TRACKERS: str(handed)}, tracker)
        except OSError as exc:
            tracker.abandon()
            print(f"joulestat run: cannot start {cmd[0]!r}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 127 if isinstance(exc, FileNotFoundError) else 126
        forwarder = _Forwarder(child)
        unmeasured = None
        try:
            tracker.start(child.pid)
        except JobError as exc:
            # CMD is the user's work: the agent refusing its process is no reason to stop
            # it (issue 47). It runs on, unmeasured, and the summary says so.
            unmeasured = str(exc)
            log.warning("job %s: %s; CMD runs on, unmeasured (the job holds no process)",
                        tracker.job_id, unmeasured)
        try:
            code, cpu_s = _wait(child)
            exited_s = time.time()  # the job's end, however late the agent hears of it
        finally:
            forwarder.restore()
        summary = tracker.end(cpu_s, exited_s)
        if unmeasured is not None:
            summary["unmeasured"] = unmeasured
        tracker.deliver(handed, summary)
    finally:
        shutil.rmtree(handed.parent, ignore_errors=True)
        if tracker.placement.cgroup is not None:
            tracker.placement.cgroup.release()
    _print_summary(summary, cmd, code, args.json)
    return code if code >= 0 else 128 - code


def _spawn(cmd: list[str], env: dict[str, str], tracker: _Tracker) -> subprocess.Popen:
    """Start CMD, inside the job's own cgroup when one was made: it moves itself in
    between fork and exec, so its first instruction is counted there. If that move is
    refused (a v2 delegation rule the early checks could not see), CMD starts again
    outside it, nothing of it having run, and the job is read by its process tree."""
    cgroup = tracker.placement.cgroup
    if cgroup is None:
        return subprocess.Popen(cmd, env=env)
    try:
        return subprocess.Popen(cmd, env=env, preexec_fn=cgroup.enter)
    except subprocess.SubprocessError as exc:
        tracker.fall_back(f"cannot move CMD into {cgroup.directory} ({exc})")
        return subprocess.Popen(cmd, env=env)


class _Tracker:
    """Registers with the agent when one answers, else measures in-process."""

    def __init__(self, args: argparse.Namespace, settings: ResolvedSettings,
                 labels: dict[str, str]) -> None:
        from joulestat.api.agent_client import AgentAddress
        from joulestat.host.usage import HostSettings

        self.args, self.settings, self.labels = args, settings, labels
        # --instance-type: in-process it names the node; to an agent, what the job runs as.
        self.instance_type: str | None = settings["instance_type"]
        # cpu_source, once placed: recorded apart from the user's labels, so it neither
        # shows among them nor takes one of their places.
        self.agent_labels: dict[str, str] = {}
        if args.serving_metrics is not None:
            self.agent_labels[SERVING_METRICS] = args.serving_metrics
        self.host = settings.section(HostSettings)
        self.address = settings.section(AgentAddress)
        self.client: Any = None
        self.embedded: Any = None
        # Chosen before CMD starts, so CMD's environment can name it.
        self.job_id: str = args.job_id or uuid.uuid4().hex
        self.placement = Placement(None, "not placed yet")

    def place(self) -> Placement:
        """Make the job's own cgroup where the node allows it, and say which way the
        job's CPU time will be read: in the log, and in its ``cpu_source`` agent label."""
        from pathlib import Path

        from joulestat.host.cgroup_jobs import place

        self.placement = place(Path(self.host.sysfs_root) / "fs" / "cgroup",
                               self.job_id, self.host.procfs_root)
        # DEBUG: the agent label says it in the summary and the store, the agent's log
        # per job.
        if self.placement.cgroup is not None:
            log.debug("job %s: CMD runs %s; its CPU time is read from that cgroup",
                      self.job_id, self.placement.reason)
        else:
            log.debug("job %s: CMD gets no cgroup of its own (%s); its CPU time is read "
                      "from its process tree", self.job_id, self.placement.reason)
        self._label_source()
        return self.placement

    def fall_back(self, reason: str) -> None:
        """The cgroup could not be used after all: release it, read the process tree."""
        if self.placement.cgroup is not None:
            self.placement.cgroup.release()
        self.placement = Placement(None, reason)
        log.warning("job %s: %s; its CPU time is read from its process tree",
                    self.job_id, reason)
        self._label_source()

    def _label_source(self) -> None:
        self.agent_labels = {**self.agent_labels, CPU_SOURCE: self.placement.cpu_source}

    def prepare(self) -> None:
        """Before CMD starts: find the agent, or get in-process sampling ticking."""
        from joulestat.api.agent_client import AgentClient, AgentError, AgentUnavailable
        from joulestat.client.context import fallback_warning

        url, token = self.address.agent_url, self.address.api_token
        reason = "--embedded"
        if not self.args.embedded:
            client = AgentClient(url, token=token)
            try:
                client.health()
            except AgentUnavailable as exc:
                reason = f"no agent answered at {url} ({exc})"
            except AgentError as exc:
                raise ConfigError(f"--agent-url {url}: {exc}") from None
            else:
                # It answered: wait longer for its answers than to find it. A loaded
                # node's agent took over 2 s to register a job, and a timeout here stops
                # CMD from running at all.
                client.timeout_s = AGENT_ANSWER_TIMEOUT_S
                self.client = client
                self._register_first()
                return
        warning = fallback_warning(url, token, forced=self.args.embedded)
        if warning:
            log.warning("%s", warning)
        from joulestat.runtime.embedded import EmbeddedJob, embedded_settings

        self.embedded = EmbeddedJob(self.args.name, self.args.kind, self.labels, set(),
                                    job_id=self.job_id, settings=embedded_settings(self.settings),
                                    reason=reason, agent_labels=self.agent_labels).start()

    def _register_first(self) -> None:
        """Register the job, with no process yet, before CMD starts: its answer holds
        the job's token, which CMD's environment must carry (JOULESTAT_JOB_TOKEN) for a
        track() or count() in it to count into the job. Joining or reopening a job
        someone else registered takes that job's token in our own environment."""
        from joulestat.api.agent_client import AgentError, AgentUnavailable
        from joulestat.client.context import ENV_JOB_ID, ENV_JOB_TOKEN

        # A token in our environment is for the job JOULESTAT_JOB_ID names (our own
        # enclosing job), or, with none named, for the --job-id we were given.
        named = os.environ.get(ENV_JOB_ID, "").strip()
        if self.args.job_id is not None and named in ("", self.job_id):
            self.client.remember(self.job_id, os.environ.get(ENV_JOB_TOKEN) or None)
        try:
            job = self.client.register(self.args.name, self.args.kind, labels=self.labels,
                                       job_id=self.job_id, origin=RUN_ORIGIN,
                                       instance_type=self.instance_type,
                                       agent_labels=self.agent_labels)
        except (AgentError, AgentUnavailable) as exc:
            raise ConfigError(f"the agent refused the job: {exc}") from None
        self.job_id = job["id"]

    def abandon(self) -> None:
        """CMD could not start: end the job registered for it (best effort)."""
        from joulestat.api.agent_client import AgentError, AgentUnavailable

        if self.client is not None:
            try:
                self.client.end(self.job_id)
            except (AgentError, AgentUnavailable) as exc:
                log.warning("job %s: could not end it after CMD failed to start: %s",
                            self.job_id, exc)

    def child_env(self) -> dict[str, str]:
        from joulestat.client.context import child_env

        if self.embedded is not None:
            return child_env(self.job_id, self.embedded.api_url, self.embedded.api_token,
                             self.embedded.job_token)
        return child_env(self.job_id, self.address.agent_url, self.address.api_token,
                         self.client.job_token(self.job_id))

    def start(self, pid: int) -> None:
        """CMD is running: make it the job's process."""
        from joulestat.api.agent_client import AgentError, AgentUnavailable

        if self.embedded is not None:
            self.embedded.add_pid(pid, labels=self.labels, agent_labels=self.agent_labels)
            return
        try:
            job = self.client.register(self.args.name, self.args.kind, pids=[pid],
                                       labels=self.labels, job_id=self.job_id,
                                       origin=RUN_ORIGIN, instance_type=self.instance_type,
                                       agent_labels=self.agent_labels)
        except (AgentError, AgentUnavailable) as exc:
            raise JobError(f"the agent refused the job: {exc}") from None
        self.job_id = job["id"]

    def end(self, cpu_s: float, exited_s: float) -> dict[str, Any]:
        """End the job as of ``exited_s`` (CMD's exit) and wait for its final summary.

        An agent restarting (after ``kill -9``, under a supervisor) does not answer for
        a few seconds; the end is retried through that for up to :data:`END_RETRY_S`,
        and says when CMD exited, so the job neither stays running in the store nor
        is charged for the time the agent was away."""
        if self.embedded is not None:
            summary = self.embedded.end(cpu_s=cpu_s)
            summary["mode"] = "embedded"
            return summary
        from joulestat.api.agent_client import AgentError, AgentUnavailable, retrying

        client, job_id = self.client, self.job_id
        deadline = time.monotonic() + END_RETRY_S
        try:
            summary = retrying(lambda: client.end(job_id, cpu_s=cpu_s, ended_at=exited_s),
                               END_RETRY_S, f"ending job {job_id}")
        except (AgentError, AgentUnavailable) as exc:
            print(f"joulestat run: could not end job {job_id} at the agent within "
                  f"{END_RETRY_S:g} s: {exc}", file=sys.stderr)
            return {"id": job_id, "mode": "agent", "final": False}
        try:
            timeout_s = client.final_timeout_s()
            while timeout_s is not None:
                summary = retrying(lambda wait_s=timeout_s: client.wait_final(job_id, wait_s),
                                   max(0.0, deadline - time.monotonic()),
                                   f"waiting for job {job_id}'s final tick")
                if summary.get("status") != "running" or time.monotonic() >= deadline:
                    break
                # An agent restarted since it answered the end, without it: the end is
                # sent again (idempotent: the same exit time), never left for the job to
                # run on forever (issue 47).
                log.warning("job %s is running again at the agent (restarted since it "
                            "took the end?); ending it again", job_id)
                summary = retrying(lambda: client.end(job_id, cpu_s=cpu_s, ended_at=exited_s),
                                   max(0.0, deadline - time.monotonic()), f"ending job {job_id}")
                timeout_s = client.final_timeout_s()
        except (AgentError, AgentUnavailable) as exc:  # ended: the summary says not final
            log.warning("job %s ended; its final figures could not be read: %s", job_id, exc)
        summary["mode"] = "agent"
        return summary

    def deliver(self, handed: Path, summary: dict[str, Any]) -> None:
        """The ended job's final figures and report to the tracker runs CMD handed over
        (:mod:`joulestat.integrations.run_trackers`); what was done goes into the
        summary as ``trackers``. Only once the job is final: figures of a job still
        being stored would be the very disagreement this is for."""
        from joulestat.integrations.run_trackers import handed_over

        runs = handed_over(handed, self.job_id)
        if not runs:
            return
        if not summary.get("final", True):
            log.warning("job %s: its final figures were not stored in time; MLflow runs "
                        "%s keep the figures of the end of training", self.job_id,
                        ", ".join(run.run_id for run in runs))
            return
        try:
            if self.embedded is not None:
                service = self.embedded.figures()
                figures, report = service.figures(self.job_id), service.report(self.job_id)
            else:
                figures, report = self.client.figures(self.job_id), self.client.report(
                    self.job_id)
        except Exception as exc:  # the agent or the store: the command's code stands
            log.warning("job %s: its final figures could not be read for MLflow runs %s: %s",
                        self.job_id, ", ".join(run.run_id for run in runs), exc)
            return
        summary["trackers"] = _deliver(runs, figures, report)


def _deliver(runs: list[Any], figures: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """Log the ended job's figures and report to each run; one phrase per run done. A
    run that cannot take them is said and skipped: CMD's exit code and the job's
    figures in the store do not depend on it."""
    from joulestat.integrations.training import write_report

    done: list[str] = []
    with tempfile.TemporaryDirectory(prefix="joulestat-report-") as directory:
        files = write_report(report, directory)
        for run in runs:
            try:
                from joulestat.integrations.mlflow import log_final

                step = log_final(run, figures, files)
            except Exception as exc:  # ImportError, MLflow's own, its store away
                log.warning("job %s: the final figures could not be logged to MLflow run "
                            "%s: %r", run.job_id, run.run_id, exc)
                continue
            done.append(f"final figures logged to MLflow run {run.run_id} at step {step}")
    return done


def _print_summary(summary: dict[str, Any], cmd: list[str], code: int, as_json: bool) -> None:
    """The job's summary on stderr; figures through :mod:`joulestat.core.units`, the formatter of
    the dashboard and reports, so "2.05 mJ per sample" here reads so everywhere."""
    from joulestat.core import units
    from joulestat.core.redact import redact_labels

    if isinstance(summary.get("labels"), dict):
        summary = {**summary, "labels": redact_labels(summary["labels"])}
    if as_json:
        print(jsonout.dumps({**summary, "exit_code": code}), file=sys.stderr)
        return
    started, ended = summary.get("started_at"), summary.get("ended_at")
    duration = f"{ended - started:.1f} s" if started and ended else "unknown"
    lines = [f"joulestat: job {summary.get('name', '?')} ({summary.get('id')}) "
             f"{'exited ' + str(code)}, {duration}, measured {summary.get('mode')}"]
    if summary.get("final") is False:
        lines.append("  not final: the agent had not stored the job's last tick yet; "
                     "`joulestat jobs` will show the complete figures")
    if summary.get("unmeasured"):
        lines.append(f"  unmeasured: {summary['unmeasured']}")
    energy = summary.get("energy_j") or {}
    if energy:
        parts = ", ".join(f"{c} {units.energy(j)}" for c, j in sorted(energy.items()))
        lines.append(f"  energy {units.energy(summary.get('total_energy_j', 0))} ({parts}); "
                     f"dynamic {units.energy(summary.get('dynamic_energy_j', 0))}, "
                     f"idle share {units.energy(summary.get('idle_energy_j', 0))}")
    for unit, count in sorted((summary.get("units") or {}).items()):
        if count > 0:
            per = summary.get("total_energy_j", 0) / count
            lines.append(f"  {units.count(count)} {unit}: "
                         f"{units.per(units.energy(per), unit)}")
    lines.extend(f"  {done}" for done in summary.get("trackers") or ())
    print("\n".join(lines), file=sys.stderr)
