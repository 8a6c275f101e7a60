"""How fast this machine is now, so that timed figures from different days can be compared.

A benchmark whose solver runs for a fixed wall-clock time (``best --time-limit 60``) gets more
search done on a faster machine, and the 2-core VM we measure on is not equally fast every day:
session 40 re-ran commit 6528893's `best` on the p=4, m=8 interleaved row and got gaps of 0.58% and
0.29% where session 30 had recorded 0.00% twice with the same code. A figure is only comparable
with one taken at the same speed, so the benchmarks print this one beside theirs.

Two fixed workloads, each the median of ``repeats`` timings:
- **CP-SAT**: a job shop (10 jobs, 10 machines, durations from a fixed seed) solved to a proven
  optimum (910) with one worker and a fixed seed. That makes the same moves every run, so the work
  is the same and only the wall time it takes varies (about 2.5 s on the 2-core VM). The objective
  it ends at is printed too: a different one means the work was not the same (another OR-Tools
  version, say). A deterministic time limit caps the work should a version not prove it;
- **Python**: list scheduling (`solvers.listsched.list_schedule`) of a fixed random layered DAG of
  10,000 tasks on 8 processors (`solvers_bench.random_layered_problem`, seed 0): the interpreter's
  speed, which the templates, polish and the simulations of `best` run at.

Usage: python benchmarks/machine_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import ortools
from ortools.sat.python import cp_model
from solvers_bench import random_layered_problem

from layersched.cli.options import positive_int
from solvers import Problem
from solvers.listsched import list_schedule

JOBS = MACHINES = 10
LAYERED_TASKS = 10_000
"""The Python workload: `solvers_bench.random_layered_problem` of this many tasks (8 processors, seed 0)."""
DETERMINISTIC_SECONDS = 3.0
"""The cap on CP-SAT's deterministic time (OR-Tools 9.15 proves the optimum after 0.46)."""


def jobs() -> list[list[tuple[int, int]]]:
    """The job shop: ``JOBS`` jobs, each visiting every one of ``MACHINES`` machines once in a random
    order, as (machine, duration 1-99) steps; the same every call."""
    rng = np.random.default_rng(0)
    return [[(int(m), int(rng.integers(1, 100))) for m in rng.permutation(MACHINES)] for _ in range(JOBS)]


def job_shop_lower_bound() -> int:
    """The most work any machine or job of the job shop has: no schedule is shorter."""
    steps = jobs()
    per_machine = [sum(d for job in steps for m, d in job if m == q) for q in range(MACHINES)]
    return max(max(per_machine), max(sum(d for _, d in job) for job in steps))


def _job_shop() -> tuple[cp_model.CpModel, cp_model.IntVar]:
    """The job shop as a CP-SAT model minimising the makespan."""
    model = cp_model.CpModel()
    horizon = 100 * JOBS * MACHINES
    on_machine: list[list] = [[] for _ in range(MACHINES)]
    ends = []
    for j, job in enumerate(jobs()):
        previous = None
        for m, d in job:
            start = model.new_int_var(0, horizon, f"s{j}_{m}")
            on_machine[m].append(model.new_fixed_size_interval_var(start, d, f"i{j}_{m}"))
            if previous is not None:
                model.add(start >= previous)
            previous = start + d
        ends.append(previous)
    for intervals in on_machine:
        model.add_no_overlap(intervals)
    makespan = model.new_int_var(0, horizon, "makespan")
    for end in ends:
        model.add(makespan >= end)
    model.minimize(makespan)
    return model, makespan


def cpsat_seconds(deterministic: float = DETERMINISTIC_SECONDS) -> tuple[float, int]:
    """Wall seconds of one CP-SAT run of the job shop, stopped after at most ``deterministic`` seconds
    of CP-SAT's deterministic time (by default it proves the optimum first), and the makespan it ends at."""
    model, makespan = _job_shop()
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = deterministic
    t = time.perf_counter()
    solver.solve(model)
    return time.perf_counter() - t, int(solver.value(makespan))


def python_seconds(problem: Problem | None = None) -> float:
    """Wall seconds of one list scheduling of ``problem``, by default the fixed layered DAG."""
    problem = problem if problem is not None else random_layered_problem(LAYERED_TASKS)
    t = time.perf_counter()
    list_schedule(problem)
    return time.perf_counter() - t


def speed(repeats: int = 3) -> dict:
    """The median wall seconds of each workload over ``repeats`` timings, the values CP-SAT ended at,
    and the versions of Python, OR-Tools and numpy that ran them."""
    runs = [cpsat_seconds() for _ in range(repeats)]
    problem = random_layered_problem(LAYERED_TASKS)
    python_seconds(problem)  # the first call pays for imports and caches
    return {
        "cpsat_s": statistics.median(s for s, _ in runs),
        "cpsat_value": sorted({v for _, v in runs}),
        "python_s": statistics.median(python_seconds(problem) for _ in range(repeats)),
        "versions": f"Python {platform.python_version()}, ortools {ortools.__version__}, numpy {np.__version__}",
    }


def describe(result: dict) -> str:
    """``result`` in a few words: "CP-SAT 2.51 s (ends at 910), Python 118 ms (Python 3.11.7, ortools
    9.15.6755, numpy 2.4.6)". The versions are part of it: a newer numpy or OR-Tools moves both."""
    values = ", ".join(map(str, result["cpsat_value"]))
    return (
        f"CP-SAT {result['cpsat_s']:.2f} s (ends at {values}), Python {result['python_s'] * 1000:.0f} ms "
        f"({result['versions']})"
    )


HEADING = "machine speed (benchmarks/machine_speed.py, medians; smaller is faster)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=positive_int, default=3, help="timings per workload (default 3)")
    args = ap.parse_args()
    print(f"{HEADING}: {describe(speed(args.repeats))}")


if __name__ == "__main__":
    main()
