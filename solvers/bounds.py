"""Lower bounds on the objective of any valid schedule, reported beside every result.

- ``critical_path``: the longest chain of durations (plus transfer delays between tasks that are
  bound to different processors).
- ``processor_work``: the work bound to one processor, or the total work spread over all of them.
- ``head_work_tail`` (makespan): for each processor, the earliest any of its tasks can start, plus
  its work, plus the shortest time still needed after its last task.

`one_processor_bound` is stronger and costlier, and not among these: one processor alone under its
memory limit, every other task free, solved exactly by a search over its sequences (where it runs few
kinds of many alike tasks, and holds few of them at once).

Example
-------
>>> from solvers import Problem, lower_bounds
>>> p = Problem(duration=[2, 3, 4], allowed=[[1, 0], [0, 1], [0, 1]], edges=[[0, 1]], delay=[1])
>>> lower_bounds(p)
{'critical_path': 6, 'processor_work': 7, 'head_work_tail': 7}
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

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


def one_processor_bound(
    problem: Problem,
    processor: int,
    chains: Sequence[Sequence[int]] = (),
    objective: str = "span",
    *,
    deadline: float | None = None,
    max_states: int = 100_000,
    upper: int | None = None,
) -> tuple[int | None, bool]:
    """A lower bound from ``processor`` alone, under its memory: the optimum of the relaxation in which
    every other task has a processor of its own and no memory limit; and whether it is that optimum.

    Every task must be bound to one processor. In the relaxation the other tasks start as soon as their
    inputs are there, so all that binds ``processor`` is a least *lag* from the end of each of its
    tasks to the start of a later one of its tasks (the longest path between them through other
    tasks, with the transfers paid there). Its tasks run one at a time, so its memory after each
    depends only on which have run, and a sequence timed at the earliest starts is the best schedule
    of that sequence. The search runs over sequences, breadth first by the number of tasks run: a
    state is how far each chain has got, with the machine's free time and the ends still awaited by
    a lag; of two states with the same counts one that is nowhere later is kept. ``chains`` are tasks
    of ``processor`` that are interchangeable, in the order they must start (as for
    `solvers.cpsat.cpsat`'s ``symmetry``: the caller vouches that this removes only symmetric
    schedules); every other task of ``processor`` is a chain of its own. The counts of the chains are
    the state, so the search is small where ``processor`` runs few kinds of many alike tasks (a
    pipeline rank: its stages' forward and backward passes of every micro-batch).

    ``objective``: ``span`` bounds ``processor``'s span (end of its last task minus start of its first),
    hence the largest; ``makespan`` adds each task's earliest start and the least time after it.
    Past ``deadline`` (``time.perf_counter()``) or ``max_states`` states in one step, the least bound
    of the states reached by then is returned, with ``False``: every schedule passes through one of
    them (or one that is nowhere earlier). ``upper``: the objective of a schedule known to exist; no
    sequence as long is looked at (the result is the same). Where no sequence fits in the memory
    limit, ``(None, True)``: no schedule exists.

    >>> from solvers import Problem
    >>> # two jobs, each a task on processor 0, one of 5 elsewhere, then another on 0; memory for one job
    >>> p = Problem(duration=[1, 5, 1, 1, 5, 1], allowed=[[1, 0, 0], [0, 1, 0], [1, 0, 0]] * 2,
    ...             edges=[[0, 1], [1, 2], [3, 4], [4, 5]], mem_delta=[1, 0, -1] * 2, capacity=[1, 9, 9])
    >>> one_processor_bound(p, 0, [[0, 3], [2, 5]])
    (14, True)
    """
    if objective not in ("span", "makespan"):
        raise ValueError(f"unknown objective {objective!r}; valid: makespan, span")
    fixed = problem.fixed_processor()
    if (fixed < 0).any():
        raise ValueError("one_processor_bound needs every task bound to one processor")
    mine = np.flatnonzero(fixed == processor)
    if len(mine) == 0:
        return 0, True
    dur = problem.duration.tolist()
    where: dict[int, tuple[int, int]] = {}
    queues: list[list[int]] = []
    for chain in chains:
        chain = [int(t) for t in chain]
        if not chain or fixed[chain[0]] != processor:
            continue
        if any(fixed[t] != processor or t in where for t in chain):
            raise ValueError("chains: each must lie on one processor, and no task may be in two")
        where.update((t, (len(queues), i)) for i, t in enumerate(chain))
        queues.append(chain)
    for t in mine.tolist():
        if t not in where:
            where[t] = (len(queues), 0)
            queues.append([t])
    lags = _lags(problem, fixed, processor)  # b -> [(a, lag)]: b starts at least lag after a ends
    head = tail = None
    if objective == "makespan":
        head, tail = (x.tolist() for x in heads_tails(problem))
    # tail on the processor: least time from a task's start to the end of the processor's last task
    after = {t: dur[t] + (tail[t] if tail is not None else 0) for t in mine.tolist()}
    waiting: dict[int, list[tuple[int, int]]] = {}  # a -> [(b, lag)]
    for b, pre in lags.items():
        for a, lag in pre:
            waiting.setdefault(a, []).append((b, lag))
    order = problem.topological_order().tolist()
    for t in reversed([t for t in order if fixed[t] == processor]):  # a lag leads forward in this order
        for b, lag in waiting.get(t, ()):
            after[t] = max(after[t], dur[t] + lag + after[b])
    mem = (problem.mem_delta.tolist(), int(problem.capacity[processor]))
    return _sequences(queues, where, dur, lags, waiting, after, head, tail, mem, deadline, max_states, upper)


def _lags(problem: Problem, fixed: np.ndarray, q: int) -> dict[int, list[tuple[int, int]]]:
    """For each task ``b`` of processor ``q``: the tasks ``a`` of ``q`` from whose end a path through
    tasks of other processors leads to ``b``'s start, with the longest such path (`one_processor_bound`)."""
    order = problem.topological_order().tolist()
    delay = problem.fixed_delays().tolist()
    out: list[list[tuple[int, int]]] = [[] for _ in range(problem.num_tasks)]
    for (u, v), d in zip(problem.edges.tolist(), delay, strict=True):
        out[u].append((v, d))
    dur, on_q = problem.duration.tolist(), (fixed == q).tolist()
    reach: list[dict[int, int] | None] = [None] * problem.num_tasks  # task -> {a of q: longest from a's end}
    lags: dict[int, list[tuple[int, int]]] = {}
    for u in order:
        if on_q[u]:
            if reach[u]:
                lags[u] = sorted(reach[u].items())
            here, extra = {u: 0}, 0
        else:
            here, extra = reach[u], dur[u]
        if not here:
            continue
        for v, d in out[u]:
            into = reach[v]
            if into is None:
                into = reach[v] = {}
            for a, x in here.items():
                if x + extra + d > into.get(a, -1):
                    into[a] = x + extra + d
        reach[u] = None  # done with it
    return lags


def _sequences(
    queues, where, dur, lags, waiting, after, head, tail, mem, deadline, max_states, upper
) -> tuple[int | None, bool]:
    """`one_processor_bound`'s search over sequences (see there)."""
    delta, cap = mem
    K = len(queues)
    held = [[0] for _ in queues]  # memory after the first i tasks of each queue
    done_work = [[0] for _ in queues]
    for k, queue in enumerate(queues):
        for t in queue:
            held[k].append(held[k][-1] + delta[t])
            done_work[k].append(done_work[k][-1] + dur[t])
    work = sum(w[-1] for w in done_work)
    n = sum(len(q) for q in queues)
    best = upper  # no sequence as long as this need be looked at
    # a state: counts -> list of (lb, machine free, value so far, ((open task, its end), ...))
    level: dict[tuple[int, ...], list] = {tuple([0] * K): [(0, 0, 0, ())]}
    for _step in range(n):
        nxt: dict[tuple[int, ...], list] = {}
        size = 0
        for c, front in level.items():
            if size > max_states or (deadline is not None and time.perf_counter() > deadline):
                return _least(level, best), False
            used = sum(held[k][c[k]] for k in range(K))
            left = work - sum(done_work[k][c[k]] for k in range(K))
            for k in range(K):
                i = c[k]
                if i == len(queues[k]):
                    continue
                t = queues[k][i]
                pre = lags.get(t, ())
                if any(c[where[a][0]] <= where[a][1] for a, _ in pre):
                    continue  # an input is still to come
                if used + max(delta[t], 0) > cap:
                    continue
                nc = c[:k] + (i + 1,) + c[k + 1 :]
                for _, free, value, ends in front:
                    end_of = dict(ends)
                    start = free if head is None else max(free, head[t])
                    for a, lag in pre:
                        start = max(start, end_of[a] + lag)
                    end = start + dur[t]
                    value2 = max(value, end + (tail[t] if tail is not None else 0))
                    end_of[t] = end
                    lb = max(value2, start + left + (_min_tail(tail, queues, nc) if tail is not None else 0))
                    opened = []
                    for a, e in end_of.items():
                        most = -1
                        for b, lag in waiting.get(a, ()):
                            kb, ib = where[b]
                            if nc[kb] <= ib:
                                most = max(most, lag)
                                lb = max(lb, e + lag + after[b])
                        if most >= 0:  # an end that releases nothing after the machine is free is as good as
                            opened.append((a, max(e, end - most)))  # any other such: one state, not many
                    for kk in range(K):
                        if nc[kk] < len(queues[kk]):
                            lb = max(lb, end + after[queues[kk][nc[kk]]])
                    if best is not None and lb >= best:
                        continue
                    if sum(nc) == n:
                        best = value2 if best is None else min(best, value2)
                        continue
                    opened.sort()
                    nxt.setdefault(nc, []).append((lb, end, value2, tuple(opened)))
                    size += 1
                    if size % 4096 == 0 and deadline is not None and time.perf_counter() > deadline:
                        return _least(level, best), False
        if size > max_states or (deadline is not None and time.perf_counter() > deadline):
            return _least(level, best), False
        filtered = {}
        for c, front in nxt.items():
            if deadline is not None and time.perf_counter() > deadline:
                return _least(level, best), False
            filtered[c] = _pareto(front)
        level = filtered
        if not level:
            break
    return best, True  # None: no sequence fits the memory


def _min_tail(tail, queues, c) -> int:
    """Least tail among the tasks still to run (makespan)."""
    return min((tail[queue[i]] for queue, i in zip(queues, c, strict=True) if i < len(queue)), default=0)


def _pareto(front: list) -> list:
    """The states of ``front`` (same counts) that no other is nowhere later than."""
    vectors = sorted(((s[1], s[2], *(e for _, e in s[3])), s) for s in front)
    kept: list = []
    out: list = []
    for vec, s in vectors:
        for k in kept:
            if all(map(int.__le__, k, vec)):
                break
        else:
            kept.append(vec)
            out.append(s)
    return out


def _least(level: dict, best: int | None) -> int:
    """The least bound of the states of ``level`` (and of the best sequence found)."""
    least = min((s[0] for front in level.values() for s in front), default=best or 0)
    return least if best is None else min(least, best)
