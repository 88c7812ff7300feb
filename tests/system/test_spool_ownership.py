"""Issue 47, item 5: a spool directory another user made, holding a job-token key of
theirs, was taken over (chmod'ed 0700, left theirs) and its key used: that user then
computed the token of root's job and ended it. The agent now refuses a spool directory
or key that is not its user's own, or a key others may read or write, and says why."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.agent_process import JOULESTAT, agent_env, free_port, store_at_head

NOBODY = 65534


def _start(tmp_path: Path, spool: Path) -> subprocess.CompletedProcess:
    db_url = store_at_head(tmp_path / "agent.db")
    return subprocess.run(
        [JOULESTAT, "agent", "--db", db_url, "--spool-dir", str(spool), "--nvml", "false",
         "--sysfs-root", str(tmp_path), "--metrics-port", str(free_port()),
         "--api-port", str(free_port())],
        env=agent_env(), capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_a_spool_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    spool = tmp_path / "planted"
    spool.mkdir()
    (spool / "job-token.key").write_bytes(bytes(32))  # the all-zero key of the report
    os.chown(spool / "job-token.key", NOBODY, NOBODY)
    os.chown(spool, NOBODY, NOBODY)
    spool.chmod(0o777)
    done = _start(tmp_path, spool)
    assert done.returncode == 2, done.stderr
    assert str(spool) in done.stderr and f"uid {NOBODY}" in done.stderr, done.stderr
    assert spool.stat().st_uid == NOBODY and spool.stat().st_mode & 0o777 == 0o777  # untouched


def test_a_job_token_key_others_may_read_is_refused(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    key = spool / "job-token.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o666)
    done = _start(tmp_path, spool)
    assert done.returncode == 2, done.stderr
    assert str(key) in done.stderr and "666" in done.stderr, done.stderr
