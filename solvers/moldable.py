"""Moldable tasks: each task runs in one of several modes (cores, duration) on a processor of several
cores, shared cumulatively by the tasks running on it.

A `Problem` with ``modes`` (and processor ``width``) describes them; `Schedule.mode` says which mode
each task runs in, and `solvers.validate` checks that the cores in use on a processor never exceed
its width. This module schedules such problems (makespan):

- `allot`: a mode per task by a rule from the literature: ``all_cores`` (every task on all the cores
  it can use), ``fastest`` (the shortest mode), ``efficient`` (the fewest cores within 10% of the
  fastest), ``cpa`` (Radulescu and van Gemund's CPA: widen critical-path tasks while the critical path
  is longer than the average area);
- `list_moldable`: list scheduling with a core budget, with a fixed allotment or choosing each mode
  when the task starts (the free cores shared among the ready tasks), optionally at most
  ``concurrency`` tasks at once;
- `cpsat_moldable`: CP-SAT with one optional interval per mode and processor and a cumulative
  constraint per processor, seeded with a hint, never worse than it;
- `moldable_bound`: the larger of the critical path at the fastest modes and the least total area
  (cores x duration) over the cores.

Transfer delays are supported between tasks bound to one processor each (where the delay is known);
memory and affinity groups are not (refused with a message). CP-SAT is in `solvers.cpsat_moldable`.

Example
-------
>>> from solvers import Problem, validate
>>> p = Problem.moldable([[(1, 8), (2, 5), (4, 4)]] * 3, width=[4])
>>> r = list_moldable(p, allotment="fastest")
>>> r.objective, moldable_bound(p)
(12, 6)
>>> r = list_moldable(p)  # modes chosen as tasks start: 3 tasks share 4 cores
>>> validate(p, r.schedule); r.objective
8
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from solvers.graph import longest_from_sources, longest_to_sinks
from solvers.problem import Problem, Result, Schedule
from solvers.validate import validate

ALLOTMENTS = ("all_cores", "fastest", "efficient", "cpa")
"""Named allotment rules for `allot`."""

EFFICIENT_SLACK = 0.10
"""``efficient``: the fewest cores whose duration is within this share of the task's fastest mode."""


def _check(problem: Problem) -> None:
    """What the moldable solvers do not handle is refused: memory, affinity groups, and delays on
    edges whose ends are not bound to one processor each, and heterogeneous processors or links."""
    problem.require_uniform("moldable")
    if (problem.mem_delta != 0).any():
        raise ValueError("moldable: memory deltas are not supported by the moldable solvers")
    if (problem.group >= 0).any():
        raise ValueError("moldable: affinity groups are not supported by the moldable solvers")
    if len(problem.edges) and (problem.delay > 0).any():
        fixed = problem.fixed_processor()
        u, v = problem.edges[:, 0], problem.edges[:, 1]
        loose = (problem.delay > 0) & ((fixed[u] < 0) | (fixed[v] < 0))
        if loose.any():
            e = int(np.argmax(loose))
            raise ValueError(
                f"moldable: the edge {problem.task_label(int(u[e]))} -> {problem.task_label(int(v[e]))} has a "
                "delay but an end that may run on several processors; delays need both ends bound"
            )


def _fits(problem: Problem) -> np.ndarray:
    """(n, K) bool: the mode exists and fits the widest processor the task may use."""
    widest = np.where(problem.allowed, problem.width[None, :], 0).max(axis=1)
    k = np.arange(problem.mode_cores.shape[1])[None, :]
    return (k < problem.mode_count[:, None]) & (problem.mode_cores <= widest[:, None])


def moldable_bound(problem: Problem) -> int:
    """A lower bound on the makespan: the critical path with every task at its fastest mode (that
    fits), or the least total area (cores x duration) of the tasks each processor must run, spread over
    its cores (and of all tasks over all cores), whichever is larger."""
    fits = _fits(problem)
    dur = np.where(fits, problem.mode_duration, np.iinfo(np.int64).max).min(axis=1)
    order = problem.topological_order()
    head = longest_from_sources(order, problem.num_tasks, problem.edges, dur, problem.fixed_delays())
    path = int((head + dur).max(initial=0))
    area = np.where(fits, problem.mode_cores * problem.mode_duration, np.iinfo(np.int64).max).min(axis=1)
    total = -(-int(area.sum()) // int(problem.width.sum()))
    fixed = problem.fixed_processor()
    per = max(
        (-(-int(area[fixed == q].sum()) // int(problem.width[q])) for q in range(problem.num_processors)), default=0
    )
    return max(path, total, per)


def allot(problem: Problem, rule: str = "cpa") -> np.ndarray:
    """A mode per task by ``rule`` (one of `ALLOTMENTS`); only modes that fit a processor count."""
    fits = _fits(problem)
    cores, dur = problem.mode_cores, problem.mode_duration
    big = np.iinfo(np.int64).max // 4
    if rule == "all_cores":  # most cores, then shortest
        return np.lexsort((np.where(fits, dur, big), -np.where(fits, cores, -1)), axis=1)[:, 0].astype(np.int64)
    if rule == "fastest":  # shortest, then fewest cores
        return np.lexsort((np.where(fits, cores, big), np.where(fits, dur, big)), axis=1)[:, 0].astype(np.int64)
    if rule == "efficient":
        best = np.where(fits, dur, big).min(axis=1, keepdims=True)
        ok = fits & (dur <= best * (1 + EFFICIENT_SLACK))
        return np.lexsort((np.where(ok, dur, big), np.where(ok, cores, big)), axis=1)[:, 0].astype(np.int64)
    if rule == "cpa":
        return _cpa(problem, fits)
    raise ValueError(f"unknown allotment {rule!r}; valid: {', '.join(ALLOTMENTS)}")


def _cpa(problem: Problem, fits: np.ndarray) -> np.ndarray:
    """CPA: start from each task's least-area mode; while the critical path is longer than the
    average area (total area over all cores), move the critical-path task with the largest duration
    gain per extra area to its next faster mode."""
    n = problem.num_tasks
    cores, dur = problem.mode_cores, problem.mode_duration
    big = np.iinfo(np.int64).max // 4
    area = np.where(fits, cores * dur, big)
    mode = np.lexsort((np.where(fits, dur, big), area), axis=1)[:, 0]
    order = problem.topological_order()
    delay = problem.fixed_delays()
    W = int(problem.width.sum())
    rows = np.arange(n)
    for _ in range(int(fits.sum())):  # each step makes one task strictly faster: bounded
        d = dur[rows, mode]
        head = longest_from_sources(order, n, problem.edges, d, delay)
        tail = longest_to_sinks(order, n, problem.edges, d, delay)
        path = int((head + d + tail).max(initial=0))
        if path <= int((cores[rows, mode] * d).sum()) / W:
            break
        critical = np.flatnonzero(head + d + tail == path)
        best, pick = None, None
        for t in critical.tolist():
            faster = np.flatnonzero(fits[t] & (dur[t] < d[t]))
            if not len(faster):
                continue
            # the next faster mode: the one with the least area among those faster
            k = int(faster[np.lexsort((-dur[t, faster], area[t, faster]))[0]])
            gain = (d[t] - dur[t, k]) / max(1, area[t, k] - cores[t, mode[t]] * d[t])
            if best is None or gain > best:
                best, pick = gain, (t, k)
        if pick is None:
            break
        mode[pick[0]] = pick[1]
    return mode.astype(np.int64)


def upward_rank_moldable(problem: Problem, mode: np.ndarray | None = None) -> np.ndarray:
    """Longest path to the end of the graph with each task at ``mode`` (default: its fastest)."""
    if mode is None:
        mode = allot(problem, "fastest")
    d = problem.mode_duration[np.arange(problem.num_tasks), mode]
    order = problem.topological_order()
    return longest_to_sinks(order, problem.num_tasks, problem.edges, d, problem.fixed_delays()) + d


def list_moldable(
    problem: Problem,
    /,
    *,
    allotment: str | np.ndarray | None = None,
    concurrency: int | None = None,
    objective: str = "makespan",
    time_limit: float | None = None,
) -> Result:
    """List scheduling with a core budget.

    In time order, the ready tasks (predecessors ended, data arrived) are taken by upward rank and
    each starts at once on an allowed processor where its cores are free (greedy co-running: a
    lower-ranked task that fits goes before a higher-ranked one that does not). With ``allotment``
    (a rule of `allot` or a mode per task) every task runs in that mode; without, a task chooses
    when it starts: the fastest mode within its share of the free cores (the free cores divided by
    the ready tasks still waiting, at least one core). ``concurrency`` caps the tasks running at once
    on a processor. ``time_limit`` stops the run (status ``unknown``).
    """
    t0 = time.perf_counter()
    if objective != "makespan":
        raise ValueError(f"moldable problems support the makespan objective only, got {objective!r}")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency: expected at least 1, got {concurrency}")
    _check(problem)
    n, P = problem.num_tasks, problem.num_processors
    fits = _fits(problem)
    fixed_mode = None
    if allotment is not None:
        fixed_mode = allot(problem, allotment) if isinstance(allotment, str) else np.asarray(allotment, np.int64)
        if fixed_mode.shape != (n,) or not fits[np.arange(n), np.clip(fixed_mode, 0, fits.shape[1] - 1)].all():
            raise ValueError("allotment: expected one existing mode per task that fits a processor")
    rank = upward_rank_moldable(problem, fixed_mode).tolist()
    cores, dur = problem.mode_cores.tolist(), problem.mode_duration.tolist()
    count, width = problem.mode_count.tolist(), problem.width.tolist()
    allowed = [np.flatnonzero(problem.allowed[t]).tolist() for t in range(n)]
    bound_to = problem.fixed_processor().tolist()
    deadline = t0 + time_limit if time_limit is not None else math.inf
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for (u, v), d in zip(problem.edges.tolist(), problem.delay.tolist(), strict=True):
        preds[v].append((u, d))
        succs[u].append(v)
    left = [len(p) for p in preds]
    free, running = list(width), [0] * P
    proc, start, mode, end = [-1] * n, [0] * n, [0] * n, [0] * n
    pending = [(0, t) for t in range(n) if not left[t]]  # (data-ready time, task): all predecessors placed
    heapq.heapify(pending)
    waiting: list[int] = []  # data arrived, not started
    active: list[tuple[int, int]] = []  # (end, task)
    now = placed = 0
    while placed < n:
        if time.perf_counter() > deadline:
            info = {"reason": f"time limit: placed {placed} of {n} tasks"}
            bound = moldable_bound(problem)
            return Result(None, "unknown", None, bound, time.perf_counter() - t0, "list_moldable", objective, info)
        while active and active[0][0] <= now:  # release the cores of what has ended
            t = heapq.heappop(active)[1]
            free[proc[t]] += cores[t][mode[t]]
            running[proc[t]] -= 1
        while pending and pending[0][0] <= now:
            waiting.append(heapq.heappop(pending)[1])
        waiting.sort(key=lambda t: (-rank[t], t))
        still = []
        for k, t in enumerate(waiting):
            fixed_m = None if fixed_mode is None else int(fixed_mode[t])
            sharing = len(waiting) - k
            choice = _choose(allowed[t], free, running, concurrency, cores[t], dur[t], count[t], fixed_m, sharing)
            if choice is None:
                still.append(t)
                continue
            q, m = choice
            proc[t], mode[t], start[t], end[t] = q, m, now, now + dur[t][m]
            free[q] -= cores[t][m]
            running[q] += 1
            placed += 1
            heapq.heappush(active, (end[t], t))
            for v in succs[t]:
                left[v] -= 1
                if not left[v]:  # every predecessor placed: its data-ready time is known
                    b = bound_to[v]
                    ready = max(end[u] + (d if b >= 0 and proc[u] != b else 0) for u, d in preds[v])
                    heapq.heappush(pending, (ready, v))
        waiting = still
        nxt = min([*(active[:1] and [active[0][0]]), *(pending[:1] and [pending[0][0]])], default=None)
        if nxt is None:
            if placed < n:
                t = waiting[0] if waiting else next(t for t in range(n) if proc[t] < 0)
                raise ValueError(f"list_moldable: {problem.task_label(t)} can never start (a cycle, or no room)")
            break
        now = max(now, nxt)
    schedule = Schedule(processor=proc, start=start, mode=mode)
    validate(problem, schedule)
    value = schedule.makespan(problem)
    bound = moldable_bound(problem)
    status = "optimal" if value <= bound else "feasible"
    return Result(schedule, status, value, bound, time.perf_counter() - t0, "list_moldable", objective)


def _choose(allowed, free, running, concurrency, cores, dur, count, fixed_m, sharing) -> tuple[int, int] | None:
    """Processor and mode for a task starting now, or None when it must wait. A fixed mode starts
    where its cores are free; otherwise the fastest mode within ``free // sharing`` cores (at least
    one; else within all free cores), on the processor where it ends first."""
    best = None
    for q in allowed:
        if concurrency is not None and running[q] >= concurrency:
            continue
        if fixed_m is not None:
            options = [fixed_m] if cores[fixed_m] <= free[q] else []
        else:
            cap = max(1, free[q] // sharing)
            options = [m for m in range(count) if cores[m] <= min(cap, free[q])]
            options = options or [m for m in range(count) if cores[m] <= free[q]]
        for m in options:
            key = (dur[m], cores[m], q, m)
            if best is None or key < best:
                best = key
    return None if best is None else (best[2], best[3])
