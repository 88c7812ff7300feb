"""`joulestat run`'s cgroup of its own in the real /sys/fs/cgroup, where this machine lets
a test make one: a command placed in it is counted there, and nothing else is. (The
readers on fake trees: tests/unit/host/test_cgroupfs.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from joulestat.host.cgroup_jobs import place
from joulestat.host.cgroups import CgroupFs

REAL_ROOT = Path("/sys/fs/cgroup")


@pytest.fixture
def real_placement():
    """A job cgroup in the real hierarchy, or a skip saying why this machine has none."""
    placement = place(REAL_ROOT, f"test-{os.getpid()}-{time.monotonic_ns()}")
    if placement.cgroup is None:
        pytest.skip(f"no writable cgroup here: {placement.reason}")
    yield placement
    placement.cgroup.release()


def test_a_command_placed_in_a_real_cgroup_is_counted_there(real_placement) -> None:
    cgroup = real_placement.cgroup
    burn = "import time\nwhile time.process_time() < 0.3: pass"
    child = subprocess.Popen([sys.executable, "-c", burn], preexec_fn=cgroup.enter)
    child.wait()
    counter = CgroupFs(REAL_ROOT).counter(cgroup.ref)
    assert counter is not None
    used_s = counter.read_ns() / 1e9
    counter.close()
    # The child burned 0.3 s by its own precise clock (CLOCK_PROCESS_CPUTIME_ID); the
    # cgroup's cpu.stat may sum tick-sampled cputime, a few percent apart (0.291 s seen
    # on a loaded VM), so the burn is counted when most of it is there. Above: the
    # interpreter's start-up too, but nothing of ours.
    assert 0.25 <= used_s < 2.0
    assert not counter.populated()
