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

import math

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
    bound of `solvers.moldable.moldable_bound` (makespan only). Computed once per problem and
    objective (`Problem.derived`)."""
    return dict(problem.derived(("lower_bounds", objective), lambda: _lower_bounds(problem, objective)))


def _lower_bounds(problem: Problem, objective: str) -> dict[str, int]:
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
    work = max(int(load.max(initial=0)), -(-total // P), heterogeneous_work(problem))
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


def heterogeneous_work(problem: Problem) -> int:
    """A work bound for processors of different speeds (0 on equal ones).

    Spreading the work fractionally (an LP relaxation: each task split among its allowed processors,
    each processor busy at most T) needs, by LP duality, T >= sum over tasks of min over processors
    of ``y[q] * duration_on[t, q]`` for any weights ``y >= 0`` summing to 1. Two weightings are
    tried: equal, and in proportion to each processor's speed (the inverse of its mean duration);
    on processors that differ only in speed the second is total cost over total speed.

    >>> from solvers import Problem
    >>> heterogeneous_work(Problem.unrelated([[4, 1], [4, 1], [4, 1], [4, 1], [4, 1]]))
    4
    """
    if problem.duration_on is None or problem.num_tasks == 0:
        return 0
    mean = np.where(problem.allowed, problem.duration_on, 0).sum(axis=0) / np.maximum(problem.allowed.sum(axis=0), 1)
    speed = np.where(mean > 0, 1 / np.maximum(mean, 1e-12), 0.0)
    best = 0
    for y in (np.full(problem.num_processors, 1 / problem.num_processors), speed / max(speed.sum(), 1e-12)):
        value = np.where(problem.allowed, problem.duration_on * y[None, :], np.inf).min(axis=1).sum()
        best = max(best, math.ceil(value - 1e-9))
    return int(best)


def lower_bound(problem: Problem, objective: str = "makespan") -> int:
    """The largest of `lower_bounds`."""
    return max(lower_bounds(problem, objective).values(), default=0)
