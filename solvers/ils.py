"""Iterated local search: the best list heuristic's schedule, polished along its critical chain and
kicked out of each local optimum (`solvers.polish.polish` with ``kicks``).

It sits above both `solvers.heuristics` (where it starts) and `solvers.polish` (how it moves), which
`solvers.heuristics.best` also uses. Against saga on random DAGs of 100 and 1,000 tasks on 4 to 32
processors, equal and heterogeneous, `ils` with 5 s was at most saga's best heuristic on 24 of 24
classes (`benchmarks/results/solvers_saga_ils-2core-vm.txt`).
"""

from __future__ import annotations

import dataclasses
import time

from solvers.heuristics import best, heft_ranked
from solvers.polish import polish
from solvers.problem import Problem, Result

ILS_RANK_WEIGHTS = (0.5, 0.75, 1.5, 3.0)
"""The transfer weights of HEFT's upward rank that `ils` also starts from, in that order, after
`solvers.heuristics.best` (which tries 0, 0.25, 1 and 2), while the first half of its time lasts.
HEFT's schedule moves by about half a percent either way with the weight (layered 5,000-task
instances on 32 heterogeneous processors, seeds 0-2: 3097 / 3042 / 2742 at weight 1, 3095 / 3034 /
2732 at the best of these and 0.25, which `best` has run since session 43), and one HEFT run costs a
fraction of a second there. Half, not a quarter: there `best` alone takes 1.4 s, more than a quarter
of a 5 s limit, and polishing 5,000 tasks in the time that is left found nothing."""


def ils(problem: Problem, /, *, objective: str = "makespan", time_limit: float = 10.0, seed: int = 0) -> Result:
    """Iterated local search: `solvers.heuristics.best`'s schedule, or HEFT's with another transfer
    weight in its rank (`ILS_RANK_WEIGHTS`) where that is better (best within a quarter of
    ``time_limit``, the others within half of it), then `polish` with kicks for the rest: at each
    local optimum a few random tasks of the best schedule so far move to another processor or swap
    with their neighbour, and the search descends again from there. The bound is best's; the status
    is optimal where the schedule reaches it. ``info``: ``best`` (best's objective), ``start`` (the
    heuristic it started from) and ``candidates`` (best's list: within a short limit some may be
    skipped, so `ils` may end above an unlimited `best`; never above its own start). Works on
    heterogeneous processors and links, where CP-SAT does not.

    >>> from solvers import Problem
    >>> ils(Problem(duration=[3, 1, 1], num_processors=2), time_limit=1).objective
    3
    """
    if not time_limit > 0:  # also NaN
        raise ValueError(f"time_limit: expected a positive number of seconds, got {time_limit}")
    problem.require_rigid("ils")
    t0 = time.perf_counter()
    start = best(problem, objective=objective, time_limit=time_limit / 4)
    first, listed = start.objective, start.info.get("candidates", {})  # what best ran (or skipped) in its time
    for _, run in map(heft_ranked, ILS_RANK_WEIGHTS):
        left = time_limit / 2 - (time.perf_counter() - t0)
        if start.schedule is None or start.status == "optimal" or left <= 0:
            break
        other = run(problem, objective=objective, time_limit=left)
        if other.schedule is not None and other.objective < start.objective:
            status = "optimal" if other.objective <= start.lower_bound else "feasible"
            start = dataclasses.replace(other, status=status, lower_bound=start.lower_bound)
    left = time_limit - (time.perf_counter() - t0)
    if start.schedule is None or start.status == "optimal" or left <= 0:
        info = {**start.info, "best": first, "start": start.solver, "candidates": listed}
        return dataclasses.replace(start, solver="ils", runtime=time.perf_counter() - t0, info=info)
    bound = start.lower_bound
    out = polish(problem, start.schedule, objective=objective, time_limit=left, seed=seed, bound=bound, kicks=True)
    status = "optimal" if out.objective <= bound else "feasible"
    info = {"best": first, "start": start.solver, "candidates": listed, **out.info}
    return Result(out.schedule, status, out.objective, bound, time.perf_counter() - t0, "ils", objective, info)
