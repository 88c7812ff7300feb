"""The public metric contract, in one place.

The collector takes names, types, labels and help text from here, and
``docs/metrics.md`` is rendered from here (``python -m joulestat.outputs.metric_catalog``),
so the documentation cannot drift from what a scrape returns; a test checks both.
Renaming anything here breaks users' dashboards and alerts: add, never rename.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the exposed name, with _total for counters
    type: str  # counter, gauge, info, summary
    labels: tuple[str, ...]
    help: str

    @property
    def family_name(self) -> str:
        """The name client_python wants: it appends _total / _info itself."""
        suffix = {"counter": "_total", "info": "_info"}.get(self.type, "")
        if suffix and self.name.endswith(suffix):
            return self.name[: -len(suffix)]
        return self.name


NODE_ENERGY = MetricSpec(
    "joulestat_node_energy_joules_total",
    "counter",
    ("component", "device", "source"),
    "Energy used by this node since the agent started, per component and device, in joules. "
    "Power is rate() of this counter. source says where the number came from "
    "(rapl, nvml_energy, nvml_power, amdsmi, amdsmi_power, hlml, hlml_power, neuron, "
    "model:<name>, replay). component is cpu, dram, accelerator (every accelerator, "
    "whatever its vendor), net or platform; "
    "component=platform (RAPL psys) overlaps cpu and dram: never sum it with them.",
)
NODE_POWER = MetricSpec(
    "joulestat_node_power_watts",
    "gauge",
    ("component", "device", "source"),
    "Average power over the last tick, in watts (a convenience; prefer rate() of the counter).",
)
NODE_INFO = MetricSpec(
    "joulestat_node_info",
    "info",
    ("node", "instance_type", "region", "cpu_model", "agent_version"),
    "Describes this node; always 1.",
)
NODE_DEVICE_INFO = MetricSpec(
    "joulestat_node_device_info",
    "info",
    ("component", "device", "vendor", "model", "uuid", "attribution"),
    "Describes each device the node's energy series name (one per component and device): "
    "vendor and model (\"NVIDIA T4\", \"AWS Inferentia2\"), the hardware id where the "
    "vendor API has one, and attribution=mig_slice_estimate where a MIG GPU's energy is "
    "split among jobs by slice count (an estimate; else empty); always 1. Join on "
    "component and device.",
)
NODE_DEVICE_POWER_LIMIT = MetricSpec(
    "joulestat_node_device_power_limit_watts",
    "gauge",
    ("component", "device"),
    "The accelerator's power limit, in watts, read once when the agent starts (NVIDIA: the "
    "enforced limit; AMD: amdsmi's power_limit; Intel Gaudi: HLML's default limit). A "
    "board capped below its rating draws less and runs longer for the same work. Absent "
    "where the vendor API has none (AWS Neuron).",
)
NODE_DEVICE_CLOCK = MetricSpec(
    "joulestat_node_device_clock_hertz",
    "gauge",
    ("component", "device"),
    "The accelerator's compute clock (NVIDIA: SM clock; AMD: GFX clock), in hertz, read "
    "when Prometheus scrapes, not on the agent's tick (so it costs the tick nothing and is "
    "as fresh as the scrape).",
)
NODE_DEVICE_MEMORY_USED = MetricSpec(
    "joulestat_node_device_memory_used_bytes",
    "gauge",
    ("component", "device"),
    "Accelerator memory in use (NVIDIA: nvmlDeviceGetMemoryInfo used; AMD: VRAM used), in "
    "bytes, read when Prometheus scrapes, as the clock is.",
)
AGENT_TICKS = MetricSpec(
    "joulestat_agent_ticks_total",
    "counter",
    (),
    "Ticks the agent has completed.",
)
AGENT_TICK_SECONDS = MetricSpec(
    "joulestat_agent_tick_seconds",
    "summary",
    (),
    "Time the agent spent working on each tick (reading sensors, exporting, buffering "
    "rows), in seconds: the agent's own overhead.",
)
AGENT_SENSOR_ERRORS = MetricSpec(
    "joulestat_agent_sensor_errors_total",
    "counter",
    ("sensor",),
    "Ticks on which a sensor failed to read (the agent kept ticking on the others).",
)
AGENT_SENSOR_FAULTS = MetricSpec(
    "joulestat_agent_sensor_faults_total",
    "counter",
    ("sensor", "kind"),
    "Hardware counter faults a sensor found, one per event: frozen (unchanged while the "
    "device drew power), backwards (went back with no plausible wrap), jump (past what the "
    "device can draw), range_changed (max_energy_range_uj changed), unreadable (gone or "
    "malformed). Ticks of an event are filled from the device's recent power and stored "
    "as fill:<sensor> (an estimate).",
)
AGENT_STORE_BUFFERED = MetricSpec(
    "joulestat_agent_store_buffered_rows",
    "gauge",
    (),
    "Rows (ticks, job shares, unit counts) waiting in memory for the next store write.",
)
AGENT_STORE_SPOOLED = MetricSpec(
    "joulestat_agent_store_spooled_bytes",
    "gauge",
    (),
    "Bytes of rows waiting in the on-disk spool because the store did not answer; "
    "written back, oldest first, when it does (--spool-dir, --spool-max).",
)
AGENT_STORE_ROWS = MetricSpec(
    "joulestat_agent_store_rows_total",
    "counter",
    ("outcome",),
    "Rows by what became of them: written (to the store), spooled (to disk while the store "
    "was away), folded (job shares merged into unattributed when the buffer was full: the "
    "energy kept, who used it lost), dropped (lost: the buffer or the spool overflowed, or "
    "rows older than the settled boundary).",
)
AGENT_SPOOL_WRITE_FAILURES = MetricSpec(
    "joulestat_agent_spool_write_failures_total",
    "counter",
    (),
    "Batches the spool could not write (its disk full or unwritable: ENOSPC, EIO, ...); "
    "their rows stay in memory up to the buffer's bound (docs/jobs.md, Back-pressure), then "
    "the oldest are dropped and counted in joulestat_agent_store_rows_total{outcome=\"dropped\"}.",
)
AGENT_LOST_ENERGY = MetricSpec(
    "joulestat_agent_lost_energy_joules_total",
    "counter",
    ("reason",),
    "Energy no job was given beyond the ticks' own unattributed share, by reason, each also "
    "said at WARNING with its joules and seconds: unmeasured_gap (no tick covers the time "
    "since an unusable checkpoint; a floor, at the node's idle power), jobs_restored_late "
    "(the node's energy while the jobs of before a restart waited for the store), "
    "spool_dropped (batches a full spool dropped, never stored), buffer_folded (jobs' "
    "shares folded into unattributed by a full row buffer), buffer_dropped (rows a full "
    "buffer dropped, never stored).",
)
AGENT_STORE_UP = MetricSpec(
    "joulestat_agent_store_up",
    "gauge",
    (),
    "1 when the last store write succeeded, 0 while the store does not answer.",
)
AGENT_STORE_FLUSH_SECONDS = MetricSpec(
    "joulestat_agent_store_flush_seconds",
    "summary",
    (),
    "Time each successful store write took, spool included, in seconds.",
)
AGENT_API_REJECTIONS = MetricSpec(
    "joulestat_agent_api_rejections_total",
    "counter",
    ("reason",),
    "Job API requests refused: busy (too many in flight, 429), max_jobs (--max-jobs "
    "running jobs reached, 429).",
)

JOB_ENERGY = MetricSpec(
    "joulestat_job_energy_joules_total",
    "counter",
    ("job_id", "job_name", "kind", "component"),
    "Energy attributed to a job on this node, in joules (dynamic plus its idle share under "
    "--idle-policy share). Ended jobs stay exported for --job-retention, then drop; at most "
    "--max-job-series jobs are exported at once.",
)
JOB_WORK_UNITS = MetricSpec(
    "joulestat_job_work_units_total",
    "counter",
    ("job_id", "job_name", "unit"),
    "Work units a job reported (inference, sample, step, token, ...); energy per unit is "
    "rate(joulestat_job_energy_joules_total) / rate(joulestat_job_work_units_total).",
)

METRICS: tuple[MetricSpec, ...] = (
    NODE_ENERGY,
    NODE_POWER,
    NODE_INFO,
    NODE_DEVICE_INFO,
    NODE_DEVICE_POWER_LIMIT,
    NODE_DEVICE_CLOCK,
    NODE_DEVICE_MEMORY_USED,
    AGENT_TICKS,
    AGENT_TICK_SECONDS,
    AGENT_SENSOR_ERRORS,
    AGENT_SENSOR_FAULTS,
    AGENT_STORE_BUFFERED,
    AGENT_STORE_SPOOLED,
    AGENT_STORE_ROWS,
    AGENT_SPOOL_WRITE_FAILURES,
    AGENT_LOST_ENERGY,
    AGENT_STORE_UP,
    AGENT_STORE_FLUSH_SECONDS,
    AGENT_API_REJECTIONS,
    JOB_ENERGY,
    JOB_WORK_UNITS,
)


def render_markdown() -> str:
    lines = [
        "# Prometheus metrics",
        "",
        "Generated from `agent/outputs/metric_catalog.py` by",
        "`python -m joulestat.outputs.metric_catalog > docs/metrics.md`; a test fails when",
        "this file and the code disagree. These names are a public contract: they are added",
        "to, never renamed.",
        "",
        "The agent serves them on `--metrics-port` (default 9464) at `/metrics`, bound to",
        "`--metrics-host` (default 127.0.0.1). Standard `process_*` metrics describe the agent",
        "process itself.",
        "",
        "The same figures can be pushed over OTLP (`--otlp-endpoint`), under the",
        "OpenTelemetry names [docs/opentelemetry.md](opentelemetry.md) lists.",
        "",
        "The accelerator component was `gpu` in early development (issue 14): a "
        "query or rule that selected `component=\"gpu\"` selects "
        "`component=\"accelerator\"` now.",
        "",
        "| name | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for spec in METRICS:
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "none"
        lines.append(f"| `{spec.name}` | {spec.type} | {labels} | {spec.help} |")
    lines += [
        "",
        "## Useful queries",
        "",
        "```promql",
        "# node power by component, from the counter",
        "sum by (component) (",
        "  rate(joulestat_node_energy_joules_total{component!=\"platform\"}[1m]))",
        "# joules per inference of each job over the last 5 minutes",
        "sum by (job_name) (rate(joulestat_job_energy_joules_total[5m]))",
        "  / sum by (job_name) (rate(joulestat_job_work_units_total{unit=\"inference\"}[5m]))",
        "# the agent's own CPU use, in cores",
        "rate(process_cpu_seconds_total{job=\"joulestat\"}[5m])",
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render_markdown())
