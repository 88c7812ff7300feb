"""Headless Chromium driven over its DevTools protocol, and ``joulestat dashboard`` served
for it: what the browser tests share.

Streamlit draws its pages in the browser over a websocket after the HTML has loaded,
so a one-shot ``--dump-dom`` or ``--screenshot`` may capture an empty shell. The tests
therefore load a page, poll the rendered text until the expected figures appear, then
take a full-page screenshot. Needs Debian's ``chromium``; without it a test is skipped
with that reason, except in CI (``CI=true``), where a missing browser is a failure.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

VIEWER_TZ = "Asia/Tokyo"  # not the server's zone: proves times follow the browser
WIDTH = 1400


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "headless Chromium not installed (Debian: apt-get install chromium)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


def free_port() -> int:
    """A free port below the kernel's ephemeral range (see
    :func:`tests.helpers.agent_process.free_port`, whose pick it is)."""
    from tests.helpers.agent_process import free_port as pick

    return pick()


def launch(binary: str, profile: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start headless Chromium in the viewer's timezone; (process, page websocket URL)."""
    process = subprocess.Popen(
        [binary, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--hide-scrollbars", "--disable-breakpad",
         "--disable-crash-reporter",
         f"--user-data-dir={profile}", "--remote-debugging-port=0",
         f"--window-size={WIDTH},1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TZ": VIEWER_TZ},
        start_new_session=True)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        if time.monotonic() > deadline or process.poll() is not None:
            stop(process, 5)
            raise RuntimeError("Chromium did not open its DevTools port")
        time.sleep(0.1)
    port = int(port_file.read_text().split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
        targets = json.load(reply)
    return process, next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"]


class Browser:
    """One headless Chromium page, driven over the DevTools protocol."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        request_id = next(self.ids)
        self.socket.send(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression,
                         returnByValue=True)["result"].get("value")

    def open(self, url: str, expected: list[str], timeout_s: float = 60) -> str:
        """Load ``url`` and wait until every expected text is on the page; its text."""
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=1000,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        page = ""
        while time.monotonic() < deadline:
            page = self.evaluate("document.body ? document.body.innerText : ''") or ""
            busy = self.evaluate("!!document.querySelector('[data-testid=stStatusWidget]')")
            if all(t in page for t in expected) and not busy:
                return page
            time.sleep(0.25)
        missing = [t for t in expected if t not in page]
        raise AssertionError(f"{url}: never showed {missing}; page text:\n{page[:3000]}")

    def settle(self, quiet_s: float = 0.4, timeout_s: float = 5.0) -> None:
        """Return once the page has stopped changing: no CSS animation or transition
        running (charts and elements fade in after their data arrives) and the same
        elements, text and height for ``quiet_s``, two painted frames after that; or
        after ``timeout_s`` of a page that never stops (a spinner), as it is then."""
        deadline = time.monotonic() + timeout_s
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            now = self.evaluate(_PAGE_STATE)
            if now != last or not str(now).endswith(",0"):
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
            time.sleep(0.1)
        self.call("Runtime.evaluate", awaitPromise=True, expression=(
            "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"))

    def screenshot(self, path: Path) -> None:
        """A full-page PNG of the page once it has settled (:meth:`settle`)."""
        self.settle()
        height = self.evaluate(
            "Math.max(...[...document.querySelectorAll('*')].map(e => e.scrollHeight))")
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH,
                  height=min(int(height or 1000), 8000), deviceScaleFactor=1, mobile=False)
        self.settle(quiet_s=0.2)  # laid out and drawn again at the new height
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))


# What :meth:`Browser.settle` watches: elements, text, height, canvases and SVGs drawn,
# and (last) how many animations run.
_PAGE_STATE = """(() => {
    const all = [...document.querySelectorAll('*')];
    const running = document.getAnimations().filter(a => a.playState === 'running');
    return [all.length, (document.body ? document.body.innerText : '').length,
            Math.max(0, ...all.map(e => e.scrollHeight)),
            document.querySelectorAll('canvas, svg').length, running.length].join(',');
})()"""


def stop(process: subprocess.Popen, wait_s: float) -> None:
    """Ask ``process`` and everything it started (its own session: Chromium's renderers,
    which outlive their browser for a moment) to stop; kill what has not within
    ``wait_s``, and return once none is left, so nothing outlives the test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(wait_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


@contextlib.contextmanager
def serve(url: str, data_home: Path | None = None, cwd: Path | None = None) -> Iterator[str]:
    """``joulestat dashboard`` on ``url`` and a free port, started in ``cwd`` (default
    this process's); yields its base URL.

    ``data_home`` is its XDG_DATA_HOME, where it announces its URL (dashboard.json); by
    default a temporary one, so no test writes into the developer's own data directory."""
    port = free_port()
    script = Path(sys.executable).with_name("joulestat")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "joulestat"]
    with contextlib.ExitStack() as cleanup:
        if data_home is None:
            data_home = Path(cleanup.enter_context(tempfile.TemporaryDirectory(
                prefix="joulestat-dashboard-", ignore_cleanup_errors=True)))
        env = {**os.environ, "XDG_DATA_HOME": str(data_home)}
        yield from _served(command, url, port, env, cwd)


def _served(command: list[str], url: str, port: int, env: dict[str, str],
            cwd: Path | None = None) -> Iterator[str]:
    process = subprocess.Popen([*command, "dashboard", "--db", url, "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env=env, cwd=cwd)
    base = f"http://127.0.0.1:{port}"
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert f"joulestat dashboard: {base}" in first and "read-only" in first, first
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as reply:
                    if reply.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"dashboard did not start:\n{process.stdout.read()}")
            time.sleep(0.2)
        yield base
    finally:
        stop(process, 15)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """A fresh headless Chromium with one page, closed afterwards."""
    binary = chromium_binary()
    with tempfile.TemporaryDirectory(prefix="joulestat-chromium-",
                                     ignore_cleanup_errors=True) as profile:
        process, page_url = launch(binary, Path(profile))
        try:
            with connect(page_url, max_size=256 * 2**20) as page_socket:
                yield Browser(page_socket)
        finally:
            stop(process, 10)
