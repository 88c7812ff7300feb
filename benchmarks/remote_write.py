"""The metrics side past one cluster: Prometheus remote-write of the agents' series.

docs/store.md sends a fleet's series through each cluster's Prometheus, remote-writing to
a long-term store (Thanos, Grafana Mimir, VictoriaMetrics). None of those is installed
here, so a second Prometheus with its remote-write receiver on
(``--web.enable-remote-write-receiver``, the same protocol those stores accept) stands in
for it. Runs a real ``joulestat agent`` (its own SQLite store, an API port and a metrics
port of its own), a scraping Prometheus that remote-writes, and the receiver; prints how
long the node's energy series took to reach the receiver and which joulestat series it
holds, then asks the receiver one of the dashboards' queries.

    .venv/bin/python benchmarks/remote_write.py

Needs the ``prometheus`` binary on PATH. Prints what it found; asserts nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.sidecars import JOULESTAT, agent_env, free_port  # noqa: E402

QUERY = "sum by (component) (rate(joulestat_node_energy_joules_total[1m]))"


def query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)["data"]["result"]


def wait_ready(port: int, deadline_s: float) -> None:
    while time.monotonic() < deadline_s:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"prometheus on {port} not ready")


def main() -> int:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("no prometheus binary on PATH")
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="joulestat-rw-"))
    metrics_port, api_port, scraper_port, receiver_port = (free_port() for _ in range(4))
    (tmp / "scraper.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: joulestat\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
        "remote_write:\n"
        f"  - url: http://127.0.0.1:{receiver_port}/api/v1/write\n"
        "    queue_config: {batch_send_deadline: 1s}\n")
    (tmp / "receiver.yml").write_text("global: {scrape_interval: 1m}\n")
    processes = []
    try:
        processes.append(subprocess.Popen(
            [str(JOULESTAT), "agent", "--db", f"sqlite:///{tmp / 'store.db'}",
             "--metrics-port", str(metrics_port), "--api-port", str(api_port),
             "--interval", "1"], env=agent_env(), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
        for name, port, extra in (("receiver", receiver_port,
                                   ["--web.enable-remote-write-receiver"]),
                                  ("scraper", scraper_port, [])):
            processes.append(subprocess.Popen(
                [prometheus, f"--config.file={tmp / (name + '.yml')}",
                 f"--storage.tsdb.path={tmp / name}",
                 f"--web.listen-address=127.0.0.1:{port}", *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        began = time.monotonic()
        deadline = began + 90
        for port in (receiver_port, scraper_port):
            wait_ready(port, deadline)
        found: list[dict] = []
        while time.monotonic() < deadline and not found:
            found = query(receiver_port, "joulestat_node_energy_joules_total")
            if not found:
                time.sleep(0.5)
        if not found:
            print("no joulestat series reached the receiver within 90 s")
            return 1
        components = sorted(s["metric"].get("component", "?") for s in found)
        print(f"joulestat_node_energy_joules_total reached the receiver "
              f"{time.monotonic() - began:.1f} s after the Prometheus servers started: "
              f"{len(found)} series ({', '.join(components)})")
        names = query(receiver_port, 'count by (__name__) ({__name__=~"joulestat_.+"})')
        print(f"joulestat metric names in the receiver: {len(names)}")
        time.sleep(65)  # a minute of samples for rate()
        rates = query(receiver_port, QUERY)
        print(f"{QUERY} on the receiver: "
              + ", ".join(f"{r['metric'].get('component')} {float(r['value'][1]):.2f} W"
                          for r in rates))
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
