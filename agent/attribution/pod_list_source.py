"""Reading one pod list over HTTP: from the API server or the node's kubelet, with the
pod's service-account token and CA, the standard library only
(:mod:`joulestat.attribution.kube_pods` says which list is read, when, and what is made
of it).

A failure of any kind (no token, no CA, refused, a timeout, a 403 and its ``Status``
message, an answer too large or too slow) is one :class:`PodListError` whose message
says why, so the caller can log it once and carry on.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlsplit

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
