"""Large-neighbourhood search with CP-SAT: re-solve one window of the schedule at a time.

A first CP-SAT call on the whole problem (a quarter of the time, at most five steps' worth) starts
from the hint (or the best list heuristic, `solvers.heuristics.best`); it may prove the optimum, and
its bound is kept. Then each step picks ``window`` tasks that are consecutive in start order. Every other task keeps its
processor and its order relative to the other kept tasks of that processor (its time may still
move); the window's tasks may change processor and order. CP-SAT solves that restricted problem
from the current schedule, and the step's result replaces the current schedule unless it is
worse. Windows start at random positions (``seed``).

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

from solvers.cpsat import cpsat
from solvers.heuristics import best
from solvers.problem import OBJECTIVES, Problem, Result, Schedule
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
        from). ``info`` counts the steps and the improving ones.
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
    if whole.info.get("not_run") and step_limit <= whole_limit:
        # a step's model holds every task too, with no more time: it would be declined as well
        return dataclasses.replace(whole, solver="lns", runtime=time.perf_counter() - t0)
    bound = whole.lower_bound
    current, value = whole.schedule, whole.objective
    rng = np.random.default_rng(seed)
    steps = improvements = 0
    interrupted = False
    while value > bound and not interrupted:
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0.05:
            break
        keep, pairs = neighbourhood(problem, current, int(rng.integers(0, n - window + 1)), window)
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
        {"steps": steps, "improvements": improvements, "window": window}
        | ({"interrupted": True} if interrupted else {}),
    )


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
