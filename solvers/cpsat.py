"""CP-SAT model of a `Problem`: exact on small instances, anytime (from a hint) on larger ones.

The model, one piece per constraint of the problem:

- a start variable per task (its domain cut by the heads and tails of `solvers.heads_tails`), and a
  presence literal per (task, processor) where a task may use several processors, exactly one of
  them true; the tasks of an affinity group share their literals;
- ``NoOverlap`` per processor over the (optional) intervals of tasks with a positive duration;
- precedence ``start[v] >= end[u]`` for every edge, plus the delay where ``u`` and ``v`` are on
  different processors (unconditional for fixed pairs, enforced by the presence literals otherwise);
- memory as a reservoir per processor: the allocation of a task at its start, the release at its
  end, active where the task runs (equal times count together, as in `solvers.validate`);
- the objective: the makespan, or the largest per-processor span (last end minus first start),
  bounded below by `solvers.lower_bound` and, for the makespan, by ``end + tail`` of every task.

Example
-------
>>> from solvers import Problem
>>> from solvers.cpsat import cpsat
>>> p = Problem(duration=[3, 2, 2], num_processors=2, edges=[[0, 1]], delay=[2])
>>> r = cpsat(p, time_limit=5)
>>> r.status, r.objective
('optimal', 5)
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
from ortools.sat.python import cp_model

from solvers.bounds import heads_tails, lower_bound
from solvers.heuristics import best
from solvers.listsched import effective_allowed, infeasible_reason
from solvers.problem import OBJECTIVES, Problem, Result, Schedule
from solvers.validate import validate, violations

_STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.UNKNOWN: "unknown",
}


def cpsat(
    problem: Problem,
    /,
    *,
    objective: str = "makespan",
    time_limit: float = 10.0,
    workers: int = 2,
    hint: Schedule | None = None,
    symmetry: Sequence[Sequence[int]] | None = None,
    progress: Callable[[dict], None] | None = None,
    log: bool = False,
    keep_processor: np.ndarray | None = None,
    known_bound: int = 0,
    order_pairs: np.ndarray | None = None,
    expand_memory: bool | None = None,
    seed: int = 0,
    at_most: int | None = None,
) -> Result:
    """Solve ``problem`` with CP-SAT within ``time_limit`` seconds.

    Parameters
    ----------
    problem : Problem
    objective : {"makespan", "span"}
    time_limit : float
        Wall-clock limit in seconds.
    workers : int
        CP-SAT search workers.
    hint : Schedule, optional
        Starting solution (``AddHint`` on starts and presences). When it validates, the result is
        never worse than it: it is returned if CP-SAT finds nothing better in time. Without one (and
        without ``keep_processor`` or ``order_pairs``) `solvers.heuristics.best`'s schedule is the hint.
    symmetry : list of task chains, optional
        Tasks that are interchangeable, in the order they must start (``start[a] <= start[b]`` for
        consecutive ones). The caller vouches that this removes only symmetric solutions.
    known_bound : int
        A lower bound on the objective that the caller has proven (say, from the structure of the
        problem); it prunes the search and counts in the reported bound.
    progress : callable, optional
        Called with ``dict(incumbent=, bound=, gap=, elapsed=)`` on every improving solution.
    log : bool
        Print CP-SAT's search log.
    keep_processor : (n,) int, optional
        Processor to keep for each task, -1 where free (used by `solvers.lns`).
    order_pairs : (k, 2) int, optional
        Pairs ``(a, b)``: ``b`` starts after ``a`` ends (used by `solvers.lns`).
    expand_memory : bool, optional
        Whether CP-SAT's presolve expands the memory reservoirs into a Boolean per pair of memory
        events on a processor. By default it does up to `RESERVOIR_EXPANSION_LIMIT` pairs.
    seed : int
        CP-SAT's random seed, as `seed_solver` sets it (0: CP-SAT's own default). Another seed
        searches differently from the same start.
    at_most : int, optional
        Search only schedules whose objective is at most this. Status ``infeasible`` then proves that
        none exists (the returned bound is ``at_most + 1``): a way to show how far a lower bound is
        from the optimum. A hint above it is dropped, and none is made from the heuristics.

    With ``symmetry``, ``keep_processor`` or ``order_pairs`` the status and the bound refer to the
    problem so restricted.

    Returns
    -------
    Result
        The best schedule found (validated), status ``optimal``, ``feasible``, ``infeasible`` or
        ``unknown``, and the best proven bound: CP-SAT's or `solvers.lower_bound`, whichever is
        larger. ``info`` holds CP-SAT's status name, its wall time and where the schedule came from
        (``cpsat`` or ``hint``).

    Examples
    --------
    Two allocations that are never freed do not fit one processor of capacity 5:

    >>> from solvers import Problem
    >>> p = Problem(duration=[2, 2], num_processors=1, mem_delta=[3, 3], capacity=[5])
    >>> cpsat(p, time_limit=5).status
    'infeasible'
    """
    t0 = time.perf_counter()
    problem.require_rigid("cpsat")
    problem.require_uniform("cpsat")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    cpsat_seed(seed)  # a bad seed is refused before the model is built
    bound = max(lower_bound(problem, objective), int(known_bound))
    why = infeasible_reason(problem, effective_allowed(problem))
    if why:
        return Result(None, "infeasible", None, bound, time.perf_counter() - t0, "cpsat", objective, {"reason": why})
    if at_most is not None and at_most < bound:
        why = f"the lower bound {bound} is above {at_most}"
        return Result(None, "infeasible", None, bound, time.perf_counter() - t0, "cpsat", objective, {"reason": why})
    if hint is None and keep_processor is None and order_pairs is None and at_most is None:
        # start from the best list heuristic (within a quarter of the limit): never worse than it
        hint = best(problem, objective=objective, time_limit=max(0.01, time_limit / 4)).schedule
    hint_ok, hint_value, hint_note = _check_hint(problem, hint, objective)
    if at_most is not None and hint_ok and hint_value > at_most:  # not a schedule of what is searched
        hint, hint_ok, hint_value, hint_note = None, False, None, f"dropped: its value {hint_value} is above {at_most}"
    why = decline_reason(problem, time_limit)
    if why:  # refuse early: the search would not end in time
        info = {"reason": why, "not_run": True, "source": "hint" if hint_ok else "none"}
        if hint_ok:
            status = "optimal" if bound >= hint_value else "feasible"
            return Result(
                hint, status, hint_value, min(bound, hint_value), time.perf_counter() - t0, "cpsat", objective, info
            )
        return Result(None, "unknown", None, bound, time.perf_counter() - t0, "cpsat", objective, info)
    horizon = _horizon(problem, objective, hint if hint_ok else None)
    if bound > horizon and not hint_ok:  # a schedule with its gaps closed ends by the horizon: none exists
        why = f"the lower bound {bound} is past {horizon}, where a schedule with its gaps closed ends"
        return Result(None, "infeasible", None, bound, time.perf_counter() - t0, "cpsat", objective, {"reason": why})
    ceiling = hint_value if hint_value is not None else at_most  # a hint above at_most was dropped
    model = _Model(problem, objective, bound, horizon, ceiling, keep_processor)
    model.add_orders(symmetry, order_pairs)
    if hint is not None:
        model.add_hint(hint, hint_value)
    solver = cp_model.CpSolver()
    # the limit counts from the call: what building the model took is not given again to the search
    solver.parameters.max_time_in_seconds = max(0.0, float(time_limit) - (time.perf_counter() - t0))
    solver.parameters.num_workers = int(workers)
    solver.parameters.log_search_progress = bool(log)
    seed_solver(solver, seed)
    limit_probing(solver, problem)
    if expand_memory is False or (expand_memory is None and _reservoir_pairs(problem) > RESERVOIR_EXPANSION_LIMIT):
        # expanding the memory reservoirs "using precedences" makes a Boolean per pair of memory
        # events on a processor: on 4,608 tasks over 16 ranks, 440,832 Booleans and ~900k constraints,
        # whose presolve outlasted a 20 s limit by 25% and then stopped with UNKNOWN before any search
        solver.parameters.expand_reservoir_constraints = False
    callback = _Progress(progress, t0) if progress is not None else None
    code, interrupted = solve_interruptibly(solver, model.model, callback)
    if code == cp_model.MODEL_INVALID:
        raise RuntimeError(f"cpsat: invalid model: {model.model.validate()}")
    info = {"cp_status": solver.status_name(code), "cp_wall_time": solver.wall_time, "source": "cpsat"}
    if interrupted:
        info["interrupted"] = True
    if hint_note:
        info["hint"] = hint_note

    schedule, value = None, None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        schedule = model.schedule(solver)
        validate(problem, schedule)
        value = schedule.objective(problem, objective)
    if hint_ok and (value is None or hint_value < value):
        schedule, value, info["source"] = hint, hint_value, "hint"
    if code == cp_model.OPTIMAL:
        bound = max(bound, int(solver.objective_value))
    elif code in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        bound = max(bound, math.ceil(solver.best_objective_bound - 1e-6))
    if value is None:
        status = "infeasible" if code == cp_model.INFEASIBLE else "unknown"
        if code == cp_model.INFEASIBLE and at_most is not None:  # proven: every schedule is longer
            bound = max(bound, int(at_most) + 1)
    else:
        bound = min(bound, value)
        status = "optimal" if bound >= value else "feasible"
    return Result(schedule, status, value, bound, time.perf_counter() - t0, "cpsat", objective, info)


def reoptimize_window(
    problem: Problem,
    schedule: Schedule,
    free: np.ndarray,
    time_limit: float,
    workers: int = 1,
    objective: str = "makespan",
    processors: np.ndarray | None = None,
    work: float | None = None,
    seed: int = 0,
) -> Schedule | None:
    """Re-place the ``free`` tasks of a valid ``schedule`` with every other task left where it is
    (processor and start): a model of the window only, whatever the size of the problem (used by
    `solvers.lns`). With ``processors`` (a mask over the processors), a free task may move only to
    the processors it marks, beside its own. Heterogeneous processors and links are modelled too
    (unlike `cpsat`): a free task lasts its duration on the processor chosen, and a transfer its
    delay times the link's factor.

    The free tasks stay within the time span they occupy now, [first start, last end), so the
    schedule returned is valid and ends no later; they may change order, and processor unless that
    would move memory: a task that allocates or releases memory, and an affinity group with such a
    task or with a task left in place, keeps its processor, so every processor's memory after the
    window is what it was. Memory within the window is a reservoir per processor that starts at the
    level the tasks before the window left and counts the events of the tasks left in place there.

    The model holds the free tasks and the intervals of the others that overlap the span. It
    minimises the ``objective`` of the whole schedule (``makespan``: the free tasks' last end;
    ``span``: the largest per-processor span, the other tasks' first starts and last ends counted as
    they are), then the sum of the free tasks' ends, which makes room that re-timing the whole
    schedule (`solvers.time_orders`) can use. None when CP-SAT finds nothing in ``time_limit`` (the
    current placement is always a solution). ``work``, if given, also stops CP-SAT after that much
    of its deterministic time (a count of its own work, in about seconds): with one worker the result
    is then the same on any machine that is not so slow that ``time_limit`` ends it first. ``seed``:
    CP-SAT's random seed (`seed_solver`).

    >>> from solvers import Problem, Schedule
    >>> p = Problem(duration=[2, 2, 2], num_processors=2)
    >>> s = Schedule(processor=[0, 0, 0], start=[0, 2, 4])
    >>> reoptimize_window(p, s, np.array([False, True, True]), 5).start.tolist()
    [0, 2, 2]
    """
    if problem.is_moldable:
        raise ValueError("reoptimize_window: rigid tasks only")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    W = np.flatnonzero(free)
    if not len(W):
        return schedule
    mem = problem.mem_delta
    start, proc = schedule.start, schedule.processor
    end = schedule.end(problem)
    lo, hi = int(start[W].min()), int(end[W].max())
    allowed = effective_allowed(problem).copy()
    if processors is not None:
        allowed &= np.asarray(processors, dtype=bool)[None, :]
        allowed[W, proc[W]] = True
    anchored = ~free | (mem != 0)  # left in place, or moving memory: stays on its processor
    for t in W.tolist():
        if problem.group[t] >= 0:
            members = np.flatnonzero(problem.group == problem.group[t])
            held = members[anchored[members]]
            if len(held):
                allowed[t] = False
                allowed[t, proc[held[0]]] = True
        elif anchored[t]:
            allowed[t] = False
            allowed[t, proc[t]] = True
    # each free task's duration on each processor it may use (on unequal processors it depends on
    # the processor: its end is then a variable, tied to its start by the processor chosen)
    took = {t: {q: int(x) for q, x in zip(*_durations(problem, t, allowed[t]), strict=True)} for t in W.tolist()}
    model = cp_model.CpModel()
    s = {t: model.new_int_var(lo, hi - min(took[t].values()), f"s{t}") for t in W.tolist()}
    on: dict[tuple[int, int], object] = {}
    unit_lits: dict[int, dict[int, object]] = {}  # per task, or per affinity group: its presence literals
    first_of: dict[int, int] = {}  # the task that created them
    for t in W.tolist():
        procs = np.flatnonzero(allowed[t]).tolist()
        unit = -1 - int(problem.group[t]) if problem.group[t] >= 0 else t
        if len(procs) == 1:
            on.update({(t, q): q == procs[0] for q in range(problem.num_processors)})
            continue
        if unit not in unit_lits:
            unit_lits[unit] = {q: model.new_bool_var(f"x{t}_{q}") for q in procs}
            first_of[unit] = t
            model.add_exactly_one(unit_lits[unit].values())
        on.update({(t, q): unit_lits[unit].get(q, False) for q in range(problem.num_processors)})
    e: dict[int, object] = {}  # each free task's end
    varying = []  # the free tasks whose end is a variable of its own
    for t in W.tolist():
        lengths = set(took[t].values())
        if len(lengths) == 1:
            e[t] = s[t] + lengths.pop()
            continue
        varying.append(t)
        e[t] = model.new_int_var(lo, hi, f"e{t}")
        for q, d in took[t].items():
            if on[(t, q)] is not False:  # never True here: the task has a choice
                model.add(e[t] == s[t] + d).only_enforce_if(on[(t, q)])
    per: list[list] = [[] for _ in range(problem.num_processors)]
    for t in W.tolist():
        for q, d in took[t].items():
            lit = on[(t, q)]
            if d == 0 or lit is False:
                continue
            if lit is True:
                per[q].append(model.new_fixed_size_interval_var(s[t], d, f"i{t}"))
            else:
                per[q].append(model.new_optional_fixed_size_interval_var(s[t], d, lit, f"i{t}_{q}"))
    busy = np.flatnonzero(~free & (end > start) & (end > lo) & (start < hi))
    for t in busy.tolist():
        per[proc[t]].append(model.new_fixed_size_interval_var(int(start[t]), int(end[t] - start[t]), f"k{t}"))
    for intervals in per:
        if len(intervals) > 1:
            model.add_no_overlap(intervals)
    _window_edges(problem, model, s, e, on, allowed, free, proc, start, end)
    _window_memory(problem, model, s, e, free, proc, start, end, lo, hi)
    ends = [e[t] for t in W.tolist()]
    if objective == "span":
        worst = _window_span(problem, model, s, e, on, allowed, free, proc, start, end, lo, hi)
    else:
        worst = model.new_int_var(lo, hi, "last")
        for last in ends:
            model.add(worst >= last)
    model.minimize(len(W) * (hi - lo + 1) * worst + sum(ends))
    for t in W.tolist():
        model.add_hint(s[t], int(start[t]))
    for t in varying:
        model.add_hint(e[t], int(end[t]))
    for unit, lits in unit_lits.items():
        for q, lit in lits.items():
            model.add_hint(lit, int(proc[first_of[unit]]) == q)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, float(time_limit))
    if work is not None:
        solver.parameters.max_deterministic_time = float(work)
    solver.parameters.num_workers = workers
    seed_solver(solver, seed)
    if unit_lits:
        # presolve's probing of the processor choices took 0.16 s on a window of 50 tasks free on 32
        # processors, longer than a window step's 0.1 s (`solvers.lns`): 19 of 20 such windows of a
        # 5,000-task DAG came back UNKNOWN with it, none without. Windows without choices
        # (pipelines, every task on its own rank) keep it.
        solver.parameters.cp_model_probing_level = 0
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    new_start, new_proc = start.copy(), proc.copy()
    for t in W.tolist():
        new_start[t] = solver.value(s[t])
        procs = np.flatnonzero(allowed[t]).tolist()
        new_proc[t] = next(
            q for q in procs if on[(t, q)] is True or (on[(t, q)] is not False and solver.value(on[(t, q)]))
        )
    return Schedule(processor=new_proc, start=new_start)


def reoptimize_tails(
    problem: Problem,
    schedule: Schedule,
    cut: np.ndarray,
    time_limit: float,
    *,
    objective: str = "makespan",
    bound: int = 0,
    workers: int = 2,
) -> Schedule | None:
    """Re-solve every processor's tail: the tasks of processor ``q`` that start at or after
    ``cut[q]`` in a valid ``schedule`` may change order and time (not processor), every other task
    stays where it is. The model holds the free tasks only: each starts no earlier than the tasks
    left on its processor end, after its predecessors (a fixed one's end plus its paid delay), and
    ends early enough for the fixed tasks that follow it elsewhere. Memory is a reservoir per
    processor from the level the tasks left in place reach. It minimises the ``objective`` alone
    (with ``bound``, a proven lower bound of it, given to CP-SAT), which is what lets CP-SAT move a
    window this large: on a 3,072-task pipeline whose ranks' tails from their last forward on (920
    tasks) were free, it took the span 0.5% down and proved that optimal for the window in 14 s,
    where `reoptimize_window` (whose objective adds the sum of the ends) found nothing in 60 s.

    Returns the new schedule (never worse: the given one is the hint and a solution), or None when
    CP-SAT found nothing in ``time_limit`` seconds.

    >>> p = Problem(duration=[2, 2, 2], num_processors=1, edges=[[1, 2]])
    >>> s = Schedule(processor=[0, 0, 0], start=[0, 4, 6])
    >>> reoptimize_tails(p, s, np.array([3]), 5).start.tolist()
    [0, 2, 4]
    """
    return solve_tails(problem, schedule, cut, time_limit, objective=objective, bound=bound, workers=workers)[0]


def solve_tails(
    problem: Problem,
    schedule: Schedule,
    cut: np.ndarray,
    time_limit: float,
    *,
    objective: str = "makespan",
    bound: int = 0,
    workers: int = 2,
    stats: dict | None = None,
    expand_memory: bool | None = None,
    fixed_search: bool = False,
    hint: bool = True,
    parameters: dict | None = None,
    log: Callable[[str], None] | None = None,
    seed: int = 0,
) -> tuple[Schedule | None, bool]:
    """`reoptimize_tails`, and whether CP-SAT proved its schedule optimal for the window (every task
    before the cuts where it is): True also where nothing was free. A ``stats`` dict given hears the
    window's own lower bound (``bound``: no schedule that keeps every task before the cuts where it
    is does better; at least ``bound``) and the number of ``free`` tasks.

    ``expand_memory`` says whether CP-SAT's presolve expands each memory reservoir into a Boolean per
    pair of its events; by default it does for windows of at most `TAIL_EXPANSION_TASKS` free tasks.
    ``fixed_search`` runs CP-SAT's fixed search alone, on one worker (``workers`` is then ignored): it
    branches as the model's decision strategy says, and this model gives none, so on the free tasks'
    starts in their order, least value first; no LP, no neighbourhoods (the portfolio's `fixed`
    subsolver). On some windows it reaches the window's own bound at once where the default portfolio
    walks slowly (see `solvers.lns.improve_tails`'s ``fixed_first``).

    ``hint=False`` keeps ``schedule``'s free tasks out of CP-SAT's hint: its search then starts on its
    own and may find nothing, or a longer schedule than ``schedule``, which the caller must weigh. In
    wide windows that search found shorter schedules than the hinted one, whose neighbourhoods stay
    around the hint (`solvers.lns.improve_tails`' ``unhinted``).

    ``seed`` is CP-SAT's random seed (`seed_solver`): from the same window and hint another seed
    often ends on another schedule (docs/measurements.md, session 64).

    For experiments (`benchmarks/tail_replay.py`): ``parameters`` sets more of CP-SAT's parameters
    by name (a list is appended to a repeated one, e.g. ``{"ignore_subsolvers": ["ls"]}``), and
    ``log`` hears CP-SAT's search log, line by line."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    start, proc = schedule.start, schedule.processor
    end = schedule.end(problem)
    duration = end - start
    cut = np.asarray(cut, dtype=np.int64)
    if cut.shape != (problem.num_processors,):
        raise ValueError(f"cut: expected one time per processor ({problem.num_processors}), got shape {cut.shape}")
    free = start >= cut[proc]
    if stats is not None:
        stats.update(free=int(free.sum()), bound=int(bound))
    if not free.any():
        if stats is not None:
            stats["bound"] = max(int(bound), int(schedule.objective(problem, objective)))
        return schedule, True
    P = problem.num_processors
    kept_end = np.zeros(P, dtype=np.int64)  # where the tasks left on each processor end
    np.maximum.at(kept_end, proc[~free], end[~free])
    hi = int(end.max() + duration[free].sum())
    model = cp_model.CpModel()
    W = np.flatnonzero(free).tolist()
    s = {t: model.new_int_var(int(kept_end[proc[t]]), hi, f"s{t}") for t in W}
    e = {t: s[t] + int(duration[t]) for t in W}
    for q in range(P):
        mine = [model.new_fixed_size_interval_var(s[t], int(duration[t]), f"i{t}") for t in W if proc[t] == q]
        if len(mine) > 1:
            model.add_no_overlap(mine)
    delay = problem.edge_delays(proc)
    for (u, v), d in zip(problem.edges.tolist(), delay.tolist(), strict=True):
        if free[v]:
            model.add(s[v] >= (e[u] if free[u] else int(end[u])) + int(d))
        elif free[u]:
            model.add(e[u] + int(d) <= int(start[v]))
    # every event of a task left in place is at or before its processor's kept end: all in the level there
    _window_memory(problem, model, s, e, free, proc, start, end, kept_end, kept_end)
    worst = model.new_int_var(0, hi, "worst")
    for q in range(P):
        on_q = proc == q
        if not on_q.any():
            continue
        if objective == "span" and (on_q & ~free).any():
            first = int(start[on_q & ~free].min())
        elif objective == "span":  # every task of this processor is free: its first start moves too
            first = model.new_int_var(0, hi, f"first{q}")
            model.add_min_equality(first, [s[t] for t in W if proc[t] == q])
        else:
            first = 0
        if (on_q & ~free).any():
            model.add(worst >= int(end[on_q & ~free].max()) - first)
        for t in W:
            if proc[t] == q:
                model.add(worst >= e[t] - first)
    if bound:
        model.add(worst >= int(bound))
    model.minimize(worst)
    if hint:
        for t in W:
            model.add_hint(s[t], int(start[t]))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, float(time_limit))
    solver.parameters.num_workers = 1 if fixed_search else workers
    if fixed_search:
        solver.parameters.search_branching = type(solver.parameters.search_branching).FIXED_SEARCH
    if expand_memory is None:
        expand_memory = len(W) <= TAIL_EXPANSION_TASKS
    solver.parameters.expand_reservoir_constraints = bool(expand_memory)
    seed_solver(solver, seed)
    set_parameters(solver.parameters, parameters or {})
    if log is not None:
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = log
    status = solver.solve(model)
    if stats is not None and status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        stats["bound"] = max(int(bound), math.ceil(solver.best_objective_bound - 1e-6))
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, False
    new_start = start.copy()
    for t in W:
        new_start[t] = solver.value(s[t])
    return Schedule(processor=proc.copy(), start=new_start), status == cp_model.OPTIMAL


def _durations(problem: Problem, t: int, allowed: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The processors task ``t`` may use and its duration on each."""
    procs = np.flatnonzero(allowed)
    if problem.duration_on is None:
        return procs.tolist(), np.full(len(procs), problem.duration[t])
    return procs.tolist(), problem.duration_on[t, procs]


def _window_edges(problem: Problem, model, s: dict, e: dict, on: dict, allowed, free, proc, start, end) -> None:
    """`reoptimize_window`'s precedences: between free tasks, and from (to) a task left in place, whose
    end (start) is a constant; the transfer delay is paid unless both ends share a processor (times
    the link's factor, with ``link``)."""
    u_all, v_all, d_all = problem.edges[:, 0], problem.edges[:, 1], problem.delay
    touch = np.flatnonzero(free[u_all] | free[v_all])
    if problem.link is not None:
        _window_links(problem, model, s, e, on, allowed, free, proc, start, end, touch)
        return
    for k in touch.tolist():
        u, v, d = int(u_all[k]), int(v_all[k]), int(d_all[k])
        same_group = problem.group[u] >= 0 and problem.group[u] == problem.group[v]
        if free[u] and free[v]:
            model.add(s[v] >= e[u])
            if d and not same_group:
                for q in np.flatnonzero(allowed[u]).tolist():  # u on q, v elsewhere: the transfer is paid
                    a, b = on[(u, q)], on[(v, q)]
                    if a is False or b is True:
                        continue
                    lits = [x for x in (a, _negate(b)) if x is not True]
                    model.add(s[v] >= e[u] + d).only_enforce_if(lits)
        elif free[v]:  # u in place: v waits for its end, plus the transfer unless on u's processor
            model.add(s[v] >= int(end[u]))
            if d and not same_group:
                b = on[(v, int(proc[u]))]
                if b is not True:
                    lit = _negate(b)
                    c = model.add(s[v] >= int(end[u]) + d)
                    if lit is not True:
                        c.only_enforce_if(lit)
        else:  # v in place: u ends in time for it
            model.add(e[u] <= int(start[v]))
            if d and not same_group:
                a = on[(u, int(proc[v]))]
                if a is not True:
                    lit = _negate(a)
                    c = model.add(e[u] + d <= int(start[v]))
                    if lit is not True:
                        c.only_enforce_if(lit)


def _window_links(problem: Problem, model, s: dict, e: dict, on: dict, allowed, free, proc, start, end, touch) -> None:
    """`_window_edges` with a link factor per pair of processors: the transfer of an edge from ``a``
    to ``b`` takes its delay times ``link[a, b]``, so each pair of processors the two ends may use
    has its own constraint."""
    link = problem.link_matrix()
    u_all, v_all, d_all = problem.edges[:, 0], problem.edges[:, 1], problem.delay
    for k in touch.tolist():
        u, v, d = int(u_all[k]), int(v_all[k]), int(d_all[k])
        same_group = problem.group[u] >= 0 and problem.group[u] == problem.group[v]
        ready = e[u] if free[u] else int(end[u])
        if not free[v]:
            model.add(ready <= int(start[v]))
        else:
            model.add(s[v] >= ready)
        if not d or same_group:
            continue
        for a in np.flatnonzero(allowed[u]).tolist() if free[u] else [int(proc[u])]:
            for b in np.flatnonzero(allowed[v]).tolist() if free[v] else [int(proc[v])]:
                lits = [x for x in (on[(u, a)] if free[u] else True, on[(v, b)] if free[v] else True) if x is not True]
                if a == b or link[a, b] == 0 or any(x is False for x in lits):
                    continue
                later = int(start[v]) if not free[v] else s[v]
                c = model.add(later >= ready + d * int(link[a, b]))
                if lits:
                    c.only_enforce_if(lits)


def _window_memory(
    problem: Problem, model, s: dict, e: dict, free, proc, start, end, lo: int | np.ndarray, hi: int | np.ndarray
) -> None:
    """`reoptimize_window`'s memory (and `reoptimize_tails'`, with ``lo`` and ``hi`` per processor):
    per processor where the window's tasks change memory (they keep their processor), a reservoir
    from the level the tasks before the window left, with the events of the tasks left in place
    within [lo, hi] at their times."""
    mem, cap = problem.mem_delta, problem.capacity
    movers = np.flatnonzero(free & (mem != 0))
    event = np.where(mem > 0, start, end)  # an allocation at the start, a release at the end
    los = np.broadcast_to(lo, (problem.num_processors,))
    his = np.broadcast_to(hi, (problem.num_processors,))
    for q in np.unique(proc[movers]).tolist():
        lo_q, hi_q = int(los[q]), int(his[q])
        mine = movers[proc[movers] == q].tolist()
        fixed = np.flatnonzero(~free & (proc == q) & (mem != 0))
        before = fixed[event[fixed] < lo_q]
        inside = fixed[(event[fixed] >= lo_q) & (event[fixed] <= hi_q)]
        level = int(mem[before].sum())
        if level + int(np.clip(mem[inside], 0, None).sum()) + sum(max(int(mem[t]), 0) for t in mine) <= cap[q]:
            continue  # cannot overflow
        times = [s[t] if mem[t] > 0 else e[t] for t in mine] + event[inside].tolist() + [lo_q]
        changes = [int(mem[t]) for t in mine] + mem[inside].tolist() + [level]
        lowest = min(0, level + sum(min(c, 0) for c in changes[:-1]))
        model.add_reservoir_constraint(times, changes, lowest, int(cap[q]))


def _window_span(
    problem: Problem, model, s: dict, e: dict, on: dict, allowed, free, proc, start, end, lo: int, hi: int
):
    """The largest per-processor span of the whole schedule as `reoptimize_window` places the free
    tasks (a variable): each processor's first start and last end over the tasks left in place there
    (constants) and the free tasks placed there."""
    horizon = int(max(end.max(), hi))
    worst = model.new_int_var(-horizon, horizon, "span")
    W = np.flatnonzero(free).tolist()
    for q in range(problem.num_processors):
        kept = np.flatnonzero(~free & (proc == q))
        mine = [t for t in W if allowed[t, q]]
        if not mine:
            if len(kept):
                model.add(worst >= int(end[kept].max() - start[kept].min()))
            continue
        first = model.new_int_var(0, horizon, f"first{q}")
        last = model.new_int_var(0, horizon, f"last{q}")
        if len(kept):
            model.add(first <= int(start[kept].min()))
            model.add(last >= int(end[kept].max()))
        for t in mine:
            lit = on[(t, q)]
            bounds = [model.add(first <= s[t]), model.add(last >= e[t])]
            if lit is not True:
                for c in bounds:
                    c.only_enforce_if(lit)
        model.add(worst >= last - first)
    return worst


def set_parameters(message, parameters: dict) -> None:
    """Set CP-SAT's ``parameters`` by name on ``message`` (a ``SatParameters``): a list or tuple is
    appended to a repeated field, any other value set. Raises what protobuf raises for a name or
    value the message does not take (``AttributeError``, ``TypeError``, ``ValueError``).

    >>> s = cp_model.CpSolver()
    >>> set_parameters(s.parameters, {"max_presolve_iterations": 2, "extra_subsolvers": ["fixed"]})
    >>> s.parameters.max_presolve_iterations, list(s.parameters.extra_subsolvers)
    (2, ['fixed'])
    """
    for name, value in parameters.items():
        if isinstance(value, list | tuple):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)


def seed_solver(solver: cp_model.CpSolver, seed: int) -> None:
    """Set CP-SAT's random seed from ours: ``seed + 1``, so that seed 0 leaves CP-SAT's own default
    (1) and every call without a seed searches as before. ``ValueError`` for a seed outside 0 to
    `MAX_SEED`.

    >>> s = cp_model.CpSolver()
    >>> seed_solver(s, 0); s.parameters.random_seed
    1
    >>> seed_solver(s, 4); s.parameters.random_seed
    5
    """
    solver.parameters.random_seed = cpsat_seed(seed)


def cpsat_seed(seed: int) -> int:
    """CP-SAT's random seed for our ``seed`` (see `seed_solver`); ``ValueError`` outside 0 to `MAX_SEED`."""
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed: expected 0 to {MAX_SEED:,}, got {seed}")
    return int(seed) + 1


MAX_SEED = 2**31 - 2
"""The largest seed `seed_solver` takes: CP-SAT's ``random_seed`` is a 32-bit signed integer."""


def solve_interruptibly(solver: cp_model.CpSolver, model: cp_model.CpModel, callback) -> tuple[int, bool]:
    """Solve, stopping within a tenth of a second of Ctrl-C; the status and whether it was interrupted.

    The time limit is also watched from outside: CP-SAT checks its own limit only between steps, and
    its presolve of a large model can run minutes past it (seen: a 50 s limit on 98k tasks, still in
    presolve after 5 minutes). Past the limit plus `OVERRUN_GRACE` the search is stopped as for Ctrl-C,
    but not marked interrupted: the caller gets what CP-SAT had, as at a time limit.

    CP-SAT would catch SIGINT itself and return as if its time were up, so nobody could tell. Here
    the search runs in a worker thread while the main thread, where Python delivers Ctrl-C, waits on
    an event in tenths of a second; a `KeyboardInterrupt` there stops the search and the result is
    marked interrupted.
    Off the main thread (no signal reaches it) the solve runs directly. Either way CP-SAT's own
    SIGINT handler stays off: it is process-wide, and once it had run, a later Ctrl-C killed the
    process without a word instead of raising `KeyboardInterrupt`."""
    solver.parameters.catch_sigint_signal = False
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback), False
    out: dict = {}
    done = threading.Event()  # not Thread.join: a join cut by Ctrl-C can report a live thread as ended

    def run() -> None:
        try:
            out["code"] = solver.solve(model, callback)
        except BaseException as exc:  # handed to the caller's thread below
            out["error"] = exc
        finally:
            done.set()

    deadline = time.perf_counter() + solver.parameters.max_time_in_seconds + OVERRUN_GRACE
    threading.Thread(target=run, name="cp-sat", daemon=True).start()
    interrupted = overrun = False
    while not done.is_set():
        try:
            done.wait(0.1)
        except KeyboardInterrupt:
            interrupted = True
            solver.stop_search()
        if not overrun and time.perf_counter() > deadline:
            overrun = True
            solver.stop_search()
    if "error" in out:
        raise out["error"]
    return out["code"], interrupted


def limit_probing(solver: cp_model.CpSolver, problem: Problem) -> None:
    """Turn probing off where it would outlast the time limit: above `PROBING_PAIRS_LIMIT` pairs of
    memory events (`_reservoir_pairs`). Presolve's probing of the Booleans that the memory reservoirs
    expand into neither watches the time limit nor stops when asked, and its own deterministic limit
    did not hold it either: on the ZB-V row re-cut to p=8, m=16 (768 tasks, 73,728 pairs) it ran 19.7 s
    of a 2.4 s limit. Measured with a 2 s limit on the project's 2-core machine: 9,216 pairs 1.8 s,
    20,736 2.5 s, 41,472 15.1 s."""
    if _reservoir_pairs(problem) > PROBING_PAIRS_LIMIT:
        solver.parameters.cp_model_probing_level = 0


PROBING_PAIRS_LIMIT = 20_000
"""Pairs of memory events above which CP-SAT runs without probing (see `limit_probing`)."""

OVERRUN_GRACE = 1.0
"""Seconds CP-SAT may run past its time limit before `solve_interruptibly` stops it from outside."""

BUILD_ITEMS_PER_SECOND = 32_000
"""Tasks plus edges this module turns into a CP-SAT model per second, measured on the project's 2-core
machine (pipeline graphs of 64 stages): 24,512 items in 0.58 s, 98,048 in 2.26 s, 392,192 in 10.9 s
(the rate falls with size; this is below the slowest)."""

BUILD_CHOICES_PER_SECOND = 34_000
"""Further processors a task may run on (beyond its first) that this module models per second: each is
an optional interval, a Boolean and the transfers it pays. Measured on the project's 2-core machine,
random DAGs of 1,000 and 5,000 tasks (two edges per task) on 4, 8 and 32 processors: the model of
5,000 tasks took 0.75-0.92 s on 4 processors and 4.6-4.9 s on 32, where tasks and edges alone
predicted 0.46 s; 1,000 tasks on 32 processors took 0.85-1.02 s."""

BUILD_SHARE = 0.75
"""CP-SAT is not run when building its model would take more than this share of the time limit (the
rest is too little to search); with a valid hint the hint is returned."""


MAX_SEARCH_TASKS = 16_000
"""CP-SAT is not run on more tasks than this: its search does not end near its time limit there, and
does not stop when asked (measured on the project's 2-core machine, ZB-V p=32 graphs with a 20 s limit:
12,288 tasks ended at 20.1 s; 24,576 and 49,152 were still searching minutes later, stop_search
included)."""


def decline_reason(problem: Problem, time_limit: float) -> str | None:
    """Why CP-SAT would not end within ``time_limit`` on ``problem`` (None: it would): too many tasks
    (`MAX_SEARCH_TASKS`), or a model that takes more than `BUILD_SHARE` of the limit to build."""
    if problem.num_tasks > MAX_SEARCH_TASKS:
        return (
            f"CP-SAT does not stop near its time limit on {problem.num_tasks} tasks (more than {MAX_SEARCH_TASKS:,}); "
            "the best template or list schedule stands"
        )
    build = build_seconds(problem)
    if build > BUILD_SHARE * time_limit:
        return (
            f"building the CP-SAT model of {problem.num_tasks} tasks would take about {build:.1f} s, more than "
            f"{BUILD_SHARE:.0%} of the {max(time_limit, 0):.1f} s limit"
        )
    return None


def build_seconds(problem: Problem) -> float:
    """About how long building the CP-SAT model of ``problem`` takes, in seconds: its tasks and edges
    at `BUILD_ITEMS_PER_SECOND`, and each further processor a task may run on at
    `BUILD_CHOICES_PER_SECOND`.

    >>> from solvers import Problem
    >>> round(build_seconds(Problem(duration=[1] * 32_000, num_processors=1)), 1)
    1.0
    >>> round(build_seconds(Problem(duration=[1] * 32_000, num_processors=2)), 1)
    1.9
    """
    items = problem.num_tasks + len(problem.edges)
    choices = int(effective_allowed(problem).sum()) - problem.num_tasks
    return items / BUILD_ITEMS_PER_SECOND + max(choices, 0) / BUILD_CHOICES_PER_SECOND


TAIL_EXPANSION_TASKS = 250
"""`solve_tails` lets CP-SAT expand a window's memory reservoirs into pairwise precedences where it
frees at most this many tasks, and keeps them as they are in a wider one. The precedences help
CP-SAT prove small windows: on the interleaved row at p=6, m=12 the window from each rank's
third-last forward (243 free tasks) is proven at 1.67% in about 20 s with them, and was not proven
in 30 s without (it ended at 1.98%). In wider windows they make the search slow: on the bundled
interleaved row (p=8, m=24) the window from each rank's third-last forward (412 free tasks) grows to
10,947 variables, presolve takes 4 s and each LNS neighbourhood 0.3-0.6 s, and 40 s from the optimum
of the window from the last forward ended at 1.44-1.73% (4 runs). With the reservoirs as they are
the first improvement comes at 0.6 s and CP-SAT proved that window optimal at 1.22% in 20 s (35 s
from torch's order; 2-core VM, session 47). 250 is `layersched.schedule.solve.TAIL_FIRST_TASKS`: the
first window `best` picks is small enough to be proven."""


RESERVOIR_EXPANSION_LIMIT = 200_000
"""Above this many pairs of memory events on one processor (summed over processors), CP-SAT keeps the
reservoirs as they are instead of expanding them into pairwise precedences."""


def _reservoir_pairs(problem: Problem) -> int:
    """Pairs of memory-changing tasks that may share a processor, summed over processors.

    >>> from solvers import Problem
    >>> _reservoir_pairs(Problem(duration=[1, 1, 1], num_processors=1, mem_delta=[2, -2, 0], capacity=[2]))
    4
    """
    changes = problem.mem_delta != 0
    per_processor = problem.allowed[changes].sum(axis=0)
    return int((per_processor.astype(np.int64) ** 2).sum())


def _check_hint(problem: Problem, hint: Schedule | None, objective: str) -> tuple[bool, int | None, str]:
    """Whether ``hint`` validates, its objective, and a note when it does not."""
    if hint is None:
        return False, None, ""
    if len(hint.start) != problem.num_tasks:
        raise ValueError(f"hint: expected {problem.num_tasks} tasks, got {len(hint.start)}")
    broken = violations(problem, hint, limit=1)
    if broken:
        return False, None, f"invalid, used as a hint only: {broken[0]}"
    return True, hint.objective(problem, objective), ""


def _horizon(problem: Problem, objective: str, hint: Schedule | None) -> int:
    """Latest end any task needs. Closing every gap in which no task runs and no transfer is under
    way keeps a schedule valid and no worse, so an optimal one ends by the total work plus all
    delays; a valid hint's makespan also bounds an optimal makespan."""
    if hint is not None and objective == "makespan":
        return hint.makespan(problem)
    total = int(problem.duration.sum()) + int(problem.delay.sum())
    return max(total, hint.makespan(problem)) if hint is not None else total


class _Model:
    """Variables and constraints of one CP-SAT model (see the module docstring)."""

    def __init__(
        self,
        problem: Problem,
        objective: str,
        bound: int,
        horizon: int,
        best: int | None,
        keep_processor: np.ndarray | None,
    ) -> None:
        self.problem, self.model, self.horizon = problem, cp_model.CpModel(), horizon
        allowed = effective_allowed(problem).copy()
        if keep_processor is not None:
            keep = np.asarray(keep_processor, dtype=np.int64)
            kept = np.flatnonzero(keep >= 0)
            if not allowed[kept, keep[kept]].all():
                raise ValueError("keep_processor: a task is kept on a processor it may not use")
            allowed[kept] = False
            allowed[kept, keep[kept]] = True
            grouped = problem.group >= 0
            if grouped.any():  # a kept task pins its whole affinity group (LNS may free only some of it)
                ids, inverse = np.unique(problem.group[grouped], return_inverse=True)
                common = np.ones((len(ids), problem.num_processors), dtype=bool)
                np.logical_and.at(common, inverse, allowed[grouped])
                if not common.any(axis=1).all():
                    raise ValueError("keep_processor: tasks of one affinity group are kept on different processors")
                allowed[grouped] = common[inverse]
        self.allowed = allowed
        self.procs = [np.flatnonzero(row).tolist() for row in allowed]
        head, tail = heads_tails(problem)
        self.dur, self.tail = problem.duration.tolist(), tail.tolist()
        self.start = [
            self.model.new_int_var(int(head[t]), horizon - self.dur[t] - self.tail[t], f"s{t}")
            for t in range(problem.num_tasks)
        ]
        self.presence: dict[tuple[int, int], cp_model.IntVar] = {}
        self._add_presence()
        self._add_no_overlap()
        self._add_precedence()
        self._add_memory()
        top = horizon if best is None else min(horizon, best)
        self.objective = self.model.new_int_var(bound, max(bound, top), objective)
        self.first: list[cp_model.IntVar] = []
        self.last: list[cp_model.IntVar] = []
        (self._add_makespan if objective == "makespan" else self._add_span)()
        self.model.minimize(self.objective)

    # -- literals ------------------------------------------------------------------------------
    def _unit(self, t: int) -> int:
        """Owner of task ``t``'s presence literals: its group (as ``-1 - group``) or itself."""
        g = int(self.problem.group[t])
        return -1 - g if g >= 0 else t

    def on(self, t: int, q: int) -> cp_model.IntVar | bool:
        """Literal "task ``t`` runs on ``q``" (True or False where that is settled)."""
        procs = self.procs[t]
        if len(procs) == 1:
            return procs[0] == q
        return self.presence.get((self._unit(t), q), False)

    def _add_presence(self) -> None:
        for t, procs in enumerate(self.procs):
            unit = self._unit(t)
            if len(procs) > 1 and (unit, procs[0]) not in self.presence:
                lits = [self.model.new_bool_var(f"x{t}_{q}") for q in procs]
                self.presence.update({(unit, q): x for q, x in zip(procs, lits, strict=True)})
                self.model.add_exactly_one(lits)

    # -- constraints ---------------------------------------------------------------------------
    def _add_no_overlap(self) -> None:
        per: list[list] = [[] for _ in range(self.problem.num_processors)]
        for t, procs in enumerate(self.procs):
            if self.dur[t] == 0:  # zero-length tasks overlap nothing (as in solvers.validate)
                continue
            if len(procs) == 1:
                interval = self.model.new_fixed_size_interval_var(self.start[t], self.dur[t], f"i{t}")
                per[procs[0]].append(interval)
            else:
                for q in procs:
                    per[q].append(
                        self.model.new_optional_fixed_size_interval_var(
                            self.start[t], self.dur[t], self.on(t, q), f"i{t}_{q}"
                        )
                    )
        for intervals in per:
            if len(intervals) > 1:
                self.model.add_no_overlap(intervals)

    def _add_precedence(self) -> None:
        p, add = self.problem, self.model.add
        group = p.group
        for (u, v), d in zip(p.edges.tolist(), p.delay.tolist(), strict=True):
            end_u = self.start[u] + self.dur[u]
            add(self.start[v] >= end_u)
            if d == 0 or (group[u] >= 0 and group[u] == group[v]):
                continue
            for q in self.procs[u]:  # u on q and v elsewhere: the transfer is paid
                lits = [self.on(u, q), _negate(self.on(v, q))]
                if any(x is False for x in lits):
                    continue
                add(self.start[v] >= end_u + d).only_enforce_if([x for x in lits if x is not True])

    def _add_memory(self) -> None:
        p = self.problem
        mem = p.mem_delta.tolist()
        for q in range(p.num_processors):
            users = np.flatnonzero(self.allowed[:, q] & (p.mem_delta != 0)).tolist()
            if sum(max(mem[t], 0) for t in users) <= p.capacity[q]:
                continue  # cannot overflow
            times = [self.start[t] if mem[t] > 0 else self.start[t] + self.dur[t] for t in users]
            lowest = sum(min(mem[t], 0) for t in users)
            self.model.add_reservoir_constraint_with_active(
                times, [mem[t] for t in users], [self.on(t, q) for t in users], lowest, int(p.capacity[q])
            )

    def add_orders(self, symmetry: Sequence[Sequence[int]] | None, order_pairs: np.ndarray | None) -> None:
        """``start[a] <= start[b]`` along each symmetry chain; ``end[a] <= start[b]`` for each pair."""
        for chain in symmetry or ():
            for a, b in itertools.pairwise(chain):
                self.model.add(self.start[int(b)] >= self.start[int(a)])
        if order_pairs is not None:
            for a, b in np.asarray(order_pairs, dtype=np.int64).reshape(-1, 2).tolist():
                self.model.add(self.start[b] >= self.start[a] + self.dur[a])

    # -- objectives ----------------------------------------------------------------------------
    def _add_makespan(self) -> None:
        for t, s in enumerate(self.start):
            self.model.add(self.objective >= s + self.dur[t] + self.tail[t])

    def _add_span(self) -> None:
        for q in range(self.problem.num_processors):
            users = np.flatnonzero(self.allowed[:, q]).tolist()
            first = self.model.new_int_var(0, self.horizon, f"first{q}")
            last = self.model.new_int_var(0, self.horizon, f"last{q}")
            self.first.append(first)
            self.last.append(last)
            for t in users:
                lit = self.on(t, q)
                after_first = self.model.add(first <= self.start[t])
                before_last = self.model.add(last >= self.start[t] + self.dur[t])
                if lit is not True:
                    after_first.only_enforce_if(lit)
                    before_last.only_enforce_if(lit)
            self.model.add(self.objective >= last - first)

    # -- hint and solution ---------------------------------------------------------------------
    def add_hint(self, hint: Schedule, value: int | None) -> None:
        """Hint starts, presences, the span's helper variables and the objective ``value``."""
        p, m = self.problem, self.model
        if value is not None:
            m.add_hint(self.objective, value)
        start, proc = hint.start.tolist(), hint.processor.tolist()
        for t, s in enumerate(self.start):
            m.add_hint(s, start[t])
        member = {self._unit(t): t for t in range(p.num_tasks)}  # one task per literal owner
        for (unit, q), x in self.presence.items():
            m.add_hint(x, proc[member[unit]] == q)
        end = hint.end(p)
        for q, (first, last) in enumerate(zip(self.first, self.last, strict=True)):
            mine = hint.processor == q
            m.add_hint(first, int(hint.start[mine].min()) if mine.any() else 0)
            m.add_hint(last, int(end[mine].max()) if mine.any() else 0)

    def schedule(self, solver: cp_model.CpSolver) -> Schedule:
        proc = [
            procs[0] if len(procs) == 1 else next(q for q in procs if solver.boolean_value(self.on(t, q)))
            for t, procs in enumerate(self.procs)
        ]
        return Schedule(processor=proc, start=[solver.value(s) for s in self.start])


def _negate(lit: cp_model.IntVar | bool) -> cp_model.IntVar | bool:
    return (not lit) if isinstance(lit, bool) else ~lit


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution to a user callable."""

    def __init__(self, report: Callable[[dict], None], t0: float) -> None:
        super().__init__()
        self.report, self.t0 = report, t0

    def on_solution_callback(self) -> None:
        incumbent, bound = int(self.objective_value), math.ceil(self.best_objective_bound - 1e-6)
        gap = (incumbent - bound) / incumbent if incumbent else 0.0
        self.report({"incumbent": incumbent, "bound": bound, "gap": gap, "elapsed": time.perf_counter() - self.t0})
