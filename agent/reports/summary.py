"""A summary of many jobs by team, label, month or instance type: what a sustainability
team hands on (``joulestat report --all --by KEY``).

Why its own module: the job report answers "what did this job cost"; the summary
answers "what did this team (month, instance type) cost", over every job of a period.
Its figures are the job reports' own, added up, never recomputed: the same joules,
CO2e and dollars a job's report gives (one figure, one path), so a group's row is
exactly the sum of its jobs' reports. Grouping by a property of the job (a label, its
month, its kind) takes each job whole; grouping by a property of a node (instance
type, region) takes each node's part of a job, so a job that ran on two instance types
is split between them as its report splits it.

Unknowns stay unknown: a group whose jobs include one with no price reads its cost as
the sum of the priced ones and says how many were not priced (``unpriced_jobs``), never
0; CO2e likewise (``jobs_without_co2e``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from joulestat.core import units as fmt
from joulestat.core.csv_cells import text_cell
from joulestat.core.errors import ConfigError
from joulestat.reports.tables import Table

Report = Mapping[str, Any]
NONE_GROUP = "(none)"  # a job without the label grouped by


class GroupKind(Enum):
    """What a summary groups by."""

    LABEL = "label"
    MONTH = "month"
    KIND = "kind"
    INSTANCE_TYPE = "instance_type"
    REGION = "region"


@dataclass(frozen=True)
class GroupBy:
    """``--by``: ``label:KEY`` (``team`` is ``label:team``), ``month``, ``kind``,
    ``instance_type`` or ``region``."""

    kind: GroupKind
    label: str | None = None

    @classmethod
    def parse(cls, text: str) -> GroupBy:
        text = text.strip()
        if text.startswith("label:") and len(text) > len("label:"):
            return cls(GroupKind.LABEL, text.removeprefix("label:"))
        if text == "team":
            return cls(GroupKind.LABEL, "team")
        try:
            return cls(GroupKind(text))
        except ValueError:
            raise ConfigError(
                f"--by: expected label:KEY (or team), month, kind, instance_type or region, "
                f"got {text!r}") from None

    @property
    def per_node(self) -> bool:
        return self.kind in (GroupKind.INSTANCE_TYPE, GroupKind.REGION)

    @property
    def title(self) -> str:
        return f"label {self.label}" if self.kind is GroupKind.LABEL else \
            self.kind.value.replace("_", " ")


@dataclass
class SummaryRow:
    """One group's sums (mutable while the jobs are added, then read only)."""

    group: str
    job_ids: set[str] = field(default_factory=set)
    energy_j: float = 0.0
    co2e_g: float = 0.0
    embodied_co2e_g: float = 0.0
    cost_usd: float = 0.0
    unpriced_jobs: set[str] = field(default_factory=set)
    without_co2e_jobs: set[str] = field(default_factory=set)

    @property
    def jobs(self) -> int:
        return len(self.job_ids)

    @property
    def total_co2e_g(self) -> float:
        return self.co2e_g + self.embodied_co2e_g

    def add(self, job_id: str, energy_j: float | None, co2e_g: float | None,
            embodied_co2e_g: float | None, cost_usd: float | None) -> None:
        self.job_ids.add(job_id)
        self.energy_j += energy_j or 0.0
        if co2e_g is None:
            self.without_co2e_jobs.add(job_id)
        else:
            self.co2e_g += co2e_g
        self.embodied_co2e_g += embodied_co2e_g or 0.0
        if cost_usd is None:
            self.unpriced_jobs.add(job_id)
        else:
            self.cost_usd += cost_usd


@dataclass(frozen=True)
class Summary:
    by: GroupBy
    rows: tuple[SummaryRow, ...]  # largest total CO2e first
    total: SummaryRow
    period: str  # what the jobs are ("every job", "jobs running since ...")
    generated_at: str


def _job_group(report: Report, by: GroupBy) -> str:
    job = report["job"]
    if by.kind is GroupKind.LABEL:
        value = job["labels"].get(by.label)
        return value if value else NONE_GROUP
    if by.kind is GroupKind.MONTH:
        return str(job["started_at"])[:7]  # "2023-11" of an ISO 8601 UTC time
    return str(job["kind"])


def summarize(reports: Iterable[Report], by: GroupBy, period: str,
              generated_at: str) -> Summary:
    """The reports' figures summed by ``by``."""
    groups: dict[str, SummaryRow] = {}
    total = SummaryRow("total")
    for report in reports:
        job_id = report["job"]["id"]
        if by.per_node:
            parts = [(str(node.get(by.kind.value) or NONE_GROUP), node["energy_j"]["total"],
                      node.get("co2e_g"), node.get("embodied_co2e_g"), node.get("cost_usd"))
                     for node in report["nodes"]]
        else:
            parts = [(_job_group(report, by), report["energy_j"]["total"], report["co2e_g"],
                      report["embodied_co2e_g"], report["cost_usd"])]
        for group, energy_j, co2e_g, embodied_g, cost_usd in parts:
            groups.setdefault(group, SummaryRow(group)).add(job_id, energy_j, co2e_g,
                                                            embodied_g, cost_usd)
        total.add(job_id, report["energy_j"]["total"], report["co2e_g"],
                  report["embodied_co2e_g"], report["cost_usd"])
    rows = sorted(groups.values(), key=lambda r: (-r.total_co2e_g, -r.energy_j, r.group))
    return Summary(by, tuple(rows), total, period, generated_at)


# -- As a person reads it: one table, every figure through joulestat.core.units -------

HEADERS = ("jobs", "energy", "CO2e operational", "CO2e embodied", "CO2e total", "cost")


def _cells(row: SummaryRow) -> tuple[str, ...]:
    co2e = fmt.mass(row.co2e_g)
    if row.without_co2e_jobs:
        co2e += f" ({len(row.without_co2e_jobs)} job(s) unknown)"
    cost = fmt.usd(row.cost_usd) if len(row.unpriced_jobs) < row.jobs else fmt.UNKNOWN
    if row.unpriced_jobs and len(row.unpriced_jobs) < row.jobs:
        cost += f" ({len(row.unpriced_jobs)} job(s) unpriced)"
    return (fmt.count(row.jobs), f"{fmt.energy_wh(row.energy_j)} ({fmt.energy(row.energy_j)})",
            co2e, fmt.mass(row.embodied_co2e_g), fmt.mass(row.total_co2e_g), cost)


def summary_table(summary: Summary) -> Table:
    """The summary as one table, its total last."""
    rows = tuple((row.group, *_cells(row)) for row in (*summary.rows, summary.total))
    return Table(f"By {summary.by.title}", (summary.by.title, *HEADERS), rows,
                 (2.2, 0.7, 1.6, 1.6, 1.2, 1.2, 1.3))


def title(summary: Summary) -> str:
    return f"joulestat summary by {summary.by.title}"


def headline(summary: Summary) -> str:
    total = summary.total
    return (f"{fmt.count(total.jobs)} jobs ({summary.period}) used "
            f"{fmt.energy_wh(total.energy_j)}: {fmt.mass(total.total_co2e_g)} CO2e "
            f"({fmt.mass(total.co2e_g)} operational, {fmt.mass(total.embodied_co2e_g)} "
            f"embodied), cost {fmt.usd(total.cost_usd)}"
            + (f" for the {total.jobs - len(total.unpriced_jobs)} priced"
               if total.unpriced_jobs else "") + ".")


NOTE = ("Each group's figures are its jobs' reports added up (joulestat report JOB gives "
        "each); grouping by instance type or region splits a job by its nodes. CO2e is "
        "location-based (grid averages), embodied apart; costs are list or given prices.")


# -- For programs: CSV one value per cell, JSON ---------------------------------------

CSV_COLUMNS = ("group", "jobs", "energy_j", "energy_kwh", "co2e_kg", "embodied_co2e_kg",
               "total_co2e_kg", "cost_usd", "unpriced_jobs", "jobs_without_co2e")


def _record(row: SummaryRow) -> dict[str, Any]:
    return {"group": row.group, "jobs": row.jobs, "energy_j": row.energy_j,
            "energy_kwh": row.energy_j / 3_600_000, "co2e_kg": row.co2e_g / 1000,
            "embodied_co2e_kg": row.embodied_co2e_g / 1000,
            "total_co2e_kg": row.total_co2e_g / 1000,
            "cost_usd": None if len(row.unpriced_jobs) == row.jobs and row.jobs else
            row.cost_usd, "unpriced_jobs": len(row.unpriced_jobs),
            "jobs_without_co2e": len(row.without_co2e_jobs)}


def render_summary_csv(summary: Summary) -> str:
    """One row per group, then ``total``; one value per cell, full precision, empty for
    unknown; a group text that would start a formula is neutralised."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in (*summary.rows, summary.total):
        record = _record(row)
        writer.writerow([text_cell(record["group"]) if column == "group" else
                         "" if record[column] is None else repr(record[column])
                         if isinstance(record[column], float) else record[column]
                         for column in CSV_COLUMNS])
    return out.getvalue()


def render_summary_json(summary: Summary) -> str:
    document = {"format": "joulestat-summary", "by": summary.by.title,
                "period": summary.period, "generated_at": summary.generated_at,
                "groups": [_record(row) for row in summary.rows],
                "total": _record(summary.total)}
    return json.dumps(document, indent=2, allow_nan=False) + "\n"

