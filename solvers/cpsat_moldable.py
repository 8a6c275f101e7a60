"""CP-SAT for moldable tasks (see `solvers.moldable`): one optional interval per task, mode and
processor, exactly one present per task, a cumulative constraint per processor with each mode's
cores as demand, precedences with their (known) delays, and the makespan bounded below by
`solvers.moldable.moldable_bound`. Seeded with a hint (by default the best of the moldable list
schedules) and never worse than it.

>>> from solvers import Problem
>>> p = Problem.moldable([[(1, 8), (2, 5), (4, 4)]] * 3, width=[4])
>>> r = cpsat_moldable(p, time_limit=5)
>>> r.objective, r.status
(8, 'optimal')
"""

from __future__ import annotations

import time

import numpy as np

from solvers.cpsat import cp_model, solve_interruptibly
from solvers.moldable import ALLOTMENTS, _check, _fits, list_moldable, moldable_bound
from solvers.problem import Problem, Result, Schedule
from solvers.validate import validate, violations


def best_heuristic(problem: Problem, time_limit: float | None = None) -> Result:
    """The shortest of the moldable list schedules: every allotment rule of `ALLOTMENTS` and the
    modes chosen at start."""
    results = [list_moldable(problem, allotment=rule, time_limit=time_limit) for rule in ALLOTMENTS]
    results.append(list_moldable(problem, time_limit=time_limit))
    found = [r for r in results if r.schedule is not None]
    return min(found, key=lambda r: r.objective) if found else results[-1]


def cpsat_moldable(
    problem: Problem,
    /,
    *,
    objective: str = "makespan",
    time_limit: float = 10.0,
    workers: int = 2,
    hint: Schedule | None = None,
) -> Result:
    """Schedule ``problem`` (moldable tasks) with CP-SAT within ``time_limit`` seconds.

    ``hint`` seeds the search (the best moldable list schedule when None); a valid hint is returned
    when CP-SAT finds nothing better. The bound is CP-SAT's or `moldable_bound`, whichever is larger.
    """
    t0 = time.perf_counter()
    if objective != "makespan":
        raise ValueError(f"moldable problems support the makespan objective only, got {objective!r}")
    _check(problem)
    if hint is None:
        hint = best_heuristic(problem, time_limit=time_limit / 4).schedule
    if hint is not None and violations(problem, hint, limit=1):
        hint = None
    hint_value = hint.makespan(problem) if hint is not None else None
    n, P = problem.num_tasks, problem.num_processors
    fits = _fits(problem)
    bound = moldable_bound(problem)
    cores, dur = problem.mode_cores.tolist(), problem.mode_duration.tolist()
    width = problem.width.tolist()
    horizon = hint_value if hint_value is not None else int(np.where(fits, problem.mode_duration, 0).max(axis=1).sum())
    horizon += int(problem.delay.sum())
    m = cp_model.CpModel()
    start = [m.NewIntVar(0, horizon, f"s{t}") for t in range(n)]
    end = [m.NewIntVar(0, horizon, f"e{t}") for t in range(n)]
    choice: list[list[tuple[int, int, object]]] = []  # per task: (mode, processor, presence)
    per_proc: list[tuple[list, list]] = [([], []) for _ in range(P)]
    for t in range(n):
        opts = []
        for k in range(int(problem.mode_count[t])):
            if not fits[t, k]:
                continue
            for q in np.flatnonzero(problem.allowed[t]).tolist():
                if cores[t][k] > width[q]:
                    continue
                x = m.NewBoolVar(f"x{t}_{k}_{q}")
                iv = m.NewOptionalIntervalVar(start[t], dur[t][k], end[t], x, f"i{t}_{k}_{q}")
                per_proc[q][0].append(iv)
                per_proc[q][1].append(cores[t][k])
                opts.append((k, q, x))
        m.AddExactlyOne(x for _, _, x in opts)
        choice.append(opts)
    for q, (ivs, demand) in enumerate(per_proc):
        if ivs:
            m.AddCumulative(ivs, demand, width[q])
    fixed = problem.fixed_processor()
    for (u, v), d in zip(problem.edges.tolist(), problem.delay.tolist(), strict=True):
        paid = d if fixed[u] >= 0 and fixed[v] >= 0 and fixed[u] != fixed[v] else 0
        m.Add(start[v] >= end[u] + paid)
    span = m.NewIntVar(bound, max(bound, horizon), "makespan")
    m.AddMaxEquality(span, end)
    m.Minimize(span)
    if hint is not None:
        for t in range(n):
            m.AddHint(start[t], int(hint.start[t]))
            for k, q, x in choice[t]:
                m.AddHint(x, int(k == hint.mode[t] and q == hint.processor[t]))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit - (time.perf_counter() - t0))
    solver.parameters.num_workers = int(workers)
    code, interrupted = solve_interruptibly(solver, m, None)
    info: dict = {"cp_status": solver.status_name(code), "source": "cpsat"}
    if interrupted:
        info["interrupted"] = True
    schedule, value = None, None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        proc, mode = [0] * n, [0] * n
        for t in range(n):
            k, q, _ = next(o for o in choice[t] if solver.Value(o[2]))
            proc[t], mode[t] = q, k
        schedule = Schedule(processor=proc, start=[solver.Value(s) for s in start], mode=mode)
        validate(problem, schedule)
        value = schedule.makespan(problem)
    if hint is not None and (value is None or hint_value < value):
        schedule, value, info["source"] = hint, hint_value, "hint"
    if code == cp_model.OPTIMAL:
        bound = max(bound, int(solver.ObjectiveValue()))
    elif code in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        bound = max(bound, int(np.ceil(solver.BestObjectiveBound() - 1e-6)))
    if value is None:
        status = "infeasible" if code == cp_model.INFEASIBLE else "unknown"
        return Result(None, status, None, bound, time.perf_counter() - t0, "cpsat_moldable", objective, info)
    bound = min(bound, value)
    status = "optimal" if bound >= value else "feasible"
    return Result(schedule, status, value, bound, time.perf_counter() - t0, "cpsat_moldable", objective, info)
