"""The in-process tiers' check (tests/helpers/isolation.py) fails a test that starts a
process or uses the network, even where the code under test swallows the error, and
leaves a test alone that does neither or that is not in an in-process tier. Run as
pytest sessions of their own (pytester, in this process) over tests marked as the
collection hook marks tests/unit/ and the SQLite store runs."""

from __future__ import annotations

import pytest

CONFTEST = """
from tests.helpers.isolation import (  # noqa: F401
    pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown,
)
"""

TESTS = """
import socket
import subprocess

import pytest

in_process = pytest.mark.in_process


@in_process
def test_computes():
    assert sum(range(4)) == 6


@in_process
def test_connects():
    socket.create_connection(("127.0.0.1", 9), timeout=0.1)


@in_process
def test_swallows_a_process_start():
    try:
        subprocess.run(["true"], check=False)
    except Exception:
        pass


@pytest.fixture
def server_socket():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock


@in_process
def test_binds_in_a_fixture(server_socket):
    pass


@in_process
@pytest.mark.postgres
def test_a_postgres_run_may_connect():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))


def test_a_system_test_may_start_a_process():
    assert subprocess.run(["true"]).returncode == 0
"""


def test_the_check_fails_what_starts_a_process_or_opens_a_socket(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    in_process: x\n    postgres: x\n")
    pytester.makepyfile(test_sample=TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    passed, _skipped, failed = result.reprec.listoutcomes()
    failing = {report.nodeid.split("::")[-1] for report in failed}
    assert {report.nodeid.split("::")[-1] for report in passed} == {
        "test_computes", "test_a_postgres_run_may_connect",
        "test_a_system_test_may_start_a_process"}
    assert failing == {"test_connects", "test_swallows_a_process_start",
                       "test_binds_in_a_fixture"}  # the last one in its fixture's setup
    result.stdout.fnmatch_lines(["*started a process (subprocess.Popen*"])
    result.stdout.fnmatch_lines(["*IsolationError*used the network*"])
