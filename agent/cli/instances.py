"""``joulestat instances [PATTERN]``: the instance catalog, as joulestat prices it.

Why a command: a cost in a report is only as good as the hourly price behind it, and
that price comes from ``agent/data/instances.csv`` unless the user gives one. Listing
the catalog (size, accelerators, on-demand and SageMaker prices, each price's own source,
the on-demand date) lets a user check a type before trusting its cost, see whether it is
known at all (an unknown type costs "unknown"), and, with ``--prices FILE``, see which of
their own prices will win over the list price.

PATTERN is a case-insensitive substring (``g5``) or a shell glob (``g5.*``,
``*.xlarge``); a pattern starting with ``ml.`` matches the AWS types SageMaker sells as
``ml.<type>``. Nothing matching is exit status 1, with the closest types named.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from typing import Any

from joulestat.core import jsonout
from joulestat.runtime.settings import add_options, resolve

INSTANCES_OPTIONS = ("config", "prices")
NONE = "-"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "instances",
        help="list the instance catalog: size, accelerators, prices and their sources",
        description="List the instance types joulestat knows (agent/data/instances.csv): "
        "vCPUs, memory, accelerators, on-demand and SageMaker list prices per hour, and "
        "where and when each figure was taken. With --prices FILE, also the price your "
        "file gives each type, which wins over the list price in reports and compare. "
        "Exit status 1 when nothing matches.",
    )
    parser.add_argument("pattern", nargs="?", metavar="PATTERN",
                        help="case-insensitive substring (g5) or shell glob (g5.*, "
                        "*.xlarge); ml.PATTERN lists the types SageMaker sells [default: "
                        "every type]")
    parser.add_argument("--json", action="store_true",
                        help="one JSON array of objects, one per instance type")
    add_options(parser, INSTANCES_OPTIONS)
    parser.set_defaults(func=_run)


def matches(instance_type: str, pattern: str | None) -> bool:
    """Whether ``instance_type`` answers ``pattern``: a glob when it has ``*?[``, else a
    substring; both case-insensitive."""
    if not pattern:
        return True
    name, wanted = instance_type.lower(), pattern.strip().lower()
    if any(ch in wanted for ch in "*?["):
        return fnmatch.fnmatchcase(name, wanted)
    return wanted in name


def select(pattern: str | None) -> list[Any]:
    """Catalog rows (file order) whose type matches ``pattern``. ``ml.`` patterns match
    ``ml.<type>`` of the AWS rows, SageMaker's names for them."""
    from joulestat.carbon.catalog import SAGEMAKER_PREFIX, default_catalog

    specs = list(default_catalog().values())
    if pattern and pattern.strip().lower().startswith(SAGEMAKER_PREFIX):
        return [s for s in specs if s.provider == "aws"
                and matches(SAGEMAKER_PREFIX + s.instance_type, pattern)]
    return [s for s in specs if matches(s.instance_type, pattern)]


def as_record(spec: Any, prices: Any = None) -> dict[str, Any]:
    """One catalog row as JSON; with a prices table, the file's price for the type and
    for its ``ml.`` name (null where the file has no row)."""
    from joulestat.carbon.catalog import SAGEMAKER_PREFIX, sagemaker_note_of

    record = {
        "instance_type": spec.instance_type,
        "provider": spec.provider,
        "accelerator_model": spec.accelerator_model,
        "accelerator_count": spec.accelerator_count,
        "vcpus": spec.vcpus,
        "memory_gib": spec.memory_gib,
        "usd_per_hour": spec.usd_per_hour,
        "sagemaker_usd_per_hour": spec.sagemaker_usd_per_hour,
        "sagemaker_source": spec.sagemaker_source or None,
        "sagemaker_note": sagemaker_note_of(spec) or None,
        "source": spec.source,
        "date": spec.date,
        "price_note": spec.price_note,
    }
    if prices is not None:
        own = prices.get(spec.instance_type)
        ml = prices.get(SAGEMAKER_PREFIX + spec.instance_type) if spec.provider == "aws" else None
        record["prices_file"] = prices.path
        record["prices_file_usd_per_hour"] = own.usd_per_hour if own else None
        record["prices_file_sagemaker_usd_per_hour"] = ml.usd_per_hour if ml else None
    return record


def _usd(value: float | None) -> str:
    return NONE if value is None else f"{value:,.4f}".rstrip("0").rstrip(".")


def _accelerator(record: dict[str, Any]) -> str:
    if not record["accelerator_model"]:
        return NONE
    return f"{record['accelerator_count']} x {record['accelerator_model']}"


def _own(record: dict[str, Any]) -> str:
    parts = []
    if record["prices_file_usd_per_hour"] is not None:
        parts.append(_usd(record["prices_file_usd_per_hour"]))
    if record["prices_file_sagemaker_usd_per_hour"] is not None:
        parts.append(f"ml {_usd(record['prices_file_sagemaker_usd_per_hour'])}")
    return ", ".join(parts) or NONE


def _sagemaker_keys(records: list[dict[str, Any]]) -> dict[str, str]:
    """A short key ([1], [2], ...) per SageMaker source, in order of first use: the sources
    are repository files too long for a table column, so they are listed under it."""
    keys: dict[str, str] = {}
    for r in records:
        if r["sagemaker_source"] and r["sagemaker_source"] not in keys:
            keys[r["sagemaker_source"]] = f"[{len(keys) + 1}]"
    return keys


def render_text(records: list[dict[str, Any]], prices: Any = None) -> str:
    """A table, numbers flush right, then where the prices come from."""
    headers = ["instance type", "provider", "accelerator", "vCPUs", "memory GiB",
               "on-demand USD/h", "SageMaker USD/h", "SM src"]
    if prices is not None:
        headers.append("your USD/h")
    headers += ["on-demand source", "date"]
    keys = _sagemaker_keys(records)
    rows = []
    for r in records:
        row = [r["instance_type"], r["provider"], _accelerator(r), str(r["vcpus"]),
               f"{r['memory_gib']:g}", _usd(r["usd_per_hour"]),
               _usd(r["sagemaker_usd_per_hour"]), keys.get(r["sagemaker_source"] or "", NONE)]
        if prices is not None:
            row.append(_own(r))
        rows.append([*row, r["source"], r["date"]])
    numeric = {3, 4, 5, 6} | ({8} if prices is not None else set())
    widths = [max(len(c) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = ["  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                       for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
             for cells in [headers, *rows]]
    lines += ["", "On-demand: Linux list price in us-east-1 / us-central1 / eastus; SageMaker: "
              "us-east-1 (\"-\": no price known, cost unknown unless you give one; --json "
              "gives each row's sagemaker_note: which use the price is for, or why none)."]
    if keys:
        lines.append("SageMaker price sources (SM src; OWNER/REPO@COMMIT:PATH):")
        lines += [f"  {key} {source}" for source, key in keys.items()]
    if prices is not None:
        lines.append(f"your USD/h: {prices.path} (--prices), which wins over the list "
                     "prices; --price-per-hour would win over both.")
    return "\n".join(lines)


def _strays(prices: Any) -> list[str]:
    """Types the prices file prices that the catalog does not know: a typo prices nothing."""
    from joulestat.carbon.catalog import lookup

    return [row.instance_type for row in prices.rows if lookup(row.instance_type) is None]


def _run(args: argparse.Namespace) -> int:
    from joulestat.carbon.catalog import closest_types

    settings = resolve(args, INSTANCES_OPTIONS)
    prices = settings["prices"]
    records = [as_record(spec, prices) for spec in select(args.pattern)]
    if not records:
        close = closest_types(args.pattern or "")
        hint = f"; closest: {', '.join(close)}" if close else ""
        print(f"joulestat instances: no instance type in the catalog matches "
              f"{args.pattern!r}{hint}", file=sys.stderr)
        if args.json:
            print("[]")
        return 1
    if args.json:
        sys.stdout.write(jsonout.dumps(records, indent=1))
        sys.stdout.write("\n")
    else:
        print(render_text(records, prices))
    if prices is not None:
        strays = _strays(prices)
        if strays:
            print(f"joulestat instances: {prices.path} prices type(s) the catalog does not "
                  f"list: {', '.join(strays)} (fine for your own types; check for typos)",
                  file=sys.stderr)
    return 0
