"""What the runner's process tests run on each rank (`layersched.runtime.launch.run_processes`).

They live here, not in test_runner.py: a rank forked from the fork server unpickles its function by
importing the function's module, and test_runner.py takes seconds to import (torch's pipelining
module and the cases it builds), in every rank of every run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from layersched.runtime.runner import clock_offset


def offsets(rank, device, state):
    return clock_offset(device, force=True)


def variable(rank, device, state):
    return os.environ.get("LAYERSCHED_TEST_VARIABLE")


def rank_0_quick(rank, device, state):
    # rank 0 returns at once; rank 1 works a second, then says whether rank 0's process is still there
    pids = Path(state[0])
    (pids / str(rank)).write_text(str(os.getpid()))
    if rank == 0:
        return True
    time.sleep(1.0)
    try:
        os.kill(int((pids / "0").read_text()), 0)
    except ProcessLookupError:
        return False
    return True


def modules_the_layer_check_imports(rank, device, state):
    """The modules that `check_layers` on ``state[0]``'s workload imports in this rank (its own model
    file aside)."""
    from layersched.runtime.workload import check_layers, load_workload

    workload = load_workload(state[0])
    loaded = set(sys.modules)
    check_layers(workload)
    return sorted(set(sys.modules) - loaded)
