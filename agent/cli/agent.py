"""``joulestat agent``: the sidecar daemon."""

from __future__ import annotations

import argparse

from joulestat.runtime.settings import add_options, resolve

AGENT_OPTIONS = (
    "config",
    "db",
    "db_wait",
    "log_level",
    "interval",
    "sysfs_root",
    "procfs_root",
    "node",
    "instance_type",
    "region",
    "cloud_metadata",
    "metrics_port",
    "metrics_host",
    "flush_interval",
    "raw_retention",
    "replay",
    "nvml",
    "neuron_max_power_w",
    "neuron_monitor",
    "api_port",
    "api_host",
    "api_token",
    "idle_policy",
    "discover",
    "serving_metrics_allow",
    "kube_pods",
    "job_retention",
    "spool_dir",
    "spool_max",
    "max_jobs",
    "max_job_series",
    "otlp_endpoint",
    "otlp_protocol",
    "otlp_headers",
    "otlp_interval",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the sampling daemon (Prometheus endpoint + SQL store)",
        description="Sample this node's CPU, DRAM, accelerator and network energy every "
        "--interval seconds, serve it to Prometheus on --metrics-port (and push it over "
        "OTLP to --otlp-endpoint, if set) and write it to the store (--db). Measured "
        "sources (RAPL, NVML) are used where readable; elsewhere documented estimates "
        "(see `joulestat estimate` and docs/methodology.md). Stop with Ctrl-C or "
        "SIGTERM: the last partial tick is counted and the store flushed.",
    )
    add_options(parser, AGENT_OPTIONS)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from joulestat.core.logs import setup_logging
    from joulestat.runtime.daemon import AgentSettings, run_agent

    settings = resolve(args, AGENT_OPTIONS)
    setup_logging(settings["log_level"])
    return run_agent(AgentSettings.of(settings))
