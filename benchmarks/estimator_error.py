"""How far joulestat's power models are from published RAPL measurements: the error each
estimated figure's bounds rest on. One table.

    .venv/bin/python benchmarks/estimator_error.py [--points] [--json]

The models (``ccf-vcpu``, ``tdp-curve``, ``dram-gib``) with the coefficients the agent
uses, against the CPU-package and DRAM power Teads measured with RAPL on five bare-metal
EC2 instances at 0, 10, 50 and 100 % load (agent/data/estimator_validation.csv, which
cites them). Per model: the points it applies to, its mean absolute percentage error,
its error range (model / measured - 1) and the bounds that puts on a figure it gives
(:mod:`joulestat.reports.model_error`; docs/methodology.md, Uncertainty). ``--points``
adds every point. Nothing is timed; the figures change only with a coefficient or the
data.
"""

from __future__ import annotations

import argparse
import json
import sys

from joulestat.devices.power_model import METHOD_CCF_VCPU, METHOD_TDP_CURVE
from joulestat.reports.model_error import DRAM_METHOD, estimator_error, validation_points

METHODS = (METHOD_CCF_VCPU, METHOD_TDP_CURVE, DRAM_METHOD)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", action="store_true", help="every point's error too")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    found = {m: estimator_error(m) for m in METHODS}
    if args.json:
        json.dump({m: None if e is None else {
            "points": len(e.errors), "instances": list(e.instances), "mape": e.mape,
            "error_low": min(e.errors), "error_high": max(e.errors),
            "bounds_low": e.low, "bounds_high": e.high, "errors": list(e.errors)}
            for m, e in found.items()}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'model':<10} {'points':>6} {'MAPE':>7} {'error range':>19} "
          f"{'bounds on its figure':>22}  instances")
    for method, error in found.items():
        if error is None:
            print(f"{method:<10} no published point applies")
            continue
        print(f"{method:<10} {len(error.errors):>6} {error.mape:>7.1%} "
              f"{min(error.errors):>+9.1%} .. {max(error.errors):>+6.1%} "
              f"{error.low:>+10.1%} .. {error.high:>+7.1%}  {', '.join(error.instances)}")
    if args.points:
        print()
        print(f"{'instance':<11} {'load':>5} {'RAPL pkg W':>10} {'ccf-vcpu':>9} "
              f"{'tdp-curve':>9} {'RAPL dram W':>11} {'dram-gib':>9}")
        index = {m: 0 for m in METHODS}
        for point in validation_points():
            cells = []
            for method in METHODS:
                error = found[method]
                applies = error is not None and point.instance in error.instances and (
                    index[method] < len(error.errors))
                cells.append(f"{error.errors[index[method]]:+.0%}" if applies and error
                             else "-")
                index[method] += 1 if applies else 0
            print(f"{point.instance:<11} {point.load:>5.0%} {point.package_w:>10.1f} "
                  f"{cells[0]:>9} {cells[1]:>9} {point.dram_w:>11.1f} {cells[2]:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
