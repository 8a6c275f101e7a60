"""A time limit that holds for a whole command: the solver's search and the steps around it.

Building a task graph, scheduling it by a template or by list scheduling, and writing the schedule
file each take time in proportion to the number of tasks. `Budget` estimates them from rates measured
on the project's 2-core machine (see `SECONDS_PER_TASK`), so that a command can decline up front when
even one schedule cannot be built and written in time, and `solve_best` can stop trying candidates
when the next one would not fit. A faster machine finishes early; the rates are the slowest seen.

>>> b = Budget(10.0, num_tasks=196_608)
>>> round(b.estimate("graph", "write"), 1)
9.8
>>> b.fits("graph", "template", "write")
False
"""

from __future__ import annotations

import time

SECONDS_PER_TASK = {
    "graph": 2.5e-5,  # build the task graph and lower it to a solvers.Problem
    "template": 1.0e-5,  # a template's orders, timed and validated, with its metrics (graph built)
    "greedy": 7.0e-5,  # the same for a template built by greedy search (zb-greedy, chunk-greedy)
    "list": 2.0e-5,  # list scheduling, validated, with its metrics (graph built)
    "hints": 2.0e-5,  # turning one schedule into a CP-SAT hint for the other backward mode
    "write": 2.5e-5,  # the schedule file: per-task records, checked by pydantic, written as JSON
}
"""Seconds per task of each step on the project's 2-core machine (Python 3.11), the slowest rate over
pipeline problems of 64 stages with 64, 256 and 1024 micro-batches (12,288 to 196,608 tasks), rounded
up; ``python benchmarks/time_limits.py`` measures them again."""

BYTES_PER_TASK = 4096
"""Peak memory per task of a whole ``solve`` with a template, the task graph, the schedule and its file
included: 1.41 GB for the 384,128 tasks of 64 stages and 2,000 micro-batches (``zb-h1``) on the
project's 2-core machine, about 3.5 KB a task, rounded up."""


class TooLarge(ValueError):
    """A problem whose task graph would not fit in the memory this machine has free."""


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux's ``MemAvailable``: free memory plus what
    the page cache can give back), or None where the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def short_of(need: int) -> int | None:
    """The bytes available (`available_memory`) when ``need`` is more than that, else None (also where
    the system does not say). What a command asks of this machine's memory is checked this one way."""
    have = available_memory()
    return have if have is not None and need > have else None


def check_memory(num_tasks: int) -> None:
    """`TooLarge` when ``num_tasks`` tasks at `BYTES_PER_TASK` need more memory than is available: the
    command would otherwise run for a long time and then fail for memory."""
    need = num_tasks * BYTES_PER_TASK
    if (have := short_of(need)) is not None:
        raise TooLarge(
            f"the task graph has {num_tasks:,} tasks; with its schedule and file that needs about "
            f"{_size(need)} (about {BYTES_PER_TASK // 1024} KiB a task), more than the {_size(have)} this "
            "machine has available; use fewer micro-batches or stages (a schedule's pattern shows with a few "
            "times as many micro-batches as ranks)"
        )


def _size(nbytes: int) -> str:
    """``nbytes`` in the largest binary unit that keeps it at least 1: ``1.5 GiB``, ``9.8 KiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes} B"


SETUP_SECONDS = 2.0
"""The allowance beyond ``--time-limit``: starting Python, importing, reading and checking the problem
(about 1 s measured here); the limit counts from when the problem has been read."""


class Budget:
    """``seconds`` from now (or from ``start``, a `time.perf_counter` value) for a problem of
    ``num_tasks`` tasks."""

    def __init__(self, seconds: float, num_tasks: int, start: float | None = None) -> None:
        self.seconds = float(seconds)
        self.num_tasks = int(num_tasks)
        self.deadline = (time.perf_counter() if start is None else start) + self.seconds

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.deadline - time.perf_counter()

    def estimate(self, *steps: str) -> float:
        """Estimated seconds for ``steps`` on this problem: names of `SECONDS_PER_TASK`, or ``cpsat``,
        the least time CP-SAT accepts (`solvers.cpsat.build_seconds` for about one edge per task,
        within its `~solvers.cpsat.BUILD_SHARE` of the limit)."""
        rates = [_cpsat_rate() if s == "cpsat" else SECONDS_PER_TASK[s] for s in steps]
        return sum(rates) * self.num_tasks

    def fits(self, *steps: str, seconds: float = 0.0) -> bool:
        """Whether ``steps``, and ``seconds`` more estimated elsewhere, are estimated to end before the
        deadline."""
        return self.estimate(*steps) + seconds <= self.left()


def pipeline_tasks(pipe, split_backward: bool = True) -> int:
    """The number of tasks in ``pipe``'s task graph, without building it: per stage and micro-batch a
    forward and a backward (two when split), per stage an all-reduce and an optimizer update (an upper
    bound: stages without them have fewer)."""
    return pipe.num_stages * (pipe.num_microbatches * (3 if split_backward else 2) + 2)


def _cpsat_rate() -> float:
    from solvers.cpsat import BUILD_ITEMS_PER_SECOND, BUILD_SHARE

    return 2 / BUILD_ITEMS_PER_SECOND / BUILD_SHARE
