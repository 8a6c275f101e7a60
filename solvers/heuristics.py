"""More list-scheduling heuristics with insertion, and ``best``: all of them, the best kept.

- `cpop` (Topcuoglu et al., 2002): priority is the upward plus the downward rank; the tasks of one
  critical path all go to one processor, so that path pays no transfer; the rest go where they
  finish first, inserted into idle gaps. O(V P g + E) like `solvers.listsched.heft` (g: idle gaps
  scanned per placement).
- `peft` (Arabnejad and Barbosa, 2014): a lookahead. The optimistic cost table ``OCT[t, q]`` is the
  shortest time still needed after task ``t`` ends on processor ``q``, each later task on its best
  processor for it, transfers counted where they change processor. Priority is the mean of a row;
  each task goes where its finish time plus ``OCT`` is least, inserted into idle gaps. Building the
  table is O(E P) (vectorised level by level), placement O(V P g).
- `fcp` (Radulescu and van Gemund, 1999): bottom-level priority among at most P ready tasks, each
  appended to the processor that comes idle first or to the one its last message comes from.
  O(V (P + log P) + E).
- `cpop_ends`: CPoP with saga's downward rank, which runs to each task's end
  (`downward_rank_to_ends`); every task of the greatest priority goes to the critical processor.
  O(V P g + E) like `cpop`.
- `cpop_saga`: CPoP as saga runs it: HEFT's placement (nothing pinned) with CPoP's priority plus
  each task's own duration. O(V P g + E).
- `fcp_ends`: FCP as saga places it, the second candidate being the processor of the predecessor
  that ends last, and the processor that comes idle first keeping ties. O(V (P + log P) + E).
- `best`: `heft`, `list_schedule`, `cpop`, `peft` and `fcp` in turn within the time limit, then FCP
  and HEFT again with the transfers of their priority weighted 0 and 2 (`RANK_WEIGHTS`, candidates
  ``fcp-t0``, ``fcp-t2``, ``heft-t0`` and ``heft-t2``) and HEFT with 0.25 (`HEFT_RANK_WEIGHTS`,
  ``heft-t0.25``), HEFT with the link cost averaged over pairs that include a processor with
  itself (`pair_weight`, ``heft-pairs``), ``cpop-ends`` (`cpop_ends`, which wins where transfers
  dominate), ``fcp-ends`` (`fcp_ends`) and ``cpop-saga`` (`cpop_saga`). On unequal processors or
  links, ``heft`` and ``heft-pairs`` run again with `TIE_ORDERS` random processor orders breaking
  ties between equal finishes (``heft-ties<k>``, ``heft-pairs-ties<k>``). The schedule of least
  objective is then polished by moves on its critical chain (`solvers.polish.polish`, with the
  fixed effort `POLISH_EFFORT`, so the result does not depend on the machine) and returned;
  ``info["candidates"]`` lists what each gave (`candidates`, then ``polish``), and
  ``info["chosen"]`` names the heuristic, with ``+polish`` where polishing improved it.

  Why the variants: HEFT's schedule depends on how its rank weighs transfers before anything is
  placed (Zhao and Sakellariou, 2003, compared mean, best- and worst-case weights and found no
  weight best everywhere), and FCP's on how its bottom level does. Each HEFT variant costs one more
  HEFT run, each FCP variant one more FCP run (a fraction of HEFT's); on the layered 5,000-task,
  32-processor instances of `benchmarks/solvers_bench.py`, HEFT with weight 0 gives 1791 / 1765 /
  1777 where weight 1 gives 1813 / 1779 / 1798 (seeds 0-2). On its layered 100-task instances on
  32 processors, FCP with weights 0 and 2 moved `best`'s median over 10 seeds from 209 to 206,
  where saga's FCP gives 208.

Like `heft`, `cpop` and `peft` insert into idle gaps only without memory limits and fixed orders:
with them, they keep list scheduling's placement (memory is the running sum of each processor's
order) with their own priority, and ``info["variant"]`` says so.

Example
-------
>>> from solvers import Problem
>>> p = Problem(duration=[2, 3, 3, 2], num_processors=2, edges=[[0, 1], [0, 2], [1, 3], [2, 3]],
...             delay=[4, 4, 4, 4])
>>> [get(p).objective for get in (cpop, peft)]
[10, 10]
>>> r = best(p)
>>> r.objective, " ".join(sorted(r.info["candidates"]))
(10, 'cpop cpop-ends cpop-saga fcp fcp-ends fcp-t0 fcp-t2 heft heft-pairs heft-t0 heft-t0.25 heft-t2 list peft polish')
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections import deque

import numpy as np

from solvers.bounds import lower_bound
from solvers.graph import csr, longest_from_sources, longest_to_sinks
from solvers.listsched import (
    _adjacency,
    _arrival,
    _mean_link,
    _schedule,
    _speeds,
    check_transfer_weight,
    downward_rank,
    effective_allowed,
    has_memory_limits,
    heft,
    infeasible_reason,
    list_schedule,
    mean_delays,
    mean_durations,
    upward_rank,
)
from solvers.polish import polish
from solvers.problem import OBJECTIVES, UNLIMITED, Problem, Result, Schedule


def _run(problem: Problem, name: str, objective: str, keys, choice, time_limit: float | None) -> Result:
    """``keys()``: the priority, computed only for a problem that may have a schedule."""
    if infeasible_reason(problem, effective_allowed(problem)):  # `_schedule` says why
        return _schedule(problem, name, objective, "index", None, time_limit)
    if has_memory_limits(problem):
        result = _schedule(problem, name, objective, keys(), None, time_limit)
        result.info["variant"] = f"list placement with {name}'s priority (memory limits)"
        return result
    return _schedule(problem, name, objective, keys(), None, time_limit, insertion=True, choice=choice)


def critical_path(problem: Problem, allowed: np.ndarray | None = None, total: np.ndarray | None = None) -> np.ndarray:
    """The tasks of one critical path, from a source to a sink, by upward plus downward rank (mean
    transfer delays counted; ties to the lower index). ``total``: that sum, when already known.

    >>> from solvers import Problem
    >>> p = Problem(duration=[1, 5, 2, 1], num_processors=2, edges=[[0, 1], [0, 2], [1, 3], [2, 3]])
    >>> critical_path(p).tolist()
    [0, 1, 3]
    """
    allowed = effective_allowed(problem) if allowed is None else allowed
    if total is None:
        total = upward_rank(problem, allowed) + downward_rank(problem, allowed)
    if problem.num_tasks == 0:
        return np.zeros(0, dtype=np.int64)
    length = total.max()
    sptr, stgt, _ = csr(problem.num_tasks, problem.edges[:, 0], problem.edges[:, 1])
    sources = np.bincount(problem.edges[:, 1], minlength=problem.num_tasks) == 0
    t = int(np.flatnonzero(sources & (total == length))[0])
    path = [t]
    while sptr[t + 1] > sptr[t]:
        succ = np.sort(stgt[sptr[t] : sptr[t + 1]])
        on = succ[total[succ] == length]
        if not len(on):  # t is a sink of the path
            break
        t = int(on[0])
        path.append(t)
    return np.asarray(path, dtype=np.int64)


def cpop(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
    """Critical-path-on-a-processor (see the module docstring). The critical processor is the one
    allowed to the most critical-path tasks, then the one that runs them fastest, then the lowest
    index; a path task not allowed there is placed like the others.

    >>> from solvers import Problem
    >>> cpop(Problem(duration=[3, 1, 1], num_processors=2)).objective
    3
    """

    def path(allowed: np.ndarray, total: np.ndarray) -> np.ndarray:  # one critical path
        return critical_path(problem, allowed, total)

    return _cpop(problem, "cpop", downward_rank, path, objective, time_limit)


def _cpop(problem: Problem, name: str, down, path, objective: str, time_limit: float | None) -> Result:
    """`cpop` and `cpop_ends`: priority is the upward rank plus ``down(problem, allowed)``; the tasks
    ``path(allowed, priority)`` go to one processor (`_on_one_processor`), the rest where they finish
    first."""
    allowed = effective_allowed(problem)
    total = np.zeros(0)

    def keys() -> np.ndarray:
        nonlocal total
        total = upward_rank(problem, allowed) + down(problem, allowed)
        return total

    def choice(allowed: np.ndarray) -> tuple[np.ndarray, None]:
        return _on_one_processor(problem, allowed, path(allowed, total)), None

    return _run(problem, name, objective, keys, choice, time_limit)


def _on_one_processor(problem: Problem, allowed: np.ndarray, path: np.ndarray) -> np.ndarray:
    """CPoP's pins: the ``path`` tasks on the processor allowed to the most of them, then the one
    that runs them fastest, then the lowest index (-1 for every other task, and for a path task
    not allowed there)."""
    pinned = np.full(problem.num_tasks, -1, dtype=np.int64)
    if len(path):
        on = problem.duration_on if problem.duration_on is not None else problem.duration[:, None]
        work = np.where(allowed[path], on[path], 0).sum(axis=0)
        q = int(np.lexsort((work, -allowed[path].sum(axis=0)))[0])  # most path tasks, then fastest
        pinned[path[allowed[path, q]]] = q
    return pinned


def downward_rank_to_ends(problem: Problem, allowed: np.ndarray | None = None) -> np.ndarray:
    """saga's CPoP downward rank: the longest path from the end of a source to the end of each task
    (mean durations and transfers, as `solvers.listsched.downward_rank`), 0 at a source. Against the
    usual one (to the task's start, its source's duration counted) it counts the task's own
    duration and not its source's. In units of 1/64 of a time step.

    >>> from solvers import Problem
    >>> p = Problem(duration=[1, 5, 2, 1], num_processors=1, edges=[[0, 1], [0, 2], [1, 3], [2, 3]])
    >>> (downward_rank_to_ends(p) / 64).tolist()
    [0.0, 5.0, 2.0, 6.0]
    """
    allowed = effective_allowed(problem) if allowed is None else allowed
    dur = mean_durations(problem, allowed)
    source = np.bincount(problem.edges[:, 1], minlength=problem.num_tasks) == 0
    inner = np.where(source, 0, dur)
    order = problem.topological_order()
    return longest_from_sources(order, problem.num_tasks, problem.edges, inner, mean_delays(problem, allowed)) + inner


def cpop_ends(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
    """CPoP as saga ranks it: priority is the upward rank plus `downward_rank_to_ends`, and every
    task whose priority is the greatest goes to the critical processor (`cpop`'s choice of it); the
    rest go where they finish first, inserted into idle gaps. `best` runs it as ``cpop-ends``. With
    transfers 5 times the computation (`benchmarks/solvers_bench.py --ccr 5`, layered, 1,000 tasks,
    seeds 0-2) it gave 1734, 1742 and 1656 on 8 processors, where `best`'s other candidates gave
    1771, 1750 and 1698 (saga's CPoP: 1695, 1763 and 1737), and 1652, 1776 and 1658 on 32 (1688, 1672
    and 1699). Of the 6 classes tried at each ratio (layered and erdos, 100 and 1,000 tasks, 8 and 32
    processors), it beat the others on those two at ccr 5 and on none at ccr 1 and 0.1.

    >>> from solvers import Problem
    >>> cpop_ends(Problem(duration=[3, 1, 1], num_processors=2)).objective
    3
    """

    def top(allowed: np.ndarray, total: np.ndarray) -> np.ndarray:  # every task of the greatest priority
        return np.flatnonzero(total == total.max()) if len(total) else np.zeros(0, dtype=np.int64)

    return _cpop(problem, "cpop-ends", downward_rank_to_ends, top, objective, time_limit)


def cpop_saga(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
    """CPoP as saga 2.1 runs it, which is HEFT's placement with CPoP's priority: saga adds a
    zero-cost source before the graph, so its downward rank of each task counts that task's own
    duration, every real task's priority (upward plus downward rank) exceeds the critical path's
    length, and no task is pinned to the critical processor. Here: the upward rank plus
    `solvers.listsched.downward_rank` plus the task's mean duration, the transfers of both ranks
    weighted ``P / (P + 1)`` (saga averages them over every pair of processors, a processor with
    itself included, where `solvers.listsched.mean_delays` already counts the chance ``1 - 1/P``
    that two tasks land on different ones); ready tasks in that order, each inserted where it
    finishes first. `best` runs it as ``cpop-saga``. On equal processors it gave saga's CPoP's
    makespan on 21 of 24 random 100-task DAGs (`benchmarks/solvers_bench.py`'s layered and
    Erdos-Renyi, 4, 8 and 32 processors, seeds 0-3; on the other three 311, 206 and 262 against
    saga's 314, 223 and 260: ties broken otherwise), where `cpop_ends` gave it on 2. O(V P g + E),
    like `cpop`.

    >>> from solvers import Problem
    >>> cpop_saga(Problem(duration=[3, 1, 1], num_processors=2)).objective
    3
    """
    allowed = effective_allowed(problem)

    def keys() -> np.ndarray:  # both ranks over the same weights, as `upward_rank` rounds them
        weight = problem.num_processors / (problem.num_processors + 1)
        dur = mean_durations(problem, allowed)
        delay = np.rint(mean_delays(problem, allowed) * weight).astype(np.int64)
        order, n, edges = problem.topological_order(), problem.num_tasks, problem.edges
        up = longest_to_sinks(order, n, edges, dur, delay) + dur  # `upward_rank(problem, allowed, weight)`
        return up + longest_from_sources(order, n, edges, dur, delay) + dur

    return _run(problem, "cpop-saga", objective, keys, None, time_limit)


def optimistic_cost_table(problem: Problem, allowed: np.ndarray | None = None) -> np.ndarray:
    """PEFT's ``OCT[t, q]``: the least time from the end of task ``t`` on processor ``q`` to the end
    of the graph when every later task may pick its processor freely (one not allowed to it costs
    nothing here, it is never chosen), paying an edge's delay only where its two tasks' processors
    differ. 0 for a sink. Computed level by level from the sinks, vectorised over the edges of a
    level: O(E P) work.

    >>> from solvers import Problem
    >>> p = Problem(duration=[1, 2], num_processors=2, edges=[[0, 1]], delay=[5])
    >>> optimistic_cost_table(p).tolist()
    [[2, 2], [0, 0]]
    """
    allowed = effective_allowed(problem) if allowed is None else allowed
    n, P = problem.num_tasks, problem.num_processors
    oct_ = np.zeros((n, P), dtype=np.int64)
    if n == 0 or len(problem.edges) == 0:
        return oct_
    src, dst = problem.edges[:, 0], problem.edges[:, 1]
    order = problem.topological_order()
    # height: edges from the end of the graph (0 for a sink); an edge's source is one level above
    # its target at least, so one level's table rows only need lower levels
    height = longest_to_sinks(order, n, problem.edges, np.ones(n, dtype=np.int64), np.zeros(len(src), dtype=np.int64))
    big = np.int64(UNLIMITED)
    link = max(1, round(_mean_link(problem)))  # the paper's mean communication cost
    # through[s, w]: time from the start of s on w to the end, or ``big`` where s may not run on w
    on = problem.duration_on if problem.duration_on is not None else problem.duration[:, None]
    through = np.where(allowed, on, big)
    cheapest = through.min(axis=1)
    by_level = np.argsort(height[src], kind="stable")
    bounds = np.searchsorted(height[src][by_level], np.arange(1, int(height.max()) + 2))
    tasks_by_level = np.argsort(height, kind="stable")
    task_bounds = np.searchsorted(height[tasks_by_level], np.arange(0, int(height.max()) + 2))
    for level in range(1, int(height.max()) + 1):
        e = by_level[bounds[level - 1] : bounds[level]]
        u, v, d = src[e], dst[e], problem.delay[e] * link
        value = np.minimum(through[v], (cheapest[v] + d)[:, None])
        np.maximum.at(oct_, u, value)
        mine = tasks_by_level[task_bounds[level] : task_bounds[level + 1]]
        through[mine] = np.where(allowed[mine], oct_[mine] + on[mine], big)
        cheapest[mine] = through[mine].min(axis=1)
    return oct_


def peft(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
    """Predict-earliest-finish-time (see the module docstring): priority is the mean optimistic cost
    over a task's allowed processors; each task goes where ``finish + OCT`` is least.

    >>> from solvers import Problem
    >>> peft(Problem(duration=[3, 1, 1], num_processors=2)).objective
    3
    """
    allowed = effective_allowed(problem)
    table = np.zeros(0)

    def keys() -> np.ndarray:
        nonlocal table
        table = optimistic_cost_table(problem, allowed)
        return np.where(allowed, table, 0).sum(axis=1) / allowed.sum(axis=1)

    def choice(allowed: np.ndarray) -> tuple[None, np.ndarray]:
        return None, table

    return _run(problem, "peft", objective, keys, choice, time_limit)


def fcp(
    problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None, transfer_weight: float = 1.0
) -> Result:
    """Fast Critical Path (Radulescu and van Gemund, 1999): priority is the bottom level with every
    delay counted in full (times ``transfer_weight``: `best`'s variants); at most P ready tasks
    compete by priority, later ones wait in arrival order (FIFO) for a place among them; each task
    is appended to one of two processors, the one that comes idle first or the one its last message
    comes from, whichever lets it start first.
    O(V (P + log P) + E) here (allowed sets are scanned; the paper's O(V log P + E) keeps the
    processors in a heap). Under memory limits: list placement with this priority. On heterogeneous
    processors the first candidate is the one where the task would end first once it is idle, and
    the choice between the two is by finish time.

    >>> from solvers import Problem
    >>> fcp(Problem(duration=[3, 1, 1], num_processors=2)).objective
    3
    """
    return _fcp(problem, "fcp", objective, time_limit, transfer_weight, ends=False)


def fcp_ends(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
    """FCP as saga places it: `fcp`, except that the second candidate is the processor of the
    predecessor that ends last (not the one whose message arrives last), and the processor that
    comes idle first keeps a tie of start times (on heterogeneous processors: of finish times).
    `best` runs it as ``fcp-ends``. On equal processors this gave saga's FCP's makespan on each of
    the 12 layered 100-task instances tried (4, 8 and 32 processors, seeds 0-3), where `fcp` gave
    the same on 1 of the 12 and differed by -5 to +15 on the others (32 processors, seed 2: 220
    against saga's 205). It took `best`'s candidates to saga's best heuristic without polishing on the two
    classes of `benchmarks/solvers_bench.py` where they had stayed above it (layered, 100 and 1,000
    tasks on 32 processors: 215 to 205 and 725 to 720, saga's FCP 205 and 720; medians of seeds
    0-2). O(V (P + log P) + E), like `fcp`.

    >>> from solvers import Problem
    >>> fcp_ends(Problem(duration=[3, 1, 1], num_processors=2)).objective
    3
    """
    return _fcp(problem, "fcp-ends", objective, time_limit, 1.0, ends=True)


def _fcp(problem: Problem, name: str, objective: str, time_limit: float | None, transfer_weight: float, *, ends: bool):
    check_transfer_weight(transfer_weight)
    allowed = effective_allowed(problem)

    def keys() -> np.ndarray:
        return fcp_priority(problem, allowed, transfer_weight)

    if infeasible_reason(problem, allowed) or has_memory_limits(problem):
        return _run(problem, name, objective, keys, None, time_limit)
    t0 = time.perf_counter()
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if time_limit is not None and not time_limit > 0:  # also NaN
        raise ValueError(f"time_limit: expected a positive number of seconds, got {time_limit}")
    problem.require_rigid(name)
    deadline = t0 + time_limit if time_limit is not None else float("inf")
    placed = _fcp_place(problem, allowed, keys(), deadline, ends)
    bound = lower_bound(problem, objective)
    if placed is None:
        return Result(None, "unknown", None, bound, time.perf_counter() - t0, name, objective,
                      {"reason": "the time limit ended the run"})  # fmt: skip
    value = placed.objective(problem, objective)
    status = "optimal" if value <= bound else "feasible"
    return Result(placed, status, value, bound, time.perf_counter() - t0, name, objective, {"variant": name})


def fcp_priority(problem: Problem, allowed: np.ndarray, transfer_weight: float = 1.0) -> np.ndarray:
    """FCP's priority: the bottom level, each task's mean duration plus the longest path after it,
    every delay counted in full (times the mean link factor and ``transfer_weight``), in units of
    1/64 of a time step.

    >>> from solvers import Problem
    >>> p = Problem(duration=[2, 3], num_processors=2, edges=[[0, 1]], delay=[1])
    >>> (fcp_priority(p, effective_allowed(p)) / 64).tolist()
    [6.0, 3.0]
    """
    dur = mean_durations(problem, allowed)  # in 1/64 time steps, like the delays
    delay = np.rint(problem.delay * (_mean_link(problem) * transfer_weight * 64)).astype(np.int64)
    return longest_to_sinks(problem.topological_order(), problem.num_tasks, problem.edges, dur, delay) + dur


def _fcp_place(
    problem: Problem, allowed: np.ndarray, keys: np.ndarray, deadline: float, ends: bool = False
) -> Schedule | None:
    """FCP's placement; ``ends``: `fcp_ends`'s second candidate and ties."""
    n, P = problem.num_tasks, problem.num_processors
    pptr, psrc, pdel, sptr, stgt, indeg = _adjacency(problem)
    sets = [np.flatnonzero(row).tolist() for row in allowed] if not allowed.all() else None
    every = list(range(P))
    dur, group, key = problem.duration.tolist(), problem.group.tolist(), keys.tolist()
    don, lnk = _speeds(problem)
    gproc: dict[int, int] = {}
    proc, start, end = [-1] * n, [0] * n, [0] * n
    idle = [0] * P  # when each processor's last task ends
    ready: list[tuple[int, int]] = []  # at most P tasks by priority
    fifo: deque[int] = deque()  # the others, in the order they became ready

    def add(t: int) -> None:
        if len(ready) < P:
            heapq.heappush(ready, (-key[t], t))
        else:
            fifo.append(t)

    for t in range(n):
        if indeg[t] == 0:
            add(t)
    for done in range(n):
        if done and done % 4096 == 0 and time.perf_counter() > deadline:  # as `listsched._insert`: 4,096 first
            return None
        t = heapq.heappop(ready)[1]
        if fifo:
            u = fifo.popleft()
            heapq.heappush(ready, (-key[u], u))
        mine = sets[t] if sets is not None else every
        if group[t] >= 0 and group[t] in gproc:
            cands = [gproc[group[t]]]
        else:
            if don is None:
                first = min(mine, key=idle.__getitem__)
            else:  # heterogeneous processors: the one where the task would end first once it is idle
                first = min(mine, key=lambda q: idle[q] + don[t][q])
            cands = [first]
            last, enabling = -1, -1
            for k in range(pptr[t], pptr[t + 1]):
                u = psrc[k]
                if ends:  # saga: the predecessor that ends last
                    c = end[u]
                else:  # the paper: the message that arrives last
                    c = end[u] + (pdel[k] if lnk is None else pdel[k] * lnk[proc[u]][first])
                if c > last:
                    last, enabling = c, proc[u]
            if enabling >= 0 and enabling != first and allowed[t, enabling]:
                cands.append(enabling)
        best = None
        for q in cands:
            s = max(idle[q], _arrival(t, q, pptr, psrc, pdel, proc, end, lnk))
            d = dur[t] if don is None else don[t][q]
            if ends:  # by start (finish on unequal processors); the first candidate keeps ties
                v = s + d if don is not None else s
                if best is None or v < best[0]:
                    best = (v, s, q)
            elif best is None or (s + d, s, q) < best:
                best = (s + d, s, q)
        _, s, q = best
        proc[t], start[t], end[t] = q, s, s + dur[t] if don is None else s + don[t][q]
        idle[q] = end[t]
        if group[t] >= 0:
            gproc.setdefault(group[t], q)
        for k in range(sptr[t], sptr[t + 1]):
            v = stgt[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                add(v)
    return Schedule(np.array(proc, dtype=np.int64), np.array(start, dtype=np.int64))


RANK_WEIGHTS = (0.0, 2.0)
"""The transfer weights of the priority that `best` runs HEFT and FCP with, after their own weight
1: candidates ``heft-t0``, ``heft-t2``, ``fcp-t0`` and ``fcp-t2``."""

HEFT_RANK_WEIGHTS = (*RANK_WEIGHTS, 0.25)
"""The transfer weights that `best` runs HEFT with (FCP: `RANK_WEIGHTS`): also ``heft-t0.25``. Chosen
on instances that no benchmark table uses (`benchmarks/solvers_bench.py`'s layered and Erdos-Renyi
DAGs of 100, 300 and 1,000 tasks, equal and unequal processors, 4 to 32 processors, seeds 10-15:
288 instances): of the weights 0.1, 0.25, 0.5, 0.75, 1.25, 1.5 and 3, each one alone added to
`best`'s other candidates, 0.25 gave a schedule shorter than all of them most often (14 instances,
with 0.1) and by the most on average (0.043%; the others 0.012-0.042%). One more HEFT run: 0.27 s of
`best`'s 5.3 s on layered 5,000-task DAGs on 32 unequal processors, where it takes seed 1 from 3040
to 3034 (saga's HEFT: 3034). After polishing, on those 288: 12 shorter, 1 longer (756 to 767), 275
equal. A new least candidate can polish to a longer schedule than the old one did: layered 300 tasks
on 16 unequal processors, seed 2, 520 to 526 (`benchmarks/results/solvers_saga_unseen-2core-vm.txt`)."""


POLISH_EFFORT = 3
"""`best` polishes the best heuristic's schedule (`solvers.polish.polish`) until it has timed
``POLISH_EFFORT * min(tasks + edges, POLISH_SIZE) * processors`` tasks (its ``effort``). One such
unit took about as long as all the heuristics on equal processors (layered, 1,000 tasks, 32
processors) and a third of that on unequal ones, where more of them run. A count, not seconds, so
`best` stays deterministic (unless its own ``time_limit`` ends the polishing first). On the random
DAGs of `benchmarks/solvers_bench.py` (3 seeds, medians) it took the four classes of 100 and 1,000
tasks where the heuristics alone were above saga's best heuristic to or below it: layered 100 tasks
on 32 processors 215 -> 204 (saga's FCP 205), 1,000 on 32 725 -> 717 (saga's 720); with transfers 5
times the computation, layered 100 on 8 unequal processors 661 -> 630 (saga's HEFT 635); with a
tenth, layered 100 on 32 163 -> 161 (saga's 161). With 2 instead of 3: 205, 717, 641 and 163. It
costs time: `best` on layered 1,000 tasks, 32 processors, went from 0.08 to 0.42 s (saga's HEFT:
0.47 s)."""

POLISH_SIZE = 4000
"""Above this many tasks plus edges `best`'s polishing effort stops growing. On layered 5,000-task
DAGs on 32 processors (3 seeds) 3 times the full size took `best` from 0.6 to 2.5 s for 1777 ->
1774, and on unequal ones one unit on one seed of three, where `best` alone takes 1.6 s: moves on
the critical chain rarely help where a thousand tasks have no slack (`solvers.lns`). With the
limit: 1.3 s and 1774 on equal processors, 2.5 s and 3040 on unequal ones (the same as without
polishing)."""

TIE_ORDERS = 8
"""On heterogeneous processors or links (and no memory limit), `best` also runs ``heft`` and
``heft-pairs`` with this many random processor orders (seeds 1 to 8) breaking ties between equal
finishes: ``heft-ties<k>`` and ``heft-pairs-ties<k>``, up to 16 more HEFT runs (an order by index,
or one an earlier seed drew, is not run again: on 4 processors seed 1 draws the order by index, on
2 only seed 3 differs). Processors of one speed tie often, and which one a task takes changes the
rest of the schedule. saga's HEFT breaks such ties by the order of a Python set (it changes with
``PYTHONHASHSEED``): on a layered 100-task DAG on 8 unequal processors with transfers 5 times the
computation (`benchmarks/solvers_bench.py --ccr 5`, seed 0) it gave 635 where ours gave 727. On
equal processors and links a new order only renames the processors, and none is tried.

Measured on the heterogeneous classes of `benchmarks/solvers_bench.py` (100 and 1,000 tasks, 4 to 32
processors, ccr 0.1, 1 and 5, medians of 3 seeds): never worse, better on 13 of 30 classes, e.g.
layered-het 100/8 at ccr 5 678 -> 661 (saga's best 635), 1,000/32 at ccr 1 899 -> 885, erdos-het
1,000/32 at ccr 5 579 -> 577 (saga 578). `best` takes about twice as long there (layered-het, 1,000
tasks on 32 processors, ccr 1: 0.17 s -> 0.31 s; `benchmarks/results/solvers_saga_ccr-2core-vm.txt`).
Session 62 raised it from 3 to 8: on 72 heterogeneous instances that no table uses (layered and
Erdos-Renyi, 100, 300 and 1,000 tasks on 4, 8, 16 and 32 processors, seeds 10-12) orders 4 to 8 took
the least of the candidates lower on 19 (4 orders: 4, 5: 11, 6: 14), by 1.0% on average and at most
5.2%; and on saga's instances of erdos-het 300/16, seed 4, order 8 gives saga's HEFT's 306 where the
others gave 307 or more (docs/measurements.md, session 62)."""


def _tie_order(seed: int, processors: int) -> np.ndarray:
    """The random order of ``processors`` processors for HEFT's ties of seed ``seed`` (`TIE_ORDERS`)."""
    return np.random.default_rng(seed).permutation(processors)


def pair_weight(processors: int) -> float:
    """HEFT's rank with the link cost averaged over every pair of processors, a processor with
    itself counted once as a link that costs nothing: ``(P-1)/(P+1)`` of the mean between two
    different ones. saga's HEFT averages so (its network lists each processor's link to itself), and
    `best` runs it as ``heft-pairs`` (P > 1 only). On the 100-task classes of
    `benchmarks/solvers_bench.py` it took `best`'s median over 10 seeds from above saga's HEFT's to
    below it (layered, 4 heterogeneous processors: 476.5 to 471, saga 475.5).

    It is not saga's rank exactly: the weight scales `solvers.listsched.mean_delays`, which already
    counts the chance ``1 - 1/P`` that two tasks land on different processors, and saga's does not,
    so saga's weight here would be ``P/(P+1)``. That weight does not give saga's schedules either
    (session 39, layered, 5,000 tasks on 32 unequal processors, seeds 0-2: 3099, 3043 and 2740; saga's
    HEFT 3105, 3034 and 2727; this weight 3100, 3052 and 2740), so ties or the rank's precision (ours
    in 1/64 steps) differ too. It was not changed, as `best`'s table against saga was measured with it."""
    return (processors - 1) / (processors + 1)


def heft_ranked(weight: float, name: str | None = None, ties: int | None = None):
    """``(name, run)``: ``run`` is `heft` whose upward rank weighs transfers by ``weight``, and its
    result and ``name`` say ``heft-t<weight>`` unless ``name`` is given (used by `best` and
    `solvers.ils.ils`). With ``ties``, equal finishes go to processors in the random order of
    that seed (`heft`'s ``ties``; see `TIE_ORDERS`)."""
    name = name or f"heft-t{weight:g}"

    def run(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
        allowed = effective_allowed(problem)
        if infeasible_reason(problem, allowed):  # heft says why
            return heft(problem, objective=objective, time_limit=time_limit)
        rank = upward_rank(problem, allowed, weight)
        order = None if ties is None else _tie_order(ties, problem.num_processors)
        result = heft(problem, objective=objective, priority=rank, time_limit=time_limit, ties=order)
        return dataclasses.replace(result, solver=name)

    return name, run


def fcp_ranked(weight: float):
    """``(name, run)``: `fcp` with the transfers of its priority weighted by ``weight``, named
    ``fcp-t<weight>``."""
    name = f"fcp-t{weight:g}"

    def run(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
        result = fcp(problem, objective=objective, time_limit=time_limit, transfer_weight=weight)
        return dataclasses.replace(result, solver=name)

    return name, run


def candidates(problem: Problem) -> list[tuple[str, object]]:
    """`best`'s heuristics, ``(name, run)``, in the order it runs them: HEFT and the cheap ones first,
    then FCP's and HEFT's variants (see the module text). HEFT comes before list scheduling (which
    costs about as much) because it more often reaches the bound, after which `best` runs nothing
    more: at 20,000 tasks on the layered instances of `benchmarks/solvers_bench.py` it does, and
    `best` then costs one HEFT run instead of two runs."""
    runs = [("heft", heft), ("list", list_schedule), ("cpop", cpop), ("peft", peft), ("fcp", fcp)]
    runs += [fcp_ranked(w) for w in RANK_WEIGHTS] + [heft_ranked(w) for w in HEFT_RANK_WEIGHTS]
    P = problem.num_processors
    if P > 1:
        runs.append(heft_ranked(pair_weight(P), "heft-pairs"))
    runs += [("cpop-ends", cpop_ends), ("fcp-ends", fcp_ends), ("cpop-saga", cpop_saga)]
    if problem.is_heterogeneous and P > 1 and not has_memory_limits(problem):
        seen = {tuple(range(P))}  # an order already run (by index, or by an earlier seed) is not run again
        for k in range(1, TIE_ORDERS + 1):
            order = tuple(_tie_order(k, P).tolist())
            if order not in seen:
                seen.add(order)
                runs += [heft_ranked(1.0, f"heft-ties{k}", k), heft_ranked(pair_weight(P), f"heft-pairs-ties{k}", k)]
    return runs


def best(problem: Problem, /, *, objective: str = "makespan", time_limit: float | None = None) -> Result:
    """Every list heuristic (`heft`, `list_schedule`, `cpop`, `peft`, `fcp`, then `fcp` and `heft`
    with other transfer weights: `candidates`, in that order) and the best schedule they give,
    polished on its critical chain (`solvers.polish.polish`, effort `POLISH_EFFORT`) unless it is at
    the bound; the bound is the best of theirs. Each gets what is left of ``time_limit``; one that
    would start after it is skipped (the first always runs), as are those after a schedule that
    reaches the bound, and ``info["candidates"]`` says so beside each one's objective or status.

    >>> from solvers import Problem
    >>> best(Problem(duration=[3, 1, 1], num_processors=2)).info["chosen"]
    'heft'
    """
    if time_limit is not None and not time_limit > 0:  # also NaN
        raise ValueError(f"time_limit: expected a positive number of seconds, got {time_limit}")
    t0 = time.perf_counter()
    deadline = t0 + time_limit if time_limit is not None else float("inf")
    listed: dict[str, object] = {}
    chosen: Result | None = None
    polished_from = None  # the heuristic whose schedule polish improved
    results = []
    for name, run in candidates(problem):
        left = deadline - time.perf_counter()
        if left <= 0 and results:  # the first always runs (its own limit stops it)
            listed[name] = "skipped: time limit"
            continue
        if chosen is not None and chosen.objective <= max(r.lower_bound for r in results):
            listed[name] = "skipped: optimal found"  # nothing can beat a schedule at the bound
            continue
        result = run(problem, objective=objective, time_limit=None if left == float("inf") else max(left, 1e-3))
        results.append(result)
        listed[name] = result.objective if result.schedule is not None else result.status
        if result.schedule is not None and (chosen is None or result.objective < chosen.objective):
            chosen = result
    bound = max(r.lower_bound for r in results)
    if chosen is not None and chosen.objective > bound and not problem.is_moldable:
        left = deadline - time.perf_counter()
        size = min(problem.num_tasks + len(problem.edges), POLISH_SIZE)
        if left > 0:
            polished = polish(
                problem,
                chosen.schedule,
                objective=objective,
                time_limit=left,
                bound=bound,
                effort=POLISH_EFFORT * size * problem.num_processors,
            )
            listed["polish"] = polished.objective
            if polished.objective < chosen.objective:
                chosen = dataclasses.replace(chosen, schedule=polished.schedule, objective=polished.objective)
                polished_from = chosen.solver
        else:
            listed["polish"] = "skipped: time limit"
    runtime = time.perf_counter() - t0
    info = {"candidates": listed}
    if chosen is None:
        status = "infeasible" if any(r.status == "infeasible" for r in results) else "unknown"
        reasons = [r.info["reason"] for r in results if "reason" in r.info]
        if reasons:
            info["reason"] = reasons[0]
        return Result(None, status, None, bound, runtime, "best", objective, info)
    info["chosen"] = chosen.solver if polished_from is None else f"{polished_from}+polish"
    status = "optimal" if chosen.objective <= bound else "feasible"
    return Result(chosen.schedule, status, chosen.objective, bound, runtime, "best", objective, info)
