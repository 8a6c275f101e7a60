"""Lower bounds on the objective of any valid schedule, reported beside every result.

- ``critical_path``: the longest chain of durations (plus transfer delays between tasks that are
  bound to different processors).
- ``processor_work``: the work bound to one processor, or the total work spread over all of them.
- ``head_work_tail`` (makespan): for each processor, the earliest any of its tasks can start, plus
  its work, plus the shortest time still needed after its last task.

Example
-------
>>> from solvers import Problem, lower_bounds
>>> p = Problem(duration=[2, 3, 4], allowed=[[1, 0], [0, 1], [0, 1]], edges=[[0, 1]], delay=[1])
>>> lower_bounds(p)
{'critical_path': 6, 'processor_work': 7, 'head_work_tail': 7}
"""

from __future__ import annotations

import numpy as np

from solvers.graph import longest_from_sources, longest_to_sinks
from solvers.problem import Problem


def heads_tails(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start (head) and least time after the end (tail) of every task."""
    order = problem.topological_order()
    n, d = problem.num_tasks, problem.fixed_delays()
    head = longest_from_sources(order, n, problem.edges, problem.duration, d)
    tail = longest_to_sinks(order, n, problem.edges, problem.duration, d)
    return head, tail


def lower_bounds(problem: Problem, objective: str = "makespan") -> dict[str, int]:
    """Named lower bounds on ``objective`` (``makespan`` or ``span``); for a moldable problem the one
    bound of `solvers.moldable.moldable_bound` (makespan only)."""
    if problem.is_moldable:
        if objective != "makespan":
            raise ValueError(f"moldable problems support the makespan objective only, got {objective!r}")
        from solvers.moldable import moldable_bound

        return {"critical_path_or_area": moldable_bound(problem)}
    dur = problem.duration
    fixed = problem.fixed_processor()
    P = problem.num_processors
    load = np.bincount(fixed[fixed >= 0], weights=dur[fixed >= 0], minlength=P).astype(np.int64)
    total = int(dur.sum())
    work = max(int(load.max(initial=0)), -(-total // P))
    if objective == "span":
        return {"processor_work": work}
    if objective != "makespan":
        raise ValueError(f"unknown objective {objective!r}; valid: makespan, span")
    head, tail = heads_tails(problem)
    bounds = {"critical_path": int((head + dur + tail).max(initial=0)), "processor_work": work}
    hwt = 0
    for q in range(P):
        mine = fixed == q
        if mine.any():
            hwt = max(hwt, int(head[mine].min() + load[q] + tail[mine].min()))
    bounds["head_work_tail"] = hwt
    return bounds


def lower_bound(problem: Problem, objective: str = "makespan") -> int:
    """The largest of `lower_bounds`."""
    return max(lower_bounds(problem, objective).values(), default=0)
