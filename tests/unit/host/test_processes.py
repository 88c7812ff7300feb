"""ProcessTable on a kernel without ``/proc/<pid>/task/<tid>/children``: it says so
rather than guessing (on the real /proc with real children:
tests/system/test_process_table.py)."""

from __future__ import annotations

from pathlib import Path

from joulestat.host.processes import ProcessTable
from tests.fakes.procfs import FakeProc


def test_a_tree_without_children_files_says_so(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc", children_files=False)
    fake.add(10)
    fake.write()
    table = ProcessTable(fake.root)
    stat = table.stat(10)
    assert stat is not None and table.children(10, stat) is None
    assert table.children_supported is False
