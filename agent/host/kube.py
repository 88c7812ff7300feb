"""Kubernetes pods by UID: their namespace, name and labels, from a pod list read over
HTTP with the standard library only.

A pod's cgroup path names it by UID only (:mod:`joulestat.host.cgroups`), so discovery
alone calls it ``pod-<uid8>``. This module maps a UID to the pod's namespace, name and
labels by reading one pod list:

- ``apiserver`` (what ``auto`` uses): ``GET https://$KUBERNETES_SERVICE_HOST:
  $KUBERNETES_SERVICE_PORT/api/v1/pods?fieldSelector=spec.nodeName=<node>
  &resourceVersion=0`` with the pod's service-account token, verified against its CA.
  It needs RBAC ``list`` on ``pods`` and nothing else. The field selector keeps the
  answer to this node's pods, ``resourceVersion=0`` lets the API server answer from its
  watch cache rather than etcd, and the ``Accept`` header asks for
  ``PartialObjectMetadataList``: metadata only, not every pod's spec and status (a
  server that does not know it answers a plain ``PodList``, read the same way).
- ``kubelet``: the node's kubelet, ``GET https://<node>:10250/pods`` with the same token
  and CA (the kubelet authorizes it as ``nodes/proxy``, which also allows exec into
  every pod of the node, so the shipped RBAC does not grant it; and the kubelet's
  serving certificate must be signed by the cluster CA), then the legacy read-only
  ``http://<node>:10255/pods`` where a cluster still enables it.

Cost: the list is read when discovery meets a pod it has not named yet, never per tick
and never for pods already named, and at most once per ``min_refresh_s`` (5 s, the
agent's discovery interval: at most one list per discovery pass). The interval is not
longer because a job's name is fixed when it is first registered (the registry refuses
another name under the same id): a pod seen while a list may not be read yet waits for
the next pass rather than keep ``pod-<uid8>`` for good. A pod list that cannot be read
(no token, no CA, refused, a 1 s timeout, a 403 and its ``Status`` message, an answer
too large or too slow, bad JSON) is one :class:`PodListError` whose message says why: it
is logged once, with the reason, and tried again no sooner than ``retry_after_s``
(30 s); meanwhile new pods keep today's ``pod-<uid8>`` name. Nothing here ever raises
into discovery.

Static pods run under the UID the kubelet hashed from their manifest; the API server
lists their mirror pods under another UID, with that hash in the
``kubernetes.io/config.mirror`` annotation, so both UIDs are indexed.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from joulestat.core.validation import LABEL_KEY_RE, MAX_LABELS
from joulestat.host.pod_names import MODES, PodNames

log = logging.getLogger(__name__)

__all__ = ["MODES", "PodDirectory", "PodInfo", "PodListError", "PodListSource", "PodNames",
           "SERVICE_ACCOUNT_DIR", "apiserver_source", "job_labels", "kubelet_sources",
           "parse_pod_list", "pod_directory", "pods_for"]


# -- Reading one pod list over HTTP ----------------------------------------------------

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
KUBELET_PORT = 10250
KUBELET_READ_ONLY_PORT = 10255
MAX_POD_LIST_BYTES = 64 * 1024**2
# Metadata only where the server knows it (1.15+), else a whole PodList: client-go's
# metadata client asks the same way.
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


class PodListError(Exception):
    """A pod list could not be read; the message says why, for the log."""


class PodListSource:
    """One endpoint that answers a pod list: a URL, and whether to send the token.

    ``sa_dir`` holds ``token`` (re-read at every request: projected tokens rotate) and
    ``ca.crt`` (the CA an https endpoint is verified against). The token goes only over
    https, or over http to a loopback address (tests); never to a plain-http kubelet.
    """

    def __init__(self, url: str, description: str, sa_dir: Path | None,
                 accept: str = "application/json", timeout_s: float = 1.0) -> None:
        self.url = url
        self.description = description
        self.sa_dir = sa_dir
        self.accept = accept
        self.timeout_s = timeout_s

    def fetch(self) -> bytes:
        """The list's body; raises :class:`PodListError` saying why not."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        headers = {"Accept": self.accept, "User-Agent": "joulestat-agent"}
        if self.sa_dir is not None and (parts.scheme == "https" or _loopback(host)):
            token = _read_text(self.sa_dir / "token", "service-account token")
            headers["Authorization"] = f"Bearer {token}"
        if parts.scheme == "https":
            ca = self.sa_dir / "ca.crt" if self.sa_dir is not None else None
            if ca is None or not ca.is_file():
                raise PodListError(f"no CA certificate at {ca}")
            try:
                context = ssl.create_default_context(cafile=str(ca))
            except (OSError, ssl.SSLError) as exc:
                raise PodListError(f"cannot load the CA certificate {ca}: {exc}") from None
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, parts.port or 443, timeout=self.timeout_s, context=context)
        else:
            conn = http.client.HTTPConnection(host, parts.port or 80, timeout=self.timeout_s)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        deadline = time.monotonic() + 2 * self.timeout_s
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
            body = _read_body(response, deadline)
        except (OSError, http.client.HTTPException) as exc:
            raise PodListError(_reason(exc, self.timeout_s)) from None
        finally:
            conn.close()
        if response.status != 200:
            raise PodListError(f"HTTP {response.status} {response.reason}{_status_message(body)}")
        return body


def apiserver_source(node: str, env: Mapping[str, str], sa_dir: Path = SERVICE_ACCOUNT_DIR,
                     base_url: str | None = None, timeout_s: float = 1.0) -> PodListSource:
    """This node's pods from the API server (``base_url`` replaces
    ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, e.g. in tests)."""
    if base_url is None:
        host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
        if not host:
            raise PodListError("KUBERNETES_SERVICE_HOST is not set")
        port = env.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
        base_url = f"https://{_url_host(host)}:{port}"
    selector = quote(f"spec.nodeName={node}", safe="")
    url = f"{base_url.rstrip('/')}/api/v1/pods?fieldSelector={selector}&resourceVersion=0"
    return PodListSource(url, f"the API server ({base_url}, node {node})", sa_dir,
                         accept=f"{_METADATA_ONLY},application/json", timeout_s=timeout_s)


def kubelet_sources(node: str, sa_dir: Path = SERVICE_ACCOUNT_DIR,
                    base_url: str | None = None,
                    timeout_s: float = 1.0) -> list[PodListSource]:
    """The node's kubelet: its authenticated port, then its legacy read-only one
    (``base_url`` replaces both, e.g. in tests)."""
    if base_url is not None:
        return [PodListSource(f"{base_url.rstrip('/')}/pods", f"the kubelet ({base_url})",
                              sa_dir, timeout_s=timeout_s)]
    host = _url_host(node)
    return [
        PodListSource(f"https://{host}:{KUBELET_PORT}/pods",
                      f"the kubelet (https://{host}:{KUBELET_PORT})", sa_dir,
                      timeout_s=timeout_s),
        PodListSource(f"http://{host}:{KUBELET_READ_ONLY_PORT}/pods",
                      f"the kubelet's read-only port (http://{host}:{KUBELET_READ_ONLY_PORT})",
                      None, timeout_s=timeout_s),
    ]


def _read_text(path: Path, what: str) -> str:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise PodListError(f"no {what} at {path}") from None
    except OSError as exc:
        raise PodListError(f"cannot read the {what} {path}: {exc.strerror}") from None
    if not text:
        raise PodListError(f"the {what} {path} is empty")
    return text


def _read_body(response: http.client.HTTPResponse, deadline: float) -> bytes:
    """The whole body, within ``deadline`` and :data:`MAX_POD_LIST_BYTES`."""
    chunks, size = [], 0
    while chunk := response.read(65536):
        size += len(chunk)
        if size > MAX_POD_LIST_BYTES:
            raise PodListError(f"answer over {MAX_POD_LIST_BYTES // 1024**2} MiB")
        if time.monotonic() > deadline:
            raise PodListError("answer too slow")
        chunks.append(chunk)
    return b"".join(chunks)


def _status_message(body: bytes) -> str:
    """``: <message>`` of a Kubernetes ``Status`` answer (why a 403 was refused)."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return ""
    if not isinstance(message, str) or not message:
        return ""
    return ": " + "".join(ch for ch in message[:300] if ch.isprintable())


def _reason(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: {exc.verify_message or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# -- Kubernetes pods by UID: their namespace, name and labels, from a pod list ---------


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_LABEL_PREFIX = "label_"
_NOT_A_KEY_CHAR = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod as the pod list names it."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def job_name(self) -> str:
        """``namespace/pod``, as ``kubectl`` writes a pod."""
        return f"{self.namespace}/{self.name}"


def parse_pod_list(data: bytes) -> dict[str, PodInfo]:
    """UID -> pod for every item of a ``PodList`` or ``PartialObjectMetadataList``
    (``items[].metadata.{uid,namespace,name,labels}``); a static pod's mirror is found
    under its ``kubernetes.io/config.mirror`` hash too. Raises ``ValueError`` for an
    answer that is no such list; items without a uid, namespace or name are skipped."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"not a pod list (kind {kind!r}, no items)")
    pods: dict[str, PodInfo] = {}
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue
        uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
        if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)
                and uid and namespace and name):
            continue
        raw_labels = meta.get("labels")
        labels = ({str(k): str(v) for k, v in raw_labels.items()}
                  if isinstance(raw_labels, dict) else {})
        pod = PodInfo(uid.lower(), namespace, name, labels)
        pods[pod.uid] = pod
        annotations = meta.get("annotations")
        mirror = annotations.get(MIRROR_ANNOTATION) if isinstance(annotations, dict) else None
        if isinstance(mirror, str) and mirror:
            pods.setdefault(mirror.lower(), pod)
    return pods


def job_labels(pod: PodInfo, room: int = MAX_LABELS) -> dict[str, str]:
    """The job labels a pod adds: ``namespace``, ``pod`` and each pod label as
    ``label_<key>``, at most ``room`` of them.

    ``label_<key>`` with every character but letters, digits and ``_`` made ``_`` is
    how kube-state-metrics exports pod labels (``kube_pod_labels{label_app_kubernetes_io_
    name=...}``), so a report's labels read like the Prometheus series they are joined
    with, and the keys pass the registry's rule (``[A-Za-z_][A-Za-z0-9_]{0,63}``), which
    ``app.kubernetes.io/name`` itself would not. A key still too long, a second key that
    sanitizes to the same name (the first in sorted order wins), a value over 256
    characters and labels past ``room`` are dropped, each with a debug line: a pod's
    labels never stop its job from being registered.
    """
    found: dict[str, str] = {}
    for key, value in (("namespace", pod.namespace), ("pod", pod.name)):
        if len(found) < room:
            found[key] = value
    for key, value in sorted(pod.labels.items()):
        job_key = _LABEL_PREFIX + _NOT_A_KEY_CHAR.sub("_", key)
        if len(found) >= room:
            log.debug("pod %s: label %s dropped: the job already has %d labels",
                      pod.job_name, key, MAX_LABELS)
        elif not LABEL_KEY_RE.match(job_key):
            log.debug("pod %s: label %s dropped: %s is not a valid job label key",
                      pod.job_name, key, job_key)
        elif job_key in found:
            log.debug("pod %s: label %s dropped: %s is already another label's",
                      pod.job_name, key, job_key)
        elif len(value) > 256 or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            log.debug("pod %s: label %s dropped: value too long or not printable",
                      pod.job_name, key)
        else:
            found[job_key] = value
    return found


class PodDirectory:
    """Pod UID -> :class:`PodInfo`, from the last pod list read, read again only when a
    pod it does not know is asked for (see the module's docstring for the bounds)."""

    def __init__(self, sources: Sequence[PodListSource], *, min_refresh_s: float = 5.0,
                 retry_after_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not sources:
            raise ValueError("a pod directory needs at least one source")
        self.sources = list(sources)
        self.min_refresh_s = min_refresh_s
        self.retry_after_s = retry_after_s
        self._clock = clock
        self._pods: dict[str, PodInfo] = {}
        self._next_refresh = float("-inf")
        self._failing: str | None = None  # the reason, while the last read failed
        self._answered = False
        self.refreshes = 0  # pod lists asked for, for tests and the curious

    def lookup(self, uids: Iterable[str]) -> tuple[dict[str, PodInfo], set[str]]:
        """``(known, pending)`` for ``uids``: the pods named, and those to ask about
        again at the next pass (not in the list held, and a new list may not be read
        yet). Any other uid is not to be named: it keeps ``pod-<uid8>``.

        Reads a new list (once, for all of ``uids``) when one is not known and
        ``min_refresh_s`` have passed since the last read (``retry_after_s`` after a
        failed one)."""
        wanted = {uid.lower() for uid in uids}
        unknown = {uid for uid in wanted if uid not in self._pods}
        pending: set[str] = set()
        if unknown:
            if self._clock() >= self._next_refresh:
                self._refresh()
            elif self._failing is None:
                pending = unknown
        return {uid: self._pods[uid] for uid in wanted if uid in self._pods}, pending

    def _refresh(self) -> None:
        self.refreshes += 1
        reasons = []
        for source in self.sources:
            try:
                pods = parse_pod_list(source.fetch())
            except Exception as exc:  # noqa: BLE001 (best effort: never break discovery)
                reasons.append(f"{source.description}: {exc}")
                continue
            self._pods = pods
            self._next_refresh = self._clock() + self.min_refresh_s
            self._succeeded(source, pods)
            return
        self._next_refresh = self._clock() + self.retry_after_s
        reason = "; ".join(reasons)
        if self._failing is None:
            log.warning("cannot read the pod list (%s): new pods keep their pod-<uid8> names; "
                        "trying again in %g s at the earliest", reason, self.retry_after_s)
        else:
            log.debug("pod list still unreadable: %s", reason)
        self._failing = reason

    def _succeeded(self, source: PodListSource, pods: dict[str, PodInfo]) -> None:
        count = len({pod.uid for pod in pods.values()})
        if self._failing is not None:
            log.info("pod list read again from %s (%d pods): new pods are named after "
                     "the pod", source.description, count)
        elif not self._answered:
            log.info("pods named after the pod (namespace and name) from %s (%d pods)",
                     source.description, count)
        if not pods and (self._failing is not None or not self._answered):
            log.warning("%s lists no pod for this node: is --node the node's Kubernetes "
                        "name (the DaemonSet sets JOULESTAT_NODE from spec.nodeName)?",
                        source.description)
        self._failing = None
        self._answered = True


def pod_directory(mode: str, node: str, *, env: Mapping[str, str] | None = None,
                  sa_dir: Path = SERVICE_ACCOUNT_DIR, base_url: str | None = None,
                  **kwargs: Any) -> PodDirectory | None:
    """The directory ``mode`` (one of :data:`MODES`) asks for, or None (pods keep
    ``pod-<uid8>``), saying why at info level. ``auto`` is ``apiserver`` when this
    process runs in a pod: a service-account token in ``sa_dir`` and
    ``KUBERNETES_SERVICE_HOST`` set. ``kwargs`` go to :class:`PodDirectory`."""
    env = os.environ if env is None else env
    if mode not in MODES:
        raise ValueError(f"unknown pod naming mode {mode!r}; valid: {', '.join(MODES)}")
    if mode == PodNames.OFF:
        log.info("pods keep their pod-<uid8> names (--kube-pods off)")
        return None
    if mode == PodNames.AUTO:
        if base_url is None and not (sa_dir / "token").is_file():
            log.info("pods keep their pod-<uid8> names: not in a Kubernetes pod (no "
                     "service-account token at %s); --kube-pods apiserver or kubelet to "
                     "ask anyway", sa_dir / "token")
            return None
        if base_url is None and not env.get("KUBERNETES_SERVICE_HOST", "").strip():
            log.info("pods keep their pod-<uid8> names: not in a Kubernetes pod "
                     "(KUBERNETES_SERVICE_HOST is not set)")
            return None
        mode = PodNames.APISERVER
    if mode == PodNames.KUBELET:
        return PodDirectory(kubelet_sources(node, sa_dir, base_url), **kwargs)
    try:
        return PodDirectory([apiserver_source(node, env, sa_dir, base_url)], **kwargs)
    except PodListError as exc:
        log.warning("pods keep their pod-<uid8> names: cannot ask the API server: %s", exc)
        return None


class PodSettings(Protocol):
    """What :func:`pods_for` reads of the attribution settings (``--discover``,
    ``--kube-pods``): a protocol, so this module needs nothing of accounting's."""

    @property
    def discover(self) -> Collection[str]: ...

    @property
    def kube_pods(self) -> PodNames: ...


def pods_for(settings: PodSettings, node: str, *,
             env: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR
             ) -> PodDirectory | None:
    """The pod directory ``--kube-pods`` asks for on ``node``, or None when
    ``--discover`` does not include ``k8s``."""
    if "k8s" not in settings.discover:
        return None
    return pod_directory(settings.kube_pods, node, env=env, sa_dir=sa_dir)
