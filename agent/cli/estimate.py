"""``joulestat estimate cpu|dram``: what the estimators say, and why; ``joulestat estimate
request``: the energy of a request of given lengths on a measured serving job.

The agent falls back to these models on nodes without energy counters; this command
lets a user see the exact number and its derivation (method, TDP row or coefficient,
source, formula with the numbers filled in) for this machine or for any CPU they name.
Every fact not given as a flag comes from this machine's procfs, so with no flags the
command answers "what would the agent estimate here?".
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from joulestat.core import jsonout
from joulestat.core.errors import ConfigError
from joulestat.core.tick import Component
from joulestat.devices.cpu_tdp import TdpMatch, lookup_tdp
from joulestat.devices.power_model import (
    BYTES_PER_GB,
    BYTES_PER_GIB,
    CPU_METHODS,
    METHOD_TDP_CURVE,
    Citation,
    CpuPowerModel,
    PowerModels,
    build_cpu_model,
    choose_cpu_method,
    load_power_models,
)
from joulestat.runtime.settings import add_options, resolve


def _bounded(kind: type, low: float, high: float | None = None, unit: str = ""):
    """An argparse ``type`` for a number in [low, high]; argparse prefixes the flag name."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if value < low or (high is not None and value > high):
            bound = f"between {low:g} and {high:g}{unit}" if high is not None else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


def _positive(unit: str):
    """An argparse ``type`` for a finite number greater than zero."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a number of {unit} above 0, got {text}")
        return value

    return parse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "estimate",
        help="show the power estimators' watts and how they were derived",
        description="Show what joulestat's power models estimate and why: the method, the "
        "TDP table row or coefficient used, its source, and the formula with numbers filled "
        "in. Facts not given as flags are read from this machine's procfs.",
    )
    components = parser.add_subparsers(dest="component", metavar="COMPONENT", required=True)

    cpu = components.add_parser(
        Component.CPU,
        help="CPU power at a given load",
        description="Estimated CPU power at --load. Method: tdp-curve (bare metal with the "
        "CPU in CodeCarbon's TDP table: sockets x TDP x Boavizta curve) or ccf-vcpu "
        "(VMs and unknown CPUs: threads x Cloud Carbon Footprint per-vCPU watts).",
    )
    cpu.add_argument("--model", metavar="NAME",
                     help="CPU model name as /proc/cpuinfo prints it "
                     "[default: this machine's]")
    cpu.add_argument("--threads", type=_bounded(int, 1), metavar="N",
                     help="logical CPUs (vCPUs) [default: this machine's]")
    cpu.add_argument("--sockets", type=_bounded(int, 1), metavar="N",
                     help="CPU packages, for tdp-curve [default: this machine's]")
    cpu.add_argument("--load", type=_bounded(float, 0, 100, " %"), required=True,
                     metavar="PCT", help="CPU busy percentage, 0..100")
    cpu.add_argument("--method", choices=CPU_METHODS,
                     help="force a method [default: tdp-curve on bare metal when the TDP is "
                     "known, else ccf-vcpu]")
    cpu.add_argument("--tdp", type=_positive("W"), metavar="W",
                     help="TDP per socket in watts, instead of the table lookup")
    cpu.add_argument("--cloud", choices=sorted(load_power_models().vcpu),
                     help="per-vCPU coefficients of this cloud for ccf-vcpu "
                     "[default: the AWS averages]")
    host = cpu.add_mutually_exclusive_group()
    host.add_argument("--vm", dest="is_vm", action="store_const", const=True,
                      help="treat the host as a virtual machine")
    host.add_argument("--bare-metal", dest="is_vm", action="store_const", const=False,
                      help="treat the host as bare metal "
                      "[default: this machine's cpuinfo hypervisor flag]")
    cpu.add_argument("--json", action="store_true", help="print one JSON object")
    add_options(cpu, ["config", "procfs_root"])
    cpu.set_defaults(func=run_cpu)

    dram = components.add_parser(
        Component.DRAM,
        help="DRAM power for an amount of memory",
        description="Estimated DRAM power: a constant W/GiB (Cloud Carbon Footprint's "
        "0.392 W/GB converted to GiB) times the memory size.",
    )
    dram.add_argument("--gib", type=_positive("GiB"), metavar="G",
                      help="memory in GiB [default: this machine's MemTotal]")
    dram.add_argument("--json", action="store_true", help="print one JSON object")
    add_options(dram, ["config", "procfs_root"])
    dram.set_defaults(func=run_dram)

    request = components.add_parser(
        "request",
        help="energy of one request of given lengths on a recorded serving job",
        description="The energy of a request with --prompt-tokens prompt tokens and "
        "--output-tokens output tokens, from a serving job's energy per prefill (prompt) "
        "token and per decode (output) token: a fit of how the job's energy varied with "
        "its prompt and output token rates tick by tick (docs/llm-serving.md). Bounds are "
        "two standard errors of the fit either side; the answer is an estimate, and says "
        "whether the job's energy it is fitted to was measured or estimated. Fails, saying "
        "why, when the job's rates moved together too closely to tell the two costs apart.",
    )
    request.add_argument("--job", required=True, metavar="ID",
                         help="the serving job: an id, a unique id prefix or a name (its "
                         "latest run)")
    request.add_argument("--prompt-tokens", type=_bounded(float, 0), required=True,
                         metavar="N", help="the request's prompt length in tokens")
    request.add_argument("--output-tokens", type=_bounded(float, 0), required=True,
                         metavar="M", help="the request's output length in tokens")
    request.add_argument("--json", action="store_true", help="print one JSON object")
    add_options(request, ["config", "db", "log_level"])
    request.set_defaults(func=run_request)


def _procfs_root(args: argparse.Namespace) -> Path:
    return resolve(args, ["config", "procfs_root"])["procfs_root"]


def _machine(what: str, read, root: Path) -> Any:
    try:
        return read(root)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read this machine's {what} from {root} ({exc}); "
                          f"give it as a flag") from None


def _citation(c: Citation) -> dict[str, str]:
    return {"source": c.source, "url": c.url, "date": c.date, "retrieved": c.retrieved}


def run_cpu(args: argparse.Namespace) -> int:
    from joulestat.host import procfs

    root = _procfs_root(args)
    models = load_power_models()
    cpu_name = args.model or _machine("CPU model", procfs.read_cpu_model, root)
    threads = args.threads or _machine("thread count",
                                       lambda r: procfs.read_cpu_times(r).threads, root)
    sockets = args.sockets or _machine("socket count", procfs.read_cpu_sockets, root)
    is_vm = args.is_vm if args.is_vm is not None else _machine(
        "hypervisor flag", procfs.is_virtual_machine, root)

    table = None if args.tdp else lookup_tdp(cpu_name)
    tdp_w = args.tdp or (table.tdp_w if table else None)
    if args.method:
        method, reason = args.method, "forced with --method"
        if method == METHOD_TDP_CURVE and tdp_w is None:
            raise ConfigError(f"--method {METHOD_TDP_CURVE}: no TDP known for {cpu_name!r} "
                              f"(not in CodeCarbon's table); pass --tdp W")
    else:
        method, reason = choose_cpu_method(is_vm, tdp_w)

    load = args.load / 100.0
    model = build_cpu_model(method, threads, tdp_w, sockets=sockets, cloud=args.cloud,
                            models=models)
    report = _cpu_report(args, model, models, cpu_name, is_vm, table, reason, load)
    if args.json:
        print(jsonout.dumps(report, indent=2))
    else:
        print(_cpu_text(report))
    return 0


def _cpu_report(args: argparse.Namespace, model: CpuPowerModel, models: PowerModels,
                cpu_name: str, is_vm: bool, table: TdpMatch | None, reason: str,
                load: float) -> dict[str, Any]:
    def origin(flag_value: Any, flag: str) -> str:
        return flag if flag_value is not None else "this machine"

    if model.method == METHOD_TDP_CURVE:
        c = models.tdp_curve
        coefficients = {"a": c.a, "k": c.k, "d": c.d, "tdp_ratio": c.ratio(load),
                        "points": {"loads": list(c.loads), "tdp_ratios": list(c.tdp_ratios)}}
        citations = [_citation(c.points_citation), _citation(c.fit_citation)]
    else:
        v = model.vcpu
        coefficients = {"cloud": v.cloud, "min_w_per_vcpu": v.min_w, "max_w_per_vcpu": v.max_w}
        citations = [_citation(v.citation)]
    tdp: dict[str, Any] | None = None
    if args.tdp:
        tdp = {"tdp_w": args.tdp, "from": "--tdp", "used": model.method == METHOD_TDP_CURVE}
    elif table is not None:
        tdp = {"tdp_w": table.tdp_w, "from": "codecarbon cpu_power.csv",
               "matched_name": table.matched_name, "exact": table.exact,
               "used": model.method == METHOD_TDP_CURVE}
    return {
        "component": Component.CPU,
        "watts": model.power_w(load),
        "idle_watts": model.idle_power_w,
        "method": model.method,
        "source": model.source,
        "reason": reason,
        "formula": model.formula(load),
        "inputs": {
            "model": cpu_name, "model_from": origin(args.model, "--model"),
            "threads": model.threads, "threads_from": origin(args.threads, "--threads"),
            "sockets": model.sockets, "sockets_from": origin(args.sockets, "--sockets"),
            "load_pct": args.load,
            "is_vm": is_vm, "is_vm_from": origin(args.is_vm, "--vm/--bare-metal"),
            "cloud": args.cloud,
        },
        "tdp": tdp,
        "coefficients": coefficients,
        "citations": citations,
    }


def _cpu_text(r: dict[str, Any]) -> str:
    i = r["inputs"]
    host = "virtual machine" if i["is_vm"] else "bare metal"
    if r["tdp"] is None:
        tdp_line = f"none: {i['model']!r} is not in CodeCarbon's cpu_power.csv"
    elif r["tdp"]["from"] == "--tdp":
        tdp_line = f"{r['tdp']['tdp_w']:g} W per socket (from --tdp)"
    else:
        kind = "exact" if r["tdp"]["exact"] else "normalised"
        tdp_line = (f"{r['tdp']['tdp_w']:g} W per socket, {kind} match of row "
                    f"{r['tdp']['matched_name']!r} in CodeCarbon's cpu_power.csv")
    if r["tdp"] is not None and not r["tdp"]["used"]:
        tdp_line += " (not used by this method)"
    c = r["coefficients"]
    if r["method"] == METHOD_TDP_CURVE:
        coeff_line = (f"TDP ratio = {c['a']:g} x ln(1 + {c['k']:g} x load) + {c['d']:g}, fitted "
                      f"to {c['points']['tdp_ratios']} x TDP at loads {c['points']['loads']}")
    else:
        cloud = c["cloud"] if i["cloud"] else f"{c['cloud']} (default)"
        coeff_line = (f"{cloud}: {c['min_w_per_vcpu']:g} W per vCPU idle, "
                      f"{c['max_w_per_vcpu']:g} W per vCPU at 100 %")
    lines = [
        f"CPU estimate: {r['watts']:.2f} W at {i['load_pct']:g} % load",
        f"  CPU model     {i['model']} (from {i['model_from']})",
        f"  threads       {i['threads']} (from {i['threads_from']}); "
        f"sockets {i['sockets']} (from {i['sockets_from']})",
        f"  host          {host} (from {i['is_vm_from']})",
        f"  TDP           {tdp_line}",
        f"  method        {r['method']} ({r['source']}): {r['reason']}",
        f"  coefficients  {coeff_line}",
        f"  formula       {r['formula']}",
        f"  idle (0 %)    {r['idle_watts']:.2f} W",
    ]
    for cite in r["citations"]:
        lines.append(f"  source        {cite['source']} ({cite['date']}) {cite['url']}")
    return "\n".join(lines)


def run_dram(args: argparse.Namespace) -> int:
    from joulestat.host import procfs

    models = load_power_models()
    if args.gib:
        gib, gib_from = args.gib, "--gib"
    else:
        root = _procfs_root(args)
        gib = _machine("MemTotal", procfs.read_mem_total_bytes, root) / BYTES_PER_GIB
        gib_from = "this machine's MemTotal"
    dram = models.dram
    watts = dram.w_per_gib * gib
    formula = (f"{gib:g} GiB x {dram.w_per_gib:.4f} W/GiB "
               f"(= {dram.w_per_gb:g} W/GB x {BYTES_PER_GIB / BYTES_PER_GB:.9g} GB/GiB) "
               f"= {watts:.2f} W")
    report = {
        "component": Component.DRAM,
        "watts": watts,
        "idle_watts": watts,
        "method": "dram-gib",
        "source": "model:dram-gib",
        "formula": formula,
        "inputs": {"gib": gib, "gib_from": gib_from},
        "coefficients": {"w_per_gb": dram.w_per_gb, "w_per_gib": dram.w_per_gib},
        "citations": [_citation(dram.citation)],
    }
    if args.json:
        print(jsonout.dumps(report, indent=2))
        return 0
    cite = dram.citation
    print("\n".join([
        f"DRAM estimate: {watts:.2f} W for {gib:g} GiB (from {gib_from})",
        "  method        dram-gib (model:dram-gib): constant power per installed GiB; "
        "no load term, so all of it counts as idle power",
        f"  formula       {formula}",
        f"  source        {cite.source} ({cite.date}) {cite.url}",
    ]))
    return 0


def run_request(args: argparse.Namespace) -> int:
    from joulestat.reports.serving_figures import job_analysis
    from joulestat.reports.steady_state import estimate_request_j
    from joulestat.store.access import open_reader_engine
    from joulestat.store.job_refs import JobRefError, resolve_job

    settings = resolve(args, ["config", "db", "log_level"])
    engine = open_reader_engine(settings["db"])
    try:
        found = resolve_job(engine, args.job)
    except JobRefError as exc:
        raise ConfigError(str(exc)) from None
    job = found.latest
    analysis = job_analysis(engine, job.id)
    if analysis is None:
        raise ConfigError(f"--job {args.job}: job {job.id} has no serving trace (a job "
                          "measured with --serving-metrics has one)")
    split = analysis.split
    try:
        estimate = estimate_request_j(split, args.prompt_tokens, args.output_tokens)
    except ValueError as exc:
        raise ConfigError(f"--job {args.job}: {exc}") from None
    energy_class = _energy_class(engine, job.id)
    answer = {
        "job_id": job.id, "energy_class": energy_class, "prompt_tokens": args.prompt_tokens,
        "output_tokens": args.output_tokens, "energy_j": estimate.energy_j,
        "low_j": estimate.low_j, "high_j": estimate.high_j,
        "j_per_prefill_token": split.j_per_prefill_token,
        "j_per_prefill_token_se": split.j_per_prefill_token_se,
        "j_per_decode_token": split.j_per_decode_token,
        "j_per_decode_token_se": split.j_per_decode_token_se,
    }
    if args.json:
        print(jsonout.dumps(answer))
        return 0
    from joulestat.core import units as fmt

    print(f"a request of {fmt.count(args.prompt_tokens)} prompt and "
          f"{fmt.count(args.output_tokens)} output tokens on job {job.id}: "
          f"{fmt.energy(estimate.energy_j)} "
          f"({fmt.energy_range(estimate.low_j, estimate.high_j)})")
    print(f"  = {fmt.count(args.prompt_tokens)} x {fmt.energy(split.j_per_prefill_token)} "
          f"per prefill token + {fmt.count(args.output_tokens)} x "
          f"{fmt.energy(split.j_per_decode_token)} per decode token")
    print(f"  an estimate from a fit to the job's energy, which is {energy_class}")
    return 0


def _energy_class(engine: Any, job_id: str) -> str:
    """The job's energy class (measured, estimated...) as ``compare`` classes a row's:
    the sources of the nodes it ran on (:func:`joulestat.reports.sources.sources_class`)."""
    from joulestat.reports.compare.figures import sources_of
    from joulestat.reports.sources import sources_class
    from joulestat.store.jobs import JobFilter, job_totals
    from joulestat.store.provenance import node_sources

    [totals] = job_totals(engine, JobFilter(job_ids=(job_id,)))
    return sources_class(sources_of(totals, node_sources(engine, [n for n, _ in totals.nodes])))
