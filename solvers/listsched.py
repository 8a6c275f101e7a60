"""List scheduling: processors take the highest-priority task whose data has arrived.

Priority is the upward rank (the longest path from a task to the end of the graph, counting its own
duration and the mean transfer delays); ties go to the lower task index. Decisions run in time
order, in O((V + E) log V). A task becomes ready when its last predecessor is placed; it is then
given a processor: its only one, its affinity group's (the group follows its first task), or the
one where it could start first, counting the data-ready time there, the work already queued there
and whether its memory fits. A processor that comes free starts, among its tasks whose data has
arrived, the one with the highest priority, and idles only when none has arrived (no insertion
into earlier gaps: tasks are appended to each processor).

Choosing a processor scans the allowed ones, O(P) per task. Where processors and links are equal
and memory cannot bind, the scan (here and in `heft`'s insertion) stops at the first processor that
can take the task as soon as its data is on every processor but the one it came from: none can take
it earlier, and a tie goes to the lower index either way, so the choice is the full scan's (on the
layered DAGs of `benchmarks/solvers_bench.py`, 32 processors: `heft` a fifth to a quarter faster at
5,000 and 20,000 tasks).

Memory: because tasks are appended, every earlier task of a processor has ended when the next one
starts, so a processor's usage is the running sum of the deltas in its order. A task that would
overflow its processor waits until a release there makes room; meanwhile other tasks go first.
When nothing can start any more the result is ``unknown``.

Example
-------
>>> from solvers import Problem, validate
>>> from solvers.listsched import list_schedule
>>> p = Problem(duration=[2, 2, 3], num_processors=2, edges=[[0, 2]], delay=[1])
>>> r = list_schedule(p)
>>> r.objective, r.schedule.processor.tolist(), r.schedule.start.tolist()
(5, [0, 1, 0], [0, 0, 2])
>>> validate(p, r.schedule)
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Sequence

import numpy as np

from solvers.bounds import lower_bound
from solvers.graph import csr, longest_from_sources, longest_to_sinks
from solvers.problem import OBJECTIVES, UNLIMITED, Problem, Result, Schedule
from solvers.simulate import time_orders

PRIORITIES = ("upward_rank", "index")
"""Named priority rules; a priority may also be an array with one value per task (higher first)."""

_SCALE = 64  # fixed-point scale of the mean transfer delays inside the upward rank

MAX_GAPS = 512
"""Idle gaps per processor that insertion (`heft`, `cpop`, `peft`) still offers: the most recent."""


def has_memory_limits(problem: Problem) -> bool:
    """Whether memory can bind: a task changes memory and a processor has a capacity."""
    return bool(np.any(problem.mem_delta != 0) and np.any(problem.capacity < UNLIMITED))


def effective_allowed(problem: Problem) -> np.ndarray:
    """``allowed`` narrowed so that all tasks of an affinity group share the same allowed set, and
    without the processors where a task's allocation can never fit (more than the capacity plus
    everything that may be released there), unless that leaves it none (`infeasible_reason` then
    says why).

    >>> from solvers import Problem
    >>> p = Problem(duration=[1, 1], allowed=[[1, 1], [0, 1]], group=[0, 0])
    >>> effective_allowed(p).astype(int).tolist()
    [[0, 1], [0, 1]]
    >>> p = Problem(duration=[1, 1], num_processors=2, mem_delta=[4, 1], capacity=[3, 9], group=[0, 0])
    >>> effective_allowed(p).astype(int).tolist()
    [[0, 1], [0, 1]]
    """
    allowed = problem.allowed
    if (problem.mem_delta > 0).any():
        freed = (np.maximum(-problem.mem_delta, 0) @ allowed).astype(np.int64)
        never = problem.mem_delta[:, None] > (problem.capacity + freed)[None, :]
        fits = allowed & ~never
        keep = fits.any(axis=1)
        if (keep & never.any(axis=1) & allowed.any(axis=1)).any():
            allowed = np.where(keep[:, None], fits, allowed)
    grouped = problem.group >= 0
    if not grouped.any():
        return allowed
    ids, inverse = np.unique(problem.group[grouped], return_inverse=True)
    common = np.ones((len(ids), problem.num_processors), dtype=bool)
    np.logical_and.at(common, inverse, allowed[grouped])
    out = allowed.copy()
    out[grouped] = common[inverse]
    return out


def mean_delays(problem: Problem, allowed: np.ndarray | None = None) -> np.ndarray:
    """Each edge's delay times the chance that two processors drawn from its tasks' allowed sets
    differ (0 inside an affinity group) and the mean link factor, in units of 1/64 of a time step:
    the transfer cost the rank-based heuristics count before placement."""
    allowed = effective_allowed(problem) if allowed is None else allowed
    u, v = problem.edges[:, 0], problem.edges[:, 1]
    count = allowed.sum(axis=1)
    common = np.zeros(len(u), dtype=np.int64)
    for q in range(problem.num_processors):  # column by column keeps memory at O(E)
        common += allowed[u, q] & allowed[v, q]
    differ = 1.0 - common / (count[u] * count[v])
    differ[(problem.group[u] >= 0) & (problem.group[u] == problem.group[v])] = 0.0
    return np.rint(problem.delay * differ * _mean_link(problem) * _SCALE).astype(np.int64)


def _mean_link(problem: Problem) -> float:
    """The mean link factor between two different processors (1 without ``link``)."""
    P = problem.num_processors
    if problem.link is None or P < 2:
        return 1.0
    return float(problem.link_matrix().sum() / (P * (P - 1)))


def mean_durations(problem: Problem, allowed: np.ndarray | None = None) -> np.ndarray:
    """Each task's mean duration over its allowed processors, in units of 1/64 of a time step
    (HEFT's average computation cost; the duration itself on equal processors)."""
    if problem.duration_on is None:
        return problem.duration * _SCALE
    allowed = effective_allowed(problem) if allowed is None else allowed
    count = np.maximum(allowed.sum(axis=1), 1)
    return np.rint(np.where(allowed, problem.duration_on, 0).sum(axis=1) * _SCALE / count).astype(np.int64)


def check_transfer_weight(weight: float) -> None:
    """ValueError unless ``weight`` (how much a priority counts transfers: `upward_rank`,
    `solvers.heuristics.fcp`) is a finite number >= 0."""
    if not 0 <= weight < float("inf"):  # also NaN
        raise ValueError(f"transfer_weight: expected a finite number >= 0, got {weight}")


def upward_rank(problem: Problem, allowed: np.ndarray | None = None, transfer_weight: float = 1.0) -> np.ndarray:
    """Longest path from each task to the end of the graph, its own duration included.

    An edge counts its `mean_delays` weight times ``transfer_weight`` (HEFT's rank at 1; 0 ranks by
    computation alone). Returned in units of 1/64 of a time step.

    >>> from solvers import Problem
    >>> p = Problem(duration=[2, 3], allowed=[[1, 0], [0, 1]], edges=[[0, 1]], delay=[1])
    >>> (upward_rank(p) / 64).tolist(), (upward_rank(p, transfer_weight=0) / 64).tolist()
    ([6.0, 3.0], [5.0, 3.0])
    """
    check_transfer_weight(transfer_weight)
    weight = mean_delays(problem, allowed)
    if transfer_weight != 1:
        weight = np.rint(weight * transfer_weight).astype(np.int64)
    dur = mean_durations(problem, allowed)
    return longest_to_sinks(problem.topological_order(), problem.num_tasks, problem.edges, dur, weight) + dur


def downward_rank(problem: Problem, allowed: np.ndarray | None = None) -> np.ndarray:
    """Longest path from the start of the graph to the start of each task (durations and
    `mean_delays` weights), in units of 1/64 of a time step. ``upward_rank + downward_rank`` is the
    longest path through a task: equal to the critical path's length exactly on it.

    >>> from solvers import Problem
    >>> p = Problem(duration=[2, 3], allowed=[[1, 0], [0, 1]], edges=[[0, 1]], delay=[1])
    >>> (downward_rank(p) / 64).tolist()
    [0.0, 3.0]
    """
    weight = mean_delays(problem, allowed)
    dur = mean_durations(problem, allowed)
    return longest_from_sources(problem.topological_order(), problem.num_tasks, problem.edges, dur, weight)


def list_schedule(
    problem: Problem,
    /,
    *,
    objective: str = "makespan",
    priority: str | Sequence[float] | np.ndarray = "upward_rank",
    orders: Sequence[Sequence[int]] | None = None,
    time_limit: float | None = None,
) -> Result:
    """Memory-aware list scheduling (see the module docstring).

    Parameters
    ----------
    problem : Problem
    objective : {"makespan", "span"}
        Reported objective. For ``span`` the as-late-as-possible timing of the same processor
        orders is returned when its span is smaller.
    priority : "upward_rank", "index" or array of n numbers
        Order in which ready tasks are taken (higher first; ties by lower index).
    orders : list of per-processor task lists, optional
        Tasks listed in ``orders[q]`` run on processor ``q`` in that order; unlisted tasks are
        placed freely around them. With every task listed this is `solvers.time_orders` with the
        memory check made up front.
    time_limit : float, optional
        Seconds after which the run stops with status ``unknown`` and no schedule (checked every
        few thousand placements, so it ends within milliseconds of the limit).

    Returns
    -------
    Result
        ``feasible`` (``optimal`` when the objective meets the lower bound) with a schedule,
        ``infeasible`` when a task or group fits no processor, or ``unknown`` without a schedule
        when memory blocks every ready task or the time limit ends the run.

    Examples
    --------
    Memory forces the two allocating tasks apart: task 1 frees what task 0 allocated.

    >>> from solvers import Problem
    >>> p = Problem(duration=[1, 1, 1], edges=[[0, 1]], mem_delta=[4, -4, 4], capacity=[5])
    >>> list_schedule(p).schedule.start.tolist()
    [0, 1, 2]
    """
    return _schedule(problem, "list", objective, priority, orders, time_limit)


def heft(
    problem: Problem,
    /,
    *,
    objective: str = "makespan",
    priority: str | Sequence[float] | np.ndarray = "upward_rank",
    orders: Sequence[Sequence[int]] | None = None,
    time_limit: float | None = None,
    ties: Sequence[int] | np.ndarray | None = None,
) -> Result:
    """HEFT (Topcuoglu et al., 2002): tasks in upward-rank order, each on the processor where it
    *finishes* first, inserted into the earliest idle gap there that is long enough after its data
    arrives. O(V P g) for g the idle gaps scanned per placement (few on a busy processor: 196,608
    pipeline tasks on 64 ranks take 2.2 s, as list scheduling does). Each processor keeps its last
    `MAX_GAPS` idle gaps; older ones are no longer offered (on a graph with fewer gaps this is
    exactly HEFT; it keeps g and each gap update bounded on a million tasks).

    Between processors where a task finishes at the same time it takes the one where it starts first
    (the slower), then the one of least ``ties[q]`` (one number per processor; by default the least
    index).

    Insertion reorders a processor's tasks after the fact, which memory limits do not survive (a
    processor's usage is no longer the running sum of its order): with memory, or with fixed
    ``orders``, this is `list_schedule`'s placement (``info["variant"]`` says which ran), and
    ``ties`` is not used.

    >>> from solvers import Problem
    >>> heft(Problem(duration=[3, 1, 1], num_processors=2)).objective
    3
    """
    if ties is not None:
        ties = np.asarray(ties)
        if ties.shape != (problem.num_processors,) or not np.isfinite(ties.astype(float)).all():
            expected = problem.num_processors
            raise ValueError(f"ties: expected {expected} finite numbers, one per processor, got {ties.tolist()}")
    if has_memory_limits(problem) or orders is not None:
        result = _schedule(problem, "heft", objective, priority, orders, time_limit)
        result.info["variant"] = "list placement (memory limits or fixed orders)"
        return result
    return _schedule(problem, "heft", objective, priority, None, time_limit, insertion=True, ties=ties)


def _schedule(
    problem: Problem,
    solver: str,
    objective: str,
    priority,
    orders,
    time_limit=None,
    insertion: bool = False,
    choice=None,
    ties: np.ndarray | None = None,
) -> Result:
    """The list or insertion placement behind `list_schedule`, `heft` and the variants of
    `solvers.heuristics`. ``choice(allowed) -> (pinned, extra)`` (insertion only) gives each task a
    preferred processor (-1: none) and an (n, P) cost added to its finish time when choosing one
    (or None). ``ties`` (insertion only): see `_insert`."""
    t0 = time.perf_counter()
    problem.require_rigid(solver)
    if time_limit is not None and not time_limit > 0:  # also NaN
        raise ValueError(f"time_limit: expected a positive number of seconds, got {time_limit}")
    deadline = t0 + time_limit if time_limit is not None else float("inf")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    allowed = effective_allowed(problem)
    why = infeasible_reason(problem, allowed)
    if why:
        return Result(
            None,
            "infeasible",
            None,
            lower_bound(problem, objective),
            time.perf_counter() - t0,
            solver,
            objective,
            {"reason": why},
        )
    chain = np.zeros((0, 2), dtype=np.int64)
    if orders is not None:
        allowed, chain = _pin_orders(problem, allowed, orders)
    keys = _priority(problem, allowed, priority)
    if insertion:
        pinned, extra = choice(allowed) if choice is not None else (None, None)
        placed = _insert(problem, allowed, keys, deadline, pinned, extra, ties)
    else:
        placed = _place(problem, allowed, keys, chain, deadline)
        repairs = 0
        while isinstance(placed, _Stuck) and repairs < MAX_REPAIRS and time.perf_counter() < deadline:
            narrowed = _release_for(problem, allowed, placed)
            if narrowed is None:
                break
            allowed, repairs = narrowed, repairs + 1
            placed = _place(problem, allowed, keys, chain, deadline)
    bound = lower_bound(problem, objective)
    if isinstance(placed, str):
        return Result(None, "unknown", None, bound, time.perf_counter() - t0, solver, objective, {"reason": placed})
    schedule, placement = placed
    if objective == "span":
        late = _as_late_as_possible(problem, schedule, placement)
        if late.span(problem) < schedule.span(problem):
            schedule = late
    value = schedule.objective(problem, objective)
    status = "optimal" if value <= bound else "feasible"
    info = {"variant": "insertion"} if insertion else {}
    return Result(schedule, status, value, bound, time.perf_counter() - t0, solver, objective, info)


class _Stuck(str):
    """`_place`'s message when memory blocks every ready task, with the blocked tasks (each with the
    processor it waits on) and where the placed tasks went."""

    def __new__(cls, message: str, stuck: list[tuple[int, int]], proc: list[int]):
        self = super().__new__(cls, message)
        self.stuck, self.proc = stuck, proc
        return self


MAX_REPAIRS = 16
"""Restarts of list scheduling after a memory deadlock, each with one releasing task moved."""


def _release_for(problem: Problem, allowed: np.ndarray, stuck: _Stuck) -> np.ndarray | None:
    """``allowed`` with one releasing task bound to the processor where a blocked task waits, or
    None when no such task can help.

    A blocked task waits for memory that no task still to come releases on its processor. Tried in
    turn, each with a task's affinity group, and never with a task that runs after the blocked one
    (its descendant): bind there the largest release that may run there but went elsewhere (by its
    group's net release: a group that allocates more than it releases does not help); move
    elsewhere the largest allocation placed there that may run elsewhere; move the blocked task
    itself elsewhere. Each step removes processors from an allowed set, so repairs end."""
    n = problem.num_tasks
    sptr, stgt, _ = csr(n, problem.edges[:, 0], problem.edges[:, 1])
    mem, group, proc = problem.mem_delta, problem.group, np.asarray(stuck.proc)
    net = mem.copy()  # a task's release counts with its whole group's (a group drags its allocations along)
    grouped = group >= 0
    if grouped.any():
        _, inverse = np.unique(group[grouped], return_inverse=True)
        net[grouped] = np.bincount(inverse, weights=mem[grouped]).astype(np.int64)[inverse]
    movable = allowed.sum(axis=1) > 1

    def with_group(r: int) -> np.ndarray:
        return np.flatnonzero(group == group[r]) if group[r] >= 0 else np.array([r])

    for t, q in stuck.stuck:
        later = np.zeros(n, dtype=bool)
        todo = [t]
        while todo:  # t and its descendants
            u = todo.pop()
            if not later[u]:
                later[u] = True
                todo.extend(stgt[sptr[u] : sptr[u + 1]].tolist())
        allowed = allowed.copy()
        helps = np.flatnonzero((mem < 0) & (net < 0) & allowed[:, q] & movable & (proc != q) & ~later)
        if len(helps):  # the largest release binds there
            members = with_group(int(helps[np.lexsort((helps, net[helps]))[0]]))
            allowed[members] = False
            allowed[members, q] = True
            return allowed
        holds = np.flatnonzero((mem > 0) & (proc == q) & movable & ~later)
        if len(holds):  # the largest allocation placed there goes elsewhere
            allowed[with_group(int(holds[np.lexsort((holds, -mem[holds]))[0]])), q] = False
            return allowed
        if movable[t]:  # nothing can make room there: the blocked task leaves
            allowed[with_group(t), q] = False
            return allowed
    return None


def infeasible_reason(problem: Problem, allowed: np.ndarray) -> str:
    """Why no schedule can exist, judged task by task (``allowed`` from `effective_allowed`, which
    already leaves out processors where a task's allocation can never fit):
    an affinity group without a common processor, or an allocation larger than the capacity plus
    all releases of every processor the task may use. Empty when no such reason is seen."""
    none = np.flatnonzero(~allowed.any(axis=1))
    if len(none):
        t = int(none[0])
        return f"the affinity group {problem.group[t]} of {problem.task_label(t)} has no common processor"
    # releases may come first (usage can go below 0), so a processor offers its capacity plus
    # everything the tasks that may run there release
    freed = (np.maximum(-problem.mem_delta, 0) @ allowed).astype(np.int64)
    room = np.where(allowed, problem.capacity[None, :] + freed[None, :], -1).max(axis=1)
    big = np.flatnonzero(problem.mem_delta > room)
    if len(big):
        t = int(big[0])
        return f"{problem.task_label(t)} allocates {problem.mem_delta[t]} but its processors hold at most {room[t]}"
    return ""


def _pin_orders(
    problem: Problem, allowed: np.ndarray, orders: Sequence[Sequence[int]]
) -> tuple[np.ndarray, np.ndarray]:
    """``allowed`` with the tasks in ``orders`` (and their groups) bound to their processor, and
    the orders as chain edges."""
    if len(orders) != problem.num_processors:
        raise ValueError(f"orders: expected {problem.num_processors} lists (one per processor), got {len(orders)}")
    pin = np.full(problem.num_tasks, -1, dtype=np.int64)
    chains = []
    for q, order in enumerate(orders):
        idx = np.asarray(order, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= problem.num_tasks):
            raise ValueError(f"orders: {problem.processor_label(q)} lists a task index out of range")
        seen = idx[pin[idx] >= 0]
        if len(seen) or len(np.unique(idx)) != len(idx):
            t = int(seen[0]) if len(seen) else int(np.argmax(np.bincount(idx)))
            raise ValueError(f"orders: {problem.task_label(t)} is listed more than once")
        pin[idx] = q
        chains.append(np.stack([idx[:-1], idx[1:]], axis=1))
    listed = np.flatnonzero(pin >= 0)
    for t in listed[~allowed[listed, pin[listed]]].tolist():
        where = problem.processor_label(int(pin[t]))
        raise ValueError(f"orders: {problem.task_label(t)} may not run on {where}")
    grouped = listed[problem.group[listed] >= 0]
    for t in grouped.tolist():
        members = np.flatnonzero(problem.group == problem.group[t])
        clash = members[(pin[members] >= 0) & (pin[members] != pin[t])]
        if len(clash):
            raise ValueError(
                f"orders: {problem.task_label(t)} and {problem.task_label(int(clash[0]))} "
                "share an affinity group but are listed on different processors"
            )
        pin[members] = pin[t]
    bound = np.flatnonzero(pin >= 0)
    allowed = allowed.copy()
    allowed[bound] = False
    allowed[bound, pin[bound]] = True
    return allowed, np.concatenate(chains).astype(np.int64)


def _priority(problem: Problem, allowed: np.ndarray, priority) -> np.ndarray:
    if isinstance(priority, str):
        if priority == "upward_rank":
            return upward_rank(problem, allowed)
        if priority == "index":
            return -np.arange(problem.num_tasks)
        raise ValueError(f"unknown priority {priority!r}; valid: {', '.join(PRIORITIES)} or one number per task")
    keys = np.asarray(priority, dtype=float)
    if keys.shape != (problem.num_tasks,):
        raise ValueError(f"priority: expected {problem.num_tasks} values, got shape {keys.shape}")
    return keys


def _candidates(allowed: np.ndarray) -> tuple[list[int], list[int], list[list[int]]]:
    """Per task: its single processor (or -1), the id of its allowed set, and the allowed sets."""
    n, P = allowed.shape
    fixed = np.where(allowed.sum(axis=1) == 1, np.argmax(allowed, axis=1), -1)
    if P <= 62:
        key = allowed.astype(np.int64) @ (np.int64(1) << np.arange(P, dtype=np.int64))
        sets, inverse = np.unique(key, return_inverse=True)
        patterns = [[q for q in range(P) if (int(k) >> q) & 1] for k in sets]
    else:  # rows packed into bytes, compared as one opaque value each (unique over axis 0 is slow)
        packed = np.ascontiguousarray(np.packbits(allowed, axis=1))
        keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        patterns = [np.flatnonzero(allowed[i]).tolist() for i in first]
    return fixed.tolist(), inverse.reshape(n).tolist(), patterns


def _insert(
    problem: Problem,
    allowed: np.ndarray,
    keys: np.ndarray,
    deadline: float = float("inf"),
    pinned: np.ndarray | None = None,
    extra: np.ndarray | None = None,
    ties: np.ndarray | None = None,
) -> tuple[Schedule, list[list[int]]] | str:
    """HEFT's placement loop (memory-free problems): the ready task of highest priority goes where it
    finishes first, into the earliest gap of that processor that fits it after its data arrives; a
    task of an affinity group goes where its group went. A task with a ``pinned`` processor (>= 0)
    goes there; with ``extra``, a processor is chosen by finish time plus ``extra[t, q]``. Between
    processors where it would finish at the same time, it goes where it starts first (the slower
    one), then to the processor of least ``ties[q]`` (by default the least index)."""
    n, P = problem.num_tasks, problem.num_processors
    pptr, psrc, pdel, sptr, stgt, indeg = _adjacency(problem)
    fixed, pattern, patterns = _candidates(allowed)
    dur, group, key = problem.duration.tolist(), problem.group.tolist(), keys.tolist()
    don, lnk = _speeds(problem)
    into = None if lnk is None else [list(col) for col in zip(*lnk, strict=True)]  # into[q][p]: link p -> q
    pin = pinned.tolist() if pinned is not None else [-1] * n
    tie = ties.tolist() if ties is not None else list(range(P))
    # each processor's idle gaps before its last task, by time, and when its last task ends
    gap_starts: list[list[int]] = [[] for _ in range(P)]
    gap_ends: list[list[int]] = [[] for _ in range(P)]
    tail = [0] * P
    gproc: dict[int, int] = {}
    proc, start, end = [-1] * n, [0] * n, [0] * n
    ready = [(-key[t], t) for t in range(n) if indeg[t] == 0]
    heapq.heapify(ready)
    done = 0
    while ready:
        if done and done % 4096 == 0 and time.perf_counter() > deadline:  # 4,096 placements first: a small
            return "the time limit ended the run"  # problem always ends (a late start alone does not stop it)
        _, t = heapq.heappop(ready)
        if group[t] >= 0 and group[t] in gproc:
            cands = [gproc[group[t]]]
        elif fixed[t] >= 0:
            cands = [fixed[t]]
        elif pin[t] >= 0:
            cands = [pin[t]]
        else:
            cands = patterns[pattern[t]]
        cost = extra[t].tolist() if extra is not None and len(cands) > 1 else None
        best = None
        if lnk is None and len(cands) > 1:
            # equal links: the data is everywhere but on top_q by ``top`` (the latest end plus delay,
            # from top_q), and on top_q by ``other`` (local data counts its end only)
            top, top_q, other = 0, -1, 0
            for k in range(pptr[t], pptr[t + 1]):
                c = end[psrc[k]] + pdel[k]
                if c > top:
                    top, top_q = c, proc[psrc[k]]
            for k in range(pptr[t], pptr[t + 1]):
                u = psrc[k]
                c = end[u] if proc[u] == top_q else end[u] + pdel[k]
                if c > other:
                    other = c
        if lnk is None and don is None and cost is None and ties is None and len(cands) > 1:
            best = _earliest_of(cands, top, top_q, other, dur[t], gap_starts, gap_ends, tail)
        else:
            # where `top` and `other` do not say when the data is there: each predecessor's processor,
            # end and delay, read once for every processor tried
            per_q = lnk is not None or len(cands) == 1
            preds = [(proc[psrc[k]], end[psrc[k]], pdel[k]) for k in range(pptr[t], pptr[t + 1])] if per_q else []
            for q in cands:
                if not per_q:
                    arrive = other if q == top_q else top
                else:  # `_arrival`
                    arrive, row = 0, None if lnk is None else into[q]
                    for pq, e, dl in preds:
                        c = e if pq == q else e + (dl if row is None else dl * row[pq])
                        if c > arrive:
                            arrive = c
                d = dur[t] if don is None else don[t][q]
                tq = tail[q]
                if arrive >= tq:  # `_earliest_gap`'s two commonest answers, without the call
                    s = arrive
                elif not gap_ends[q] or gap_ends[q][-1] <= arrive:
                    s = tq
                else:
                    s = _earliest_gap(gap_starts[q], gap_ends[q], tq, arrive, d)
                f = s + d
                option = (f + cost[q] if cost is not None else f, f, s, tie[q], q)
                if best is None or option < best:
                    best = option
        f, s, q = best[1], best[2], best[-1]
        tail[q] = _occupy(gap_starts[q], gap_ends[q], tail[q], s, f)
        proc[t], start[t], end[t] = q, s, f
        if group[t] >= 0:
            gproc.setdefault(group[t], q)
        done += 1
        for k in range(sptr[t], sptr[t + 1]):
            v = stgt[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (-key[v], v))
    schedule = Schedule(np.array(proc, dtype=np.int64), np.array(start, dtype=np.int64))
    return schedule, schedule.orders(problem)  # zero-length tasks at one start in edge order: timed again late


def _adjacency(problem: Problem) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
    """Lists for the placement loops: `adjacency_arrays`, each as a list."""
    return tuple(a.tolist() for a in adjacency_arrays(problem))


def adjacency_arrays(problem: Problem) -> tuple[np.ndarray, ...]:
    """Incoming edges grouped by target (pointers, sources, delays), outgoing ones grouped by source
    (pointers, targets), and each task's in-degree."""
    n = problem.num_tasks
    src, dst = problem.edges[:, 0], problem.edges[:, 1]
    pptr, psrc, peid = csr(n, dst, src)
    sptr, stgt, _ = csr(n, src, dst)
    return pptr, psrc, problem.delay[peid], sptr, stgt, np.bincount(dst, minlength=n)


def _arrival(t: int, r: int, pptr: list, psrc: list, pdel: list, proc: list, end: list, lnk) -> int:
    """When task ``t``'s data is on processor ``r``: its predecessors' ends, plus each edge's delay
    (times the link factor ``lnk``, when given) where the predecessor ran elsewhere."""
    ready = 0
    for k in range(pptr[t], pptr[t + 1]):
        p = psrc[k]
        if proc[p] != r:
            c = end[p] + (pdel[k] if lnk is None else pdel[k] * lnk[proc[p]][r])
        else:
            c = end[p]
        if c > ready:
            ready = c
    return ready


def _speeds(problem: Problem) -> tuple[list[list[int]] | None, list[list[int]] | None]:
    """Per task and processor its duration, and per processor pair the link factor, as nested lists
    for the placement loops; None where the problem is uniform (the loops then use ``duration`` and
    ``delay``)."""
    don = problem.duration_on.tolist() if problem.duration_on is not None else None
    lnk = problem.link_matrix().tolist() if problem.link is not None else None
    return don, lnk


def _earliest_of(
    cands: list[int],
    top: int,
    top_q: int,
    other: int,
    d: int,
    gap_starts: list[list[int]],
    gap_ends: list[list[int]],
    tail: list[int],
) -> tuple[int, int, int, int]:
    """`_insert`'s choice where processors and links are equal and no extra cost counts: the
    processor (of ``cands``, by index) where a task of duration ``d`` starts first, its data there at
    ``other`` on ``top_q`` and at ``top`` elsewhere; ties go to the lower index. As
    ``(finish, finish, start, processor)``, the full scan's option.

    The same choice as comparing every processor, faster: with one duration, the earliest finish is
    the earliest start; no processor but ``top_q`` starts before ``top``, so the scan stops at a
    start of ``top`` once ``top_q`` is behind it (or cannot start earlier), and `_earliest_gap`'s
    two commonest answers (the processor idle by then; no gap after the data arrives) are inlined.
    """
    best_s, best_q = -1, -1
    for q in cands:
        if best_q >= 0 and best_s <= top and (best_s <= other or q > top_q):
            break  # every processor left starts at ``top`` at the earliest (``top_q`` at ``other``)
        arrive = other if q == top_q else top
        tq = tail[q]
        if arrive >= tq:
            s = arrive
        else:
            ends = gap_ends[q]
            s = tq if not ends or ends[-1] <= arrive else _earliest_gap(gap_starts[q], ends, tq, arrive, d)
        if best_q < 0 or s < best_s:
            best_s, best_q = s, q
    return best_s + d, best_s + d, best_s, best_q


def _earliest_gap(gap_starts: list[int], gap_ends: list[int], tail: int, ready: int, duration: int) -> int:
    """The earliest time at or after ``ready`` where ``duration`` fits in an idle gap of a processor
    (gaps by time, disjoint), else after its last task (``tail``). Scans gaps, not tasks: few on a
    busy processor."""
    i = bisect.bisect_right(gap_ends, ready)  # gaps over by ``ready`` cannot take it
    n = len(gap_starts)
    if i < n:
        s = gap_starts[i] if gap_starts[i] > ready else ready  # the only gap that may hold ``ready``
        if s + duration <= gap_ends[i]:
            return s
        for k in range(i + 1, n):  # later gaps start after ``ready``
            if gap_ends[k] - gap_starts[k] >= duration:
                return gap_starts[k]
    return ready if ready > tail else tail


def _occupy(gap_starts: list[int], gap_ends: list[int], tail: int, s: int, f: int) -> int:
    """Mark ``[s, f)`` busy on a processor whose last task ends at ``tail``: after it (a new gap
    before it, the oldest of more than `MAX_GAPS` dropped), or inside one of its gaps (split in two,
    empty halves dropped). Returns the new tail."""
    if s >= tail:
        if s > tail:
            gap_starts.append(tail)
            gap_ends.append(s)
            if len(gap_starts) > MAX_GAPS:
                del gap_starts[0], gap_ends[0]
        return max(tail, f)
    i = bisect.bisect_right(gap_starts, s) - 1  # the gap holding [s, f)
    gs, ge = gap_starts[i], gap_ends[i]
    parts = [(a, b) for a, b in ((gs, s), (f, ge)) if b > a]
    gap_starts[i : i + 1] = [a for a, _ in parts]
    gap_ends[i : i + 1] = [b for _, b in parts]
    if len(gap_starts) > MAX_GAPS:
        del gap_starts[0], gap_ends[0]
    return tail


def _place(
    problem: Problem, allowed: np.ndarray, keys: np.ndarray, chain: np.ndarray, deadline: float = float("inf")
) -> tuple[Schedule, list[list[int]]] | str:
    """The list-scheduling loop: the schedule and each processor's tasks in placement order, or a
    message when memory blocks every ready task.

    Decisions run in time order. A task whose predecessors are all placed is ready: it goes to a
    processor then (its only one, its group's, or the one where it could start first given the
    data-ready time, the processor's queued work and its free memory) and waits there. A processor
    that comes free starts the highest-priority task whose data has arrived, or else idles until
    the earliest arrival; a task that would overflow memory waits for a release on that processor.
    Past ``deadline`` (`time.perf_counter`) it stops with a message.
    """
    n, P = problem.num_tasks, problem.num_processors
    rank_order = np.lexsort((np.arange(n), -keys))  # position 0 = highest priority
    order = rank_order.tolist()
    position = np.empty(n, dtype=np.int64)
    position[rank_order] = np.arange(n)

    src, dst = problem.edges[:, 0], problem.edges[:, 1]
    pptr, psrc, peid = csr(n, dst, src)  # incoming edges, grouped by target
    pptr, psrc, pdel = pptr.tolist(), psrc.tolist(), problem.delay[peid].tolist()
    all_src, all_dst = np.concatenate([src, chain[:, 0]]), np.concatenate([dst, chain[:, 1]])
    sptr, stgt, _ = csr(n, all_src, all_dst)
    sptr, stgt = sptr.tolist(), stgt.tolist()
    indeg = np.bincount(all_dst, minlength=n).tolist()
    pos_of = position.tolist()

    fixed, pattern, patterns = _candidates(allowed)
    dur, mem, group = problem.duration.tolist(), problem.mem_delta.tolist(), problem.group.tolist()
    don, lnk = _speeds(problem)
    cap, cur, avail, backlog = problem.capacity.tolist(), [0] * P, [0] * P, [0] * P
    unlimited = not has_memory_limits(problem)
    gproc: dict[int, int] = {}
    proc, start, end = [-1] * n, [0] * n, [0] * n
    sequence: list[int] = []
    waiting: list[list[tuple[int, int]]] = [[] for _ in range(P)]  # (data-ready time, position)
    arrived: list[list[int]] = [[] for _ in range(P)]  # positions whose data has arrived
    blocked: list[list[tuple[int, int]]] = [[] for _ in range(P)]  # (allocation, position)
    assigned = [-1] * n  # the processor whose queues hold a ready task (entries elsewhere are stale)
    # a task may move to another processor while memory blocks it: not when it is bound to one, or
    # to its group's (the group's other tasks decide where it runs)
    movable = [fixed[t] < 0 and group[t] < 0 for t in range(n)]
    num_blocked = [0]
    events: list[tuple[int, int]] = []  # (time, processor): when a processor may start a task
    heappush, heappop = heapq.heappush, heapq.heappop

    def next_time(q: int) -> int:
        if arrived[q]:
            return avail[q]
        if waiting[q]:
            w = waiting[q][0][0]
            return w if w > avail[q] else avail[q]
        return -1

    def make_ready(t: int, now: int) -> None:
        lo, hi = pptr[t], pptr[t + 1]
        q = fixed[t]
        if q < 0 and group[t] >= 0:
            q = gproc.get(group[t], -1)
        if q >= 0:
            ready = arrival(t, q)
        elif don is not None or lnk is not None:  # heterogeneous: where it would finish first
            best, m = None, mem[t]
            for r in patterns[pattern[t]]:
                c = arrival(t, r)
                free = (avail[r] if avail[r] > now else now) + backlog[r]
                key = (cur[r] + m > cap[r], (free if free > c else c) + (dur[t] if don is None else don[t][r]))
                if best is None or key < best:
                    best, q, ready = key, r, c
            if group[t] >= 0:
                gproc[group[t]] = q
        else:
            # the latest arrival counting every delay (top, from processor top_q); on top_q the
            # task waits instead for the latest arrival from elsewhere or the latest end there
            top, top_q, other = 0, -1, 0
            for k in range(lo, hi):
                p = psrc[k]
                c = end[p] + pdel[k]
                if c > top:
                    top, top_q = c, proc[p]
            for k in range(lo, hi):
                p = psrc[k]
                c = end[p] if proc[p] == top_q else end[p] + pdel[k]
                if c > other:
                    other = c
            if unlimited:  # the same choice, without the memory flag, and stopping early (`_earliest_of`)
                least = -1
                for r in patterns[pattern[t]]:
                    if q >= 0 and least <= top and (least <= other or r > top_q):
                        break  # every processor left starts it at ``top`` at the earliest
                    c = top if r != top_q else other
                    free = (avail[r] if avail[r] > now else now) + backlog[r]
                    if free < c:
                        free = c
                    if q < 0 or free < least:
                        least, q, ready = free, r, c
            else:
                best, m = None, mem[t]
                for r in patterns[pattern[t]]:
                    c = top if r != top_q else other
                    free = (avail[r] if avail[r] > now else now) + backlog[r]
                    key = (cur[r] + m > cap[r], free if free > c else c)
                    if best is None or key < best:
                        best, q, ready = key, r, c
            if group[t] >= 0:
                gproc[group[t]] = q
        heappush(waiting[q], (ready, pos_of[t]))
        assigned[t] = q
        backlog[q] += dur[t] if don is None else don[t][q]
        heappush(events, (next_time(q), q))

    def arrival(t: int, r: int) -> int:
        """When task ``t``'s data is on processor ``r`` (all its predecessors placed)."""
        return _arrival(t, r, pptr, psrc, pdel, proc, end, lnk)

    def move(t: int, r: int) -> None:
        """Re-queue a memory-blocked task on processor ``r``, where it fits."""
        q = assigned[t]
        backlog[q] -= dur[t] if don is None else don[t][q]
        backlog[r] += dur[t] if don is None else don[t][r]
        assigned[t] = r
        heappush(waiting[r], (arrival(t, r), pos_of[t]))
        heappush(events, (next_time(r), r))

    def room_elsewhere(t: int, q: int) -> int:
        """Another allowed processor where task ``t``'s allocation fits now (the one free first), or -1."""
        best, pick = None, -1
        for r in patterns[pattern[t]]:
            if r != q and cur[r] + mem[t] <= cap[r]:
                key = (max(avail[r], arrival(t, r)) + backlog[r] + (0 if don is None else don[t][r]), r)
                if best is None or key < best:
                    best, pick = key, r
        return pick

    for t in range(n):
        if indeg[t] == 0:
            make_ready(t, 0)

    clock, ticks = time.perf_counter, 0
    while events:
        ticks += 1
        if not ticks & 4095 and clock() > deadline:
            return f"time limit: stopped after placing {len(sequence)} of {n} tasks"
        when, q = heappop(events)
        now = next_time(q)
        if now != when:  # stale: every change of next_time(q) pushed its own event
            continue
        wait, here = waiting[q], arrived[q]
        while wait and wait[0][0] <= now:
            heappush(here, heappop(wait)[1])
        t = -1
        while here:
            pos = heappop(here)
            if assigned[order[pos]] != q:  # moved to another processor meanwhile
                continue
            if cur[q] + mem[order[pos]] > cap[q]:  # cur <= cap always, so only an allocation fails
                u = order[pos]
                r = room_elsewhere(u, q) if movable[u] else -1
                if r >= 0:  # it fits elsewhere now: go there rather than wait for a release here
                    move(u, r)
                else:
                    heappush(blocked[q], (mem[u], pos))
                    num_blocked[0] += 1
            else:
                t = order[pos]
                break
        if t < 0:
            if next_time(q) >= 0:
                heappush(events, (next_time(q), q))
            continue
        m = mem[t]
        proc[t], start[t] = q, now
        d = dur[t] if don is None else don[t][q]
        end[t] = avail[q] = now + d
        backlog[q] -= d
        sequence.append(t)
        if m:
            cur[q] += m
            if m < 0:  # room freed: blocked tasks that now fit may start, here or moved here
                heap = blocked[q]
                while heap and cur[q] + heap[0][0] <= cap[q]:
                    pos = heappop(heap)[1]
                    num_blocked[0] -= 1
                    if assigned[order[pos]] == q:
                        heappush(here, pos)
                if num_blocked[0]:
                    for r in range(P):
                        if r == q or not blocked[r]:
                            continue
                        for _, pos in list(blocked[r]):
                            u = order[pos]
                            if assigned[u] == r and movable[u] and allowed[u, q] and cur[q] + mem[u] <= cap[q]:
                                move(u, q)  # its entry in blocked[r] is now stale
        for k in range(sptr[t], sptr[t + 1]):
            v = stgt[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                make_ready(v, now)
        if next_time(q) >= 0:
            heappush(events, (next_time(q), q))

    if len(sequence) < n:
        stuck = [order[pos] for q, heap in enumerate(blocked) for _, pos in heap if assigned[order[pos]] == q]
        if not stuck:
            t = next(t for t in range(n) if proc[t] < 0)
            raise ValueError(
                f"orders: the given orders contradict the precedences ({problem.task_label(t)} can never start)"
            )
        t = stuck[0]
        return _Stuck(
            f"memory: {len(stuck)} ready tasks fit on no processor (first: {problem.task_label(t)}, "
            f"allocating {mem[t]}); {n - len(sequence)} tasks unplaced",
            [(u, assigned[u]) for u in stuck],
            proc,
        )
    orders: list[list[int]] = [[] for _ in range(P)]
    for t in sequence:
        orders[proc[t]].append(t)
    schedule = Schedule(processor=np.asarray(proc, dtype=np.int64), start=np.asarray(start, dtype=np.int64))
    return schedule, orders


def _as_late_as_possible(problem: Problem, schedule: Schedule, orders: list[list[int]]) -> Schedule:
    """The same processor ``orders`` timed as late as possible within the same makespan (memory
    is unchanged: each processor's order, and so its running sum, stays the same)."""
    reverse = Problem(
        duration=problem.duration,
        allowed=problem.allowed,
        edges=problem.edges[:, ::-1],
        delay=problem.delay,
        duration_on=problem.duration_on,
        link=problem.link.T if problem.link is not None else None,
    )
    back = time_orders(reverse, [order[::-1] for order in orders])
    return Schedule(processor=schedule.processor, start=schedule.makespan(problem) - back.end(problem))
