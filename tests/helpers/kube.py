"""A fake Kubernetes pod list (API server or kubelet) and a node as discovery sees it,
for the tests of agent/host/kube.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from joulestat.attribution.discovered import sync_registry
from joulestat.attribution.registry import JobRegistry
from joulestat.host.kube import PodDirectory, pod_directory
from tests.fakes.discovery_proc import add_proc

ROOT = Path(__file__).resolve().parents[2]
UID = "8a1f4c2e-5b3d-4e6f-9a7b-1c2d3e4f5a6b"
UID2 = "0c9b8a7d-1111-4222-8333-444455556666"
UID3 = "7e6d5c4b-aaaa-4bbb-8ccc-ddddeeeeffff"
STATIC = "3d2c1b0a99887766554433221100ffee"  # a static pod's hashed UID
CID = "c" * 64
KINDS = frozenset({"k8s"})
LOG = "joulestat.host.kube"


def pod_item(uid: str, namespace: str, name: str, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "namespace": namespace, "name": name}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"nodeName": "node-1"}}


def pod_list(*items: dict[str, Any], kind: str = "PodList") -> bytes:
    return json.dumps({"kind": kind, "apiVersion": "v1", "items": list(items)}).encode()


WEB = pod_item(UID, "default", "web-7d9c",
               {"app.kubernetes.io/name": "web", "team": "search", "pod-template-hash": "7d9c"})
WORKER = pod_item(UID2, "ml", "trainer-0", {"app": "trainer"})


class FakeKube:
    """A pod-list endpoint: what it answers, and every request it was sent."""

    def __init__(self) -> None:
        self.status = 200
        self.body = pod_list(WEB)
        self.delay_s = 0.0  # how long a request is held, unless close() lets it go
        self._release = threading.Event()
        self.requests: list[tuple[str, dict[str, str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                fake.requests.append((self.path, dict(self.headers.items())))
                fake._release.wait(fake.delay_s)
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(fake.body)))
                self.end_headers()
                self.wfile.write(fake.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self._release.set()  # a held request answers now: no thread outlives the test
        self.server.shutdown()
        self.server.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod_proc(proc: Path, pid: int, uid: str, qos: str = "burstable") -> None:
    """A process in pod ``uid``'s container (systemd cgroup driver)."""
    slice_ = f"kubepods-{qos}-pod{uid.replace('-', '_')}.slice"
    add_proc(proc, pid, f"0::/kubepods.slice/kubepods-{qos}.slice/{slice_}/"
                        f"cri-containerd-{CID}.scope\n")


def service_account(folder: Path) -> Path:
    """A service account as Kubernetes mounts it, written to ``folder`` (the ``sa_dir``
    fixtures of tests/unit/attribution/ and tests/system/)."""
    folder.mkdir()
    (folder / "token").write_text("fake-token-123\n")
    (folder / "ca.crt").write_text("not read over http\n")
    (folder / "namespace").write_text("joulestat")
    return folder


def directory(kube: FakeKube, sa_dir: Path, clock: Clock, **kwargs: Any) -> PodDirectory:
    found = pod_directory("apiserver", "node-1", sa_dir=sa_dir, base_url=kube.url,
                          clock=clock, **kwargs)
    assert found is not None
    return found


class PodNode:
    """A node as discovery sees it: a /proc with pod processes, a job registry, and a
    pod directory on the apiserver (``kube``) that reads the time from ``clock``."""

    def __init__(self, proc: Path, pods: PodDirectory, clock: Clock) -> None:
        self.proc, self.pods, self.clock = proc, pods, clock
        self.registry = JobRegistry()

    def add_pod(self, pid: int, uid: str) -> None:
        pod_proc(self.proc, pid, uid)

    def sync(self) -> None:
        sync_registry(self.registry, self.proc, KINDS, pods=self.pods)
