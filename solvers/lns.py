"""Large-neighbourhood search with CP-SAT: re-solve one window of the schedule at a time.

A first CP-SAT call on the whole problem (a quarter of the time, at most five steps' worth) starts
from the hint (or the best list heuristic, `solvers.heuristics.best`); it may prove the optimum, and
its bound is kept. Then each step picks ``window`` tasks that are consecutive in start order
(windows start at random positions, ``seed``); the step's result replaces the current schedule
unless it is worse.

- Memory-free makespan problems: the step's model holds the window only
  (`solvers.cpsat.reoptimize_window`): every other task stays where it is, the window's tasks may
  change processor and order within the time they span, and the new orders are then timed at their
  earliest starts. A step costs the same on any size of problem (at most `LOCAL_STEP` seconds).
- Otherwise (memory limits, the span objective): every other task keeps its processor and its
  order relative to the other kept tasks of that processor (its time may still move), and CP-SAT
  solves that restricted whole problem from the current schedule.

Example
-------
>>> from solvers import Problem, validate
>>> from solvers.lns import cpsat_lns
>>> p = Problem(duration=[3, 3, 2, 2, 2], num_processors=2)
>>> r = cpsat_lns(p, time_limit=5, window=4)
>>> r.objective, r.status
(6, 'optimal')
>>> validate(p, r.schedule)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from solvers.cpsat import cpsat, reoptimize_window
from solvers.heuristics import best
from solvers.listsched import has_memory_limits
from solvers.problem import OBJECTIVES, Problem, Result, Schedule
from solvers.simulate import Deadlock, time_orders
from solvers.validate import violations


def cpsat_lns(
    problem: Problem,
    /,
    *,
    objective: str = "makespan",
    time_limit: float = 30.0,
    window: int = 50,
    hint: Schedule | None = None,
    step_limit: float = 2.0,
    workers: int = 2,
    seed: int = 0,
    progress: Callable[[dict], None] | None = None,
    log: bool = False,
) -> Result:
    """Improve a schedule window by window with CP-SAT for ``time_limit`` seconds.

    Parameters
    ----------
    problem : Problem
    objective : {"makespan", "span"}
    time_limit : float
        Total wall-clock limit in seconds.
    window : int
        Tasks re-solved per step (consecutive in start order). A problem with at most ``window``
        tasks is solved by one plain `solvers.cpsat.cpsat` call.
    hint : Schedule, optional
        Starting schedule; `solvers.heuristics.best`'s when absent or invalid.
    step_limit : float
        CP-SAT time limit per step.
    workers, log
        Passed to `solvers.cpsat.cpsat`.
    seed : int
        Seed of the window positions.
    progress : callable, optional
        Called with ``dict(incumbent=, bound=, gap=, elapsed=)`` after each improving step.

    Returns
    -------
    Result
        The best schedule found (never worse than a valid ``hint``) with the bound proven by the
        first, unrestricted CP-SAT call; ``optimal`` when they meet, else ``feasible`` (or that
        call's ``infeasible``/``unknown`` when it found nothing and there was no schedule to start
        from). ``info`` counts the steps and the improving ones, and says whether they were window-only (``local``).
    """
    t0 = time.perf_counter()
    problem.require_uniform("lns")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if window < 1:
        raise ValueError(f"window: expected a positive number of tasks, got {window}")
    n = problem.num_tasks
    if hint is None or violations(problem, hint, limit=1):
        hint = best(problem, objective=objective, time_limit=max(0.01, time_limit / 4)).schedule
    # one CP-SAT call on the whole problem first: it may prove the optimum, and its bound holds
    whole_limit = time_limit if n <= window else min(time_limit / 4, 5 * step_limit)
    whole = cpsat(
        problem,
        objective=objective,
        workers=workers,
        hint=hint,
        progress=progress,
        log=log,
        time_limit=whole_limit,
    )
    if n <= window or whole.schedule is None or whole.status == "optimal" or whole.info.get("interrupted"):
        return dataclasses.replace(whole, solver="lns", runtime=time.perf_counter() - t0)
    # memory-free makespan problems: each step models its window only (any size); else the whole
    # problem with the rest kept in place
    local = objective == "makespan" and not has_memory_limits(problem)
    if whole.info.get("not_run") and step_limit <= whole_limit and not local:
        # a step's model holds every task too, with no more time: it would be declined as well
        return dataclasses.replace(whole, solver="lns", runtime=time.perf_counter() - t0)
    bound = whole.lower_bound
    current, value = whole.schedule, whole.objective
    topo = np.empty(n, dtype=np.int64)
    topo[problem.topological_order()] = np.arange(n)
    rng = np.random.default_rng(seed)
    steps = improvements = 0
    interrupted = False
    while value > bound and not interrupted:
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0.05:
            break
        first = int(rng.integers(0, n - window + 1))
        if local:
            steps += 1
            try:
                moved = _local_step(problem, current, first, window, min(step_limit, left, LOCAL_STEP), workers, topo)
            except KeyboardInterrupt:
                interrupted = True
                break
            if moved is not None and moved.makespan(problem) <= value:
                if moved.makespan(problem) < value:
                    improvements += 1
                    if progress is not None:
                        report = moved.makespan(problem)
                        progress({"incumbent": report, "bound": bound, "gap": (report - bound) / report,
                                  "elapsed": time.perf_counter() - t0})  # fmt: skip
                current, value = moved, moved.makespan(problem)
            continue
        keep, pairs = neighbourhood(problem, current, first, window)
        step = cpsat(
            problem,
            objective=objective,
            time_limit=min(step_limit, left),
            workers=workers,
            hint=current,
            keep_processor=keep,
            order_pairs=pairs,
            log=log,
        )
        steps += 1
        interrupted = bool(step.info.get("interrupted"))  # Ctrl-C: keep what this step found, then stop
        if step.schedule is not None and step.objective <= value:
            if step.objective < value:
                improvements += 1
                if progress is not None:
                    progress(
                        {
                            "incumbent": step.objective,
                            "bound": bound,
                            "gap": (step.objective - bound) / step.objective,
                            "elapsed": time.perf_counter() - t0,
                        }
                    )
            current, value = step.schedule, step.objective
    status = "optimal" if value <= bound else "feasible"
    return Result(
        current,
        status,
        value,
        bound,
        time.perf_counter() - t0,
        "lns",
        objective,
        {"steps": steps, "improvements": improvements, "window": window, "local": local}
        | ({"interrupted": True} if interrupted else {}),
    )


LOCAL_STEP = 0.1
"""Seconds at most for one window of a memory-free problem (its model is small: many short steps
found more than few long ones on random DAGs of 1,000 and 5,000 tasks)."""


def _local_step(
    problem: Problem, schedule: Schedule, first: int, window: int, time_limit: float, workers: int, topo: np.ndarray
) -> Schedule | None:
    """Re-place the tasks at start positions ``first .. first + window - 1`` with everything else in
    place (`solvers.cpsat.reoptimize_window`), then time the new per-processor orders at their earliest
    starts (ties by topological position), which moves later work into the room made. The timed
    schedule when it validates, else the re-placed one; None when CP-SAT found nothing."""
    order = np.lexsort((np.arange(problem.num_tasks), schedule.start))
    free = np.zeros(problem.num_tasks, dtype=bool)
    free[order[first : first + window]] = True
    moved = reoptimize_window(problem, schedule, free, time_limit, workers)
    if moved is None:
        return None
    by_time = np.lexsort((topo, moved.start))
    orders: list[list[int]] = [[] for _ in range(problem.num_processors)]
    for t in by_time.tolist():
        orders[int(moved.processor[t])].append(t)
    try:
        timed = time_orders(problem, orders)
    except Deadlock:
        return moved
    return moved if violations(problem, timed, limit=1) else timed


def neighbourhood(problem: Problem, schedule: Schedule, first: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Restrictions that free the tasks at positions ``first .. first + window - 1`` of the start
    order and keep the rest: their processors (-1 marks a free task) and, per processor, order pairs
    between consecutive kept tasks of positive duration (the current ``schedule`` meets them).

    >>> from solvers import Problem, Schedule
    >>> p = Problem(duration=[1, 1, 1, 1], num_processors=2)
    >>> s = Schedule(processor=[0, 0, 0, 1], start=[0, 1, 2, 0])
    >>> keep, pairs = neighbourhood(p, s, 0, 2)
    >>> keep.tolist(), pairs.tolist()
    ([-1, 0, 0, -1], [[1, 2]])
    """
    order = np.lexsort((np.arange(problem.num_tasks), schedule.start))
    free = np.zeros(problem.num_tasks, dtype=bool)
    free[order[first : first + window]] = True
    keep = np.where(free, -1, schedule.processor)
    kept = order[~free[order] & (problem.duration[order] > 0)]
    by_proc = kept[np.argsort(schedule.processor[kept], kind="stable")]
    same = schedule.processor[by_proc[1:]] == schedule.processor[by_proc[:-1]]
    if not len(kept):
        return keep, np.zeros((0, 2), dtype=np.int64)
    pairs = np.stack([by_proc[:-1][same], by_proc[1:][same]], axis=1)
    return keep, pairs
