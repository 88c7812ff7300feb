"""What a fresh interpreter imports, where a test process that has imported everything
cannot tell: the carbon footprint and the CPU TDP lookup never import codecarbon or
pandas (the agent's memory budget; the data ships in joulestat), and a node without the
NVIDIA driver never imports pynvml. Each runs ``python -c`` and reads its sys.modules.
(The modules' behaviour: tests/unit/carbon/test_intensity.py,
tests/unit/devices/test_cpu_tdp.py, tests/unit/devices/test_nvidia.py.)"""

from __future__ import annotations

import subprocess
import sys


def test_resolving_never_imports_codecarbon_or_pandas() -> None:
    """codecarbon's __init__ pulls in pandas (tens of MiB); its data ships in joulestat."""
    code = ("import sys\n"
            "from joulestat.carbon.footprint import NodePlacement, footprint\n"
            "placement = NodePlacement('p4d.24xlarge', 'us-east-1', 60)\n"
            "footprint([(1.0, 'n', 3.6e6)], {'n': placement})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('codecarbon', 'pandas')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_lookup_does_not_import_codecarbon_or_pandas() -> None:
    """The agent's 50 MiB budget: the table is read without importing codecarbon."""
    code = (
        "import sys; from joulestat.devices.cpu_tdp import lookup_tdp; "
        "assert lookup_tdp('Intel Xeon Gold 6148') is not None; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('codecarbon', 'pandas')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_driver_library_means_pynvml_is_never_imported() -> None:
    """A node without the NVIDIA driver does not pay for pynvml's module (about 1 MiB of
    the agent's RSS): the library nvmlInit would load is tried first. In a fresh
    interpreter, so no other test's import of pynvml hides it."""
    code = ("import sys, joulestat.devices.nvidia as n\n"
            "n.NVML_LIBRARY = 'libjoulestat-absent-nvml.so.1'\n"
            "assert n.open_nvidia(now_s=0.0) is None\n"
            "assert 'pynvml' not in sys.modules, 'pynvml imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
