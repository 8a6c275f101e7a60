"""Large-neighbourhood search with CP-SAT: re-solve one window of the schedule at a time.

A first CP-SAT call on the whole problem (a quarter of the time, at most five steps' worth) starts
from the hint (or the best list heuristic, `solvers.heuristics.best`); it may prove the optimum, and
its bound is kept. On heterogeneous processors or links (`Problem.unrelated`), which that call does
not model, the search starts from the hint with the bound of `solvers.bounds`; the windows model
each task's duration on each processor and each link's factor. Its schedule is polished by order
moves on its critical chain (`solvers.polish`, at most `POLISH_SHARE` of the time left). Then each
step picks ``window`` tasks that are consecutive in start order: every other step at a random
position (``seed``), the others around a task of the chain that fixes the objective now
(`solvers.simulate.tight_chain`), where a change can shorten the schedule: half of those around one
of its last `TAIL` tasks, where the chains that fix the objective meet (`_chain_position`).
Where tasks may change processor, a window holds tasks of at most `WINDOW_PROCESSORS` processors,
which they may move among: the chosen task's, those of its neighbours on the chain and in the
graph, and random others to make up the number. On many processors that spans a longer stretch of
time than a window across all of them, in a smaller model.

A step's model holds the window only (`solvers.cpsat.reoptimize_window`): every other task stays
where it is, the window's tasks may change order (and processor, unless they move memory) within the
time they span, under the memory limits, and the new orders are then timed at their earliest starts;
the result replaces the current schedule unless it is worse. A step costs the same on any size of
problem (at most `LOCAL_STEP` seconds).

`improve_bands` takes larger steps: CP-SAT on the whole problem, where one band of consecutive tasks
may reorder and every other task keeps its processor and its place in its processor's order but may
move in time (`solvers.cpsat.cpsat` with ``keep_processor`` and ``order_pairs``): a change there
reaches the rest of the schedule.

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

from solvers.bounds import lower_bound
from solvers.cpsat import cpsat, reoptimize_window, solve_tails
from solvers.graph import neighbours
from solvers.heuristics import best
from solvers.polish import polish
from solvers.problem import OBJECTIVES, Problem, Result, Schedule
from solvers.simulate import Deadlock, tight_chain, time_orders
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
        Tasks re-solved per step (consecutive in start order). A problem of equal processors with at
        most ``window`` tasks is solved by one plain `solvers.cpsat.cpsat` call.
    hint : Schedule, optional
        Starting schedule; `solvers.heuristics.best`'s when absent or invalid.
    step_limit : float
        CP-SAT time limit per step.
    workers, log
        Passed to `solvers.cpsat.cpsat`.
    seed : int
        Seed of the window positions, of polish's moves and of CP-SAT's search
        (`solvers.cpsat.seed_solver`).
    progress : callable, optional
        Called with ``dict(incumbent=, bound=, gap=, elapsed=)`` after each improving step.

    Returns
    -------
    Result
        The best schedule found (never worse than a valid ``hint``) with the bound proven by the
        first, unrestricted CP-SAT call (on heterogeneous processors or links, which that call does
        not model, `solvers.bounds.lower_bound`); ``optimal`` when they meet, else ``feasible`` (or
        that call's ``infeasible``/``unknown`` when it found nothing and there was no schedule to
        start from). ``info`` gives the polished schedule's objective (``polish``) and counts the
        window steps and the improving ones.
    """
    t0 = time.perf_counter()
    problem.require_rigid("lns")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if window < 1:
        raise ValueError(f"window: expected a positive number of tasks, got {window}")
    n = problem.num_tasks
    if hint is None or violations(problem, hint, limit=1):
        hint = best(problem, objective=objective, time_limit=max(0.01, time_limit / 4)).schedule
    if problem.is_heterogeneous:
        # CP-SAT's model of the whole problem assumes equal processors and links; a window's does not
        whole = _start(problem, hint, objective)
        if whole.schedule is None or whole.status == "optimal":
            return dataclasses.replace(whole, runtime=time.perf_counter() - t0)
    else:
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
            seed=seed,
        )
        if n <= window or whole.schedule is None or whole.status == "optimal" or whole.info.get("interrupted"):
            return dataclasses.replace(whole, solver="lns", runtime=time.perf_counter() - t0)
    bound = whole.lower_bound
    # order moves on the critical chain first: cheap, and on random DAGs they find what small
    # windows do not (layered, 1,000 tasks on 32 processors: 739 -> 733 in 0.9 s)
    left = time_limit - (time.perf_counter() - t0)
    polished = polish(
        problem, whole.schedule, objective=objective, time_limit=POLISH_SHARE * left, bound=bound, seed=seed
    )
    current, info = improve_windows(
        problem,
        polished.schedule,
        objective=objective,
        time_limit=time_limit - (time.perf_counter() - t0),
        window=window,
        bound=bound,
        step_limit=step_limit,
        workers=workers,
        seed=seed,
        progress=progress,
    )
    value = current.objective(problem, objective)
    status = "optimal" if value <= bound else "feasible"
    info = {"polish": polished.objective, **info}
    return Result(current, status, value, bound, time.perf_counter() - t0, "lns", objective, info)


def _start(problem: Problem, hint: Schedule | None, objective: str) -> Result:
    """What `cpsat_lns` starts from where CP-SAT's whole model does not apply (heterogeneous
    processors or links): the hint (valid, as `cpsat_lns` checked it), with the bound of
    `solvers.bounds`."""
    bound = lower_bound(problem, objective)
    if hint is None:
        return Result(None, "unknown", None, bound, 0.0, "lns", objective, {"source": "none"})
    value = hint.objective(problem, objective)
    status = "optimal" if value <= bound else "feasible"
    return Result(hint, status, value, min(bound, value), 0.0, "lns", objective, {"source": "hint"})


def improve_bands(
    problem: Problem,
    schedule: Schedule,
    *,
    objective: str = "makespan",
    time_limit: float = 30.0,
    band: float = 0.25,
    bound: int = 0,
    step_limit: float = 3.0,
    workers: int = 2,
    seed: int = 0,
    progress: Callable[[dict], None] | None = None,
) -> tuple[Schedule, dict]:
    """Band steps from a valid ``schedule``, for at most ``time_limit`` seconds or until the objective
    reaches ``bound``: each step re-solves the whole problem with CP-SAT (`solvers.cpsat.cpsat`, at most
    ``step_limit`` seconds, hinted with the current schedule), where the tasks of one band (a ``band``
    share of them, consecutive in start order, at a random position) may change order and processor,
    and every other task keeps its processor and its place in its processor's order but may move in
    time. The result is timed at its earliest starts and kept unless it is worse.

    Where `improve_windows` changes a few tasks within the time they take, a band step lets a change
    reach the rest of the schedule: on a memory-limited span problem of 648 tasks on 6 processors
    where window steps found nothing, band steps took the gap to the bound from 3.46% to 2.79% in
    45 s. ``seed`` places the bands and seeds CP-SAT (`solvers.cpsat.seed_solver`). Returns the best
    schedule and ``info`` (steps, improving steps, band; ``interrupted`` after Ctrl-C)."""
    problem.require_uniform("improve_bands")
    if not 0 < band <= 1:
        raise ValueError(f"band: expected a share of the tasks in (0, 1], got {band}")
    n = problem.num_tasks
    width = max(1, min(n, round(band * n)))
    rng = np.random.default_rng(seed)

    def step(current: Schedule, left: float, _: int) -> tuple[Schedule | None, bool]:
        order = current.start_order(problem)  # zero-length tasks at one start in edge order: pairs below follow edges
        first = int(rng.integers(0, n - width + 1))
        inside = np.zeros(n, dtype=bool)
        inside[order[first : first + width]] = True
        pairs, last = [], {}  # consecutive kept tasks of each processor, in start order
        for t in order[~inside[order]].tolist():
            q = int(current.processor[t])
            if q in last:
                pairs.append((last[q], t))
            last[q] = t
        found = cpsat(
            problem,
            objective=objective,
            time_limit=min(step_limit, left),
            workers=workers,
            hint=current,
            keep_processor=np.where(inside, -1, current.processor),
            order_pairs=np.asarray(pairs, dtype=np.int64).reshape(-1, 2),
            seed=seed,
        )
        moved = None if found.schedule is None else _retimed(problem, found.schedule)
        return moved, bool(found.info.get("interrupted"))

    # building the whole model takes a good part of a short step: none starts with 0.5 s or less left
    current, info = _drive(problem, schedule, objective, time_limit, bound, progress, step, least=0.5)
    return current, info | {"band": width}


COARSE_RESOLUTIONS = (6, 18, 60)
"""The levels of `improve_coarse`: at each, the longest task lasts about this many time units."""

COARSE_SHARES = (0.25, 0.4, 0.35)
"""The share of `improve_coarse`'s time that each level gets; the last level that runs gets all that is
left."""


def coarsened(problem: Problem, unit: float) -> Problem:
    """``problem`` with every duration and delay measured in ``unit`` time steps, rounded (a task of
    nonzero duration keeps at least 1). Memory, processors and edges are unchanged, so an order valid
    for one is valid for the other.

    >>> coarsened(Problem(duration=[1000, 2600, 0], num_processors=2, edges=[[0, 1]], delay=[740]),
    ...           unit=100).duration.tolist()
    [10, 26, 0]
    """
    problem.require_uniform("coarsened")
    if not unit >= 1:  # also NaN
        raise ValueError(f"unit: expected at least 1 time step, got {unit}")
    duration = np.where(problem.duration > 0, np.maximum(1, np.rint(problem.duration / unit)), 0)
    delay = np.rint(problem.delay / unit)
    return dataclasses.replace(problem, duration=duration.astype(np.int64), delay=delay.astype(np.int64))


def improve_coarse(
    problem: Problem,
    schedule: Schedule,
    *,
    objective: str = "makespan",
    time_limit: float = 30.0,
    bound: int = 0,
    workers: int = 2,
    progress: Callable[[dict], None] | None = None,
    symmetry: list[list[int]] | None = None,
    seed: int = 0,
) -> tuple[Schedule, dict]:
    """CP-SAT on the whole problem at coarser time, then finer: at each level of `COARSE_RESOLUTIONS`
    the durations and delays are rounded to a unit that makes the longest task last that many units
    (`coarsened`); CP-SAT (`COARSE_SHARES` of ``time_limit``), hinted with the current orders timed
    there, searches that problem, and the orders it finds are timed with the real durations. The
    result replaces the current schedule unless it is worse or breaks a limit. Levels whose unit
    would be under 2 time steps do not run: the problem is that coarse already. Stops at ``bound``.

    Why: CP-SAT improves a schedule in steps of one time unit or so. With passes of 18,000 units,
    each step is a tiny gain and its search walks a long plateau; rounded to 6 units a pass, the
    same orders are a few steps apart. On the 1.5B interleaved row re-cut to p=4, m=8 (Zero
    Bubble's times, 1F1B's memory), 60 s of CP-SAT with the real times stopped at a 2.1% gap to the
    proven bound; 15 + 25 + 20 s at the three levels reached the bound itself (inside `best`'s 60 s,
    which leaves them about 25 s: 0.08 / 0.92 / 1.36% in three runs). The reservoirs are
    not expanded (``expand_memory=False``): on that row at p=6 expanding them made presolve build
    23,000 Booleans, and no level improved in 80 s. With ``symmetry`` (chains of interchangeable
    tasks, as `solvers.cpsat.cpsat` takes them; ``schedule`` should already start them in chain
    order, else it is a poorer hint) every level starts them in that order, which removes equal
    solutions from its search: on that row at p=6, from torch's order, 120 s of levels reached a gap
    of 0.78% with the micro-batch chains and 1.31% without (one run each, session 20; runs of 30 s vary
    more than they differ; a run of session 31 with the chains stopped at 2.11%). On larger models
    they can hurt, since CP-SAT's small neighbourhoods cannot then relabel the tasks of a chain
    (docs/measurements.md, "Symmetry chains in the coarse levels"). A coarse
    level's proven bound is not one of the real problem, so none is kept. ``seed`` seeds CP-SAT
    (`solvers.cpsat.seed_solver`). Returns the best schedule and ``info`` (the real objective each
    level reached, steps, improving steps; ``interrupted`` after Ctrl-C)."""
    problem.require_uniform("improve_coarse")
    longest = int(problem.duration.max()) if problem.num_tasks else 0
    # the unit falls from level to level: once it is under 2 time steps, the problem is that coarse already
    plan = [(longest / r, s) for r, s in zip(COARSE_RESOLUTIONS, COARSE_SHARES, strict=True) if longest / r >= 2]
    levels: dict[str, int | str] = {}

    def step(current: Schedule, left: float, k: int) -> tuple[Schedule | None, bool]:
        unit, share = plan[k]
        coarse = coarsened(problem, unit)
        hint = _in_orders(coarse, current)
        if hint is None:  # zero-length tasks at equal starts may not re-time in index order
            return None, False
        limit = left if k == len(plan) - 1 else min(left, share * time_limit)  # the last level: all that is left
        found = cpsat(
            coarse,
            objective=objective,
            time_limit=limit,
            workers=workers,
            hint=hint,
            expand_memory=False,
            symmetry=symmetry,
            seed=seed,
        )
        moved = None if found.schedule is None else _in_orders(problem, found.schedule)
        levels[f"1/{unit:.0f}"] = moved.objective(problem, objective) if moved is not None else found.status
        return moved, bool(found.info.get("interrupted"))

    current, info = _drive(problem, schedule, objective, time_limit, bound, progress, step, least=0.5, steps=len(plan))
    return current, info | {"levels": levels}


def _drive(
    problem: Problem,
    schedule: Schedule,
    objective: str,
    time_limit: float,
    bound: int,
    progress: Callable[[dict], None] | None,
    step: Callable[[Schedule, float, int], tuple[Schedule | None, bool]],
    least: float,
    steps: int | None = None,
) -> tuple[Schedule, dict]:
    """The loop of `improve_windows`, `improve_bands` and `improve_coarse`: while the objective is
    above ``bound``, more than ``least`` of ``time_limit`` seconds is left and fewer than ``steps``
    steps have run (no limit by default), ``step(current, seconds left, steps so far)`` gives a
    schedule (or None) and whether Ctrl-C stopped it; a schedule no worse than the current one
    replaces it, and ``progress`` hears of each improvement. The best schedule and ``info`` (steps,
    improving steps; ``interrupted`` after Ctrl-C)."""
    t0 = time.perf_counter()
    current, value = schedule, schedule.objective(problem, objective)
    done = improvements = 0
    interrupted = False
    while value > bound and problem.num_tasks and not interrupted and (steps is None or done < steps):
        left = time_limit - (time.perf_counter() - t0)
        if left <= least:
            break
        moved, interrupted = step(current, left, done)
        done += 1
        if moved is None:
            continue
        got = moved.objective(problem, objective)
        if got <= value:
            if got < value:
                improvements += 1
                if progress is not None:
                    progress({"incumbent": got, "bound": bound, "gap": (got - bound) / got,
                              "elapsed": time.perf_counter() - t0})  # fmt: skip
            current, value = moved, got
    return current, {"steps": done, "improvements": improvements} | ({"interrupted": True} if interrupted else {})


def improve_tails(
    problem: Problem,
    schedule: Schedule,
    cut: np.ndarray | Callable[[Schedule, int], np.ndarray | None],
    *,
    objective: str = "makespan",
    time_limit: float = 30.0,
    bound: int = 0,
    workers: int = 2,
    progress: Callable[[dict], None] | None = None,
    window_limit: float | None = None,
    jump: bool = False,
    jump_proven: float | None = None,
    fixed_first: float = 0.0,
    unhinted: int | None = None,
    seed: int = 0,
) -> tuple[Schedule, dict]:
    """From a valid ``schedule``: every processor's tasks from ``cut`` (per processor) on re-solved at
    once (`solvers.cpsat.reoptimize_tails`), its orders timed at their earliest starts where that is
    valid and no worse. The best schedule and ``info`` as `_drive` gives them, with ``windows``, the
    number of windows tried.

    ``cut`` may also be a function of the current schedule and the next window's index (0, 1, 2, ...,
    unless ``jump`` skips some) that gives its cut, or None for no more: the windows then *widen*. A
    window proven optimal has nothing more to give, and a wider one does, so the next is tried; on
    pipelines, cut at each rank's last forward, then its second-last, ..., the proofs are quick
    (0.1-20 s on rows of 384 to 1,728 passes), and the wider windows found what the first did not (see
    `layersched.schedule.solve.TAIL_SHARE`). Each window may take what is left of ``time_limit``, and
    one not proven in it ends the step. With ``window_limit``, a window has at most that many seconds
    (where a long ``time_limit`` would otherwise all go to one window's slow walk;
    `layersched.schedule.solve.TAIL_WINDOW_LIMIT`); one that used them all without a proof gives way
    to the next where it improved, from the best schedule it found, and where it found nothing, ends
    the step, leaving the time to what follows. With ``jump`` too, it gives way instead to a much
    wider window: after window ``k`` the next is window ``2k + 2`` (1 is followed by 4, and 4 by 10;
    `layersched.schedule.solve.TAIL_JUMP`). With ``jump_proven`` (a share), a window proven optimal
    only after more than that share of its seconds is followed by window ``2k + 2`` as well (0 by 2):
    the windows just wider then seldom improve on its optimum, while a window proven soon is followed
    by the next (`layersched.schedule.solve.TAIL_JUMP_PROVEN`). With ``fixed_first`` (seconds), each
    window is first given to CP-SAT's fixed search alone (`solvers.cpsat.solve_tails`'s
    ``fixed_search``) for at most that long and half its seconds: a schedule that meets the window's
    own bound there is proven, and any better one is the hint of the usual search, which has the
    rest (`layersched.schedule.solve.TAIL_FIXED_FIRST`). With ``unhinted``, a window that frees at least
    that many tasks gives the first half of the usual search's seconds to a search without the hint
    (`solvers.cpsat.solve_tails`' ``hint``), which starts on its own; unless that proves the window,
    the hinted search has the rest, from the shorter of its schedule and the hint
    (`layersched.schedule.solve.TAIL_UNHINTED_TASKS`). ``seed`` seeds every window's CP-SAT
    (`solvers.cpsat.seed_solver`): from a schedule where the windows ended before (an earlier run's,
    say), the same seed tends to end there again, another one draws afresh."""
    cuts = cut if callable(cut) else (lambda _, k: cut if k == 0 else None)
    t0 = time.perf_counter()
    current, info = schedule, {"steps": 0, "improvements": 0}
    windows = k = 0  # windows tried; the next one's index
    while (this := cuts(current, k)) is not None:
        left = time_limit - (time.perf_counter() - t0)
        if windows and left <= 0:
            break
        proven = False

        def step(now: Schedule, seconds: float, _: int, this=this) -> tuple[Schedule | None, bool]:
            nonlocal proven
            began, found, left = time.perf_counter(), None, seconds
            try:
                if fixed_first:  # CP-SAT's fixed search first, for a few seconds: proven where it meets the bound
                    seen: dict = {}
                    found, proven = solve_tails(
                        problem, now, this, min(fixed_first, seconds / 2), objective=objective, bound=bound,
                        workers=1, stats=seen, fixed_search=True, seed=seed,
                    )  # fmt: skip
                    proven = found is not None and (proven or found.objective(problem, objective) <= seen["bound"])
                    left = seconds - (time.perf_counter() - began)
                if not proven:  # the usual search, from the fixed search's schedule where that is better
                    hint = min(
                        (s for s in (now, found) if s is not None), key=lambda s: s.objective(problem, objective)
                    )
                    tried = [found] if found is not None else []
                    if unhinted is not None and int((now.start >= this[now.processor]).sum()) >= unhinted:
                        # half of it without the hint first; the rest from the shorter of the two
                        again, proven = solve_tails(
                            problem, hint, this, max(0.01, left / 2), objective=objective, bound=bound,
                            workers=workers, hint=False, seed=seed,
                        )  # fmt: skip
                        if again is not None:
                            tried.append(again)
                            hint = min((hint, again), key=lambda s: s.objective(problem, objective))
                        left = seconds - (time.perf_counter() - began)
                    if not proven:
                        again, proven = solve_tails(
                            problem, hint, this, max(0.01, left), objective=objective, bound=bound,
                            workers=workers, seed=seed,
                        )  # fmt: skip
                        tried.append(again)
                    tried = [s for s in tried if s is not None]
                    found = min(tried, key=lambda s: s.objective(problem, objective)) if tried else None
            except KeyboardInterrupt:
                return None, True
            if found is None:
                return None, False
            return min((_retimed(problem, found), found), key=lambda s: s.objective(problem, objective)), False

        capped = window_limit is not None and left > window_limit
        seconds = window_limit if capped else left
        began = time.perf_counter()
        current, got = _drive(problem, current, objective, seconds, bound, progress, step, least=0.05, steps=1)
        slow = jump_proven is not None and time.perf_counter() - began > jump_proven * seconds
        windows += 1
        info = {"steps": info["steps"] + got["steps"], "improvements": info["improvements"] + got["improvements"]}
        if got.get("interrupted"):
            info["interrupted"] = True
            break
        if proven and slow:
            k = 2 * k + 2
        elif proven or (capped and got["improvements"]):
            k += 1
        elif capped and jump:  # it had all its seconds and found nothing: on to a much wider window
            k = 2 * k + 2
        else:
            break
    return current, info | {"windows": windows}


def _retimed(problem: Problem, schedule: Schedule) -> Schedule:
    """``schedule``'s per-processor orders (`Schedule.orders`) timed at their earliest starts, where that
    is valid; else ``schedule`` itself."""
    timed = _in_orders(problem, schedule)
    return schedule if timed is None else timed


def _in_orders(problem: Problem, schedule: Schedule) -> Schedule | None:
    """``schedule``'s per-processor orders (`Schedule.orders`: start order, zero-length tasks first at
    equal starts) timed at their earliest starts on ``problem``, whose durations may differ from those
    ``schedule`` was timed with; None when that deadlocks or breaks a limit."""
    try:
        timed = time_orders(problem, schedule.orders(problem))
    except Deadlock:
        return None
    return None if violations(problem, timed, limit=1) else timed


POLISH_SHARE = 0.25
"""At most this share of what is left after the whole-problem CP-SAT call goes to `solvers.polish`."""


def improve_windows(
    problem: Problem,
    schedule: Schedule,
    *,
    objective: str = "makespan",
    time_limit: float = 30.0,
    window: int = 50,
    bound: int = 0,
    step_limit: float = 2.0,
    workers: int = 2,
    seed: int = 0,
    progress: Callable[[dict], None] | None = None,
    steps: int | None = None,
    step_work: float | None = None,
) -> tuple[Schedule, dict]:
    """The window steps of `cpsat_lns` from a valid ``schedule`` (see the module text), for at most
    ``time_limit`` seconds, at most ``steps`` steps (no limit by default) or until the objective
    reaches ``bound``: the best schedule found (never worse than ``schedule``) and ``info`` (steps,
    improving steps, window; ``interrupted`` after Ctrl-C). ``progress`` is called with
    ``dict(incumbent=, bound=, gap=, elapsed=)`` after each improving step.

    A step's CP-SAT call stops after `LOCAL_STEP` seconds (or ``step_limit``, if less), so what a
    step finds depends on the machine's speed. With ``step_work`` it stops after that much of
    CP-SAT's deterministic time instead (``time_limit`` still ends the whole): with ``workers=1`` the
    steps, and so the result, are the same on any machine where ``time_limit`` does not end them.
    ``seed`` places the windows and seeds CP-SAT (`solvers.cpsat.seed_solver`)."""
    n, num_processors = problem.num_tasks, problem.num_processors
    window = min(window, n)
    rng = np.random.default_rng(seed)
    near = neighbours(n, problem.edges)
    # windows of a few processors where tasks may change processor; where every task has its own
    # (pipelines), across all of them, as measured there
    few = num_processors > WINDOW_PROCESSORS and bool((problem.allowed.sum(axis=1) > 1).any())

    def step(current: Schedule, left: float, steps: int) -> tuple[Schedule | None, bool]:
        mask = None
        if steps % 2:  # every other window: around a task of the chain that fixes the objective
            chain = tight_chain(problem, current, objective)
            i = _chain_position(len(chain), steps, rng)
            task, beside = chain[i], chain[max(0, i - 2) : i + 3]
        elif few:  # around a random task, on the processors near it
            task, beside = int(rng.integers(0, n)), []
        else:  # at a random place in start order, across all processors
            task = None
        if few:
            mask = _window_processors(current.processor, task, beside, near, num_processors, rng)
        candidates = np.arange(n) if mask is None else np.flatnonzero(mask[current.processor])
        order = candidates[np.lexsort((candidates, current.start[candidates]))]  # start order, ties by index
        size = min(window, len(order))
        if task is None:
            first = int(rng.integers(0, n - window + 1))
        else:
            at = int(np.flatnonzero(order == task)[0])
            first = min(max(at - int(rng.integers(0, size)), 0), len(order) - size)
        free = np.zeros(n, dtype=bool)
        free[order[first : first + size]] = True
        limit = left if step_work is not None else min(step_limit, left, LOCAL_STEP)
        try:
            return _local_step(problem, current, free, limit, workers, objective, mask, step_work, seed), False
        except KeyboardInterrupt:
            return None, True

    current, info = _drive(problem, schedule, objective, time_limit, bound, progress, step, least=0.05, steps=steps)
    return current, info | {"window": window}


LOCAL_STEP = 0.1
"""Seconds at most for one window (its model is small: many short steps
found more than few long ones on random DAGs of 1,000 and 5,000 tasks)."""

WINDOW_PROCESSORS = 4
"""The most processors a window spans (`improve_windows`) where tasks may change processor. On random
layered DAGs on 32 processors (seeds 0-2, 6 s of window steps after `polish`), windows across all
32 processors improved nothing, at 1,000 or at 5,000 tasks. Windows around the critical chain on 2,
4 or 8 processors improved every one: at 1,000 tasks from 715, 700 and 674 to 675, 671 and 628 on
4 processors, and at 5,000 tasks by 1 to 7 units on any of the three. Where every task has its one
processor (pipelines), windows stay across all processors: the multi-chunk rows were not shown to
gain from fewer."""


TAIL = 8
"""Every other window around the critical chain is drawn among its last this many tasks.

On a schedule of 5,000 tasks on 32 processors, 1,000 or more tasks have no slack: the chain
`tight_chain` returns is one of many paths of equal length, and the makespan falls only when all
of them get shorter. They meet at the end, where one task or a few end at the makespan (layered
DAGs of `benchmarks/solvers_bench.py`, best's schedules, seeds 0-1: 1,087 and 1,218 tasks without
slack, 1 ending at the makespan). 10 s of LNS, seeds 0-2, against windows anywhere on the chain:
layered 5,000/32 1789/1763/1773 -> 1783/1763/1773, its heterogeneous twin 3094/3040/2734 ->
3093/3040/2734, layered-het 1,000/32 873/897/881 -> 869/893/876, layered 1,000/32 677/679/645 ->
686/676/638. One run each, with another benchmark on the other core; the search depends on
timing. Every chain window at the end instead: layered 1,000/32 690/687/662, worse."""


def _chain_position(length: int, steps: int, rng: np.random.Generator) -> int:
    """Where on a critical chain of ``length`` tasks the window of step ``steps`` (an odd one) centres:
    one of the last `TAIL` tasks on every other such step, anywhere on the others."""
    if steps % 4 == 1:
        return length - 1 - int(rng.integers(0, min(TAIL, length)))
    return int(rng.integers(0, length))


def _window_processors(
    processor: np.ndarray,
    task: int,
    beside: list[int],
    near: tuple[np.ndarray, np.ndarray],
    num_processors: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """The processors of a window around ``task``, as a mask: its own, then those of the tasks
    ``beside`` it (on the critical chain), then those of its predecessors and successors, then random
    ones, up to `WINDOW_PROCESSORS`."""
    indptr, other = near
    tasks = dict.fromkeys([task, *beside, *other[indptr[task] : indptr[task + 1]].tolist()])
    chosen: dict[int, None] = {}
    for t in tasks:
        if len(chosen) == WINDOW_PROCESSORS:
            break
        chosen[int(processor[t])] = None
    rest = rng.permutation(num_processors).tolist()
    while len(chosen) < WINDOW_PROCESSORS:
        chosen[rest.pop()] = None
    mask = np.zeros(num_processors, dtype=bool)
    mask[list(chosen)] = True
    return mask


def _local_step(
    problem: Problem,
    schedule: Schedule,
    free: np.ndarray,
    time_limit: float,
    workers: int,
    objective: str,
    processors: np.ndarray | None = None,
    work: float | None = None,
    seed: int = 0,
) -> Schedule | None:
    """Re-place the ``free`` tasks with everything else in place (`solvers.cpsat.reoptimize_window`,
    on the ``processors`` it marks, by default all; ``work`` its deterministic limit; ``seed`` CP-SAT's
    seed), then time the
    new per-processor orders (`Schedule.orders`) at their earliest starts, which moves later work into
    the room made. The timed schedule when it validates, else the re-placed one; None when CP-SAT
    found nothing."""
    moved = reoptimize_window(problem, schedule, free, time_limit, workers, objective, processors, work, seed)
    return None if moved is None else _retimed(problem, moved)
