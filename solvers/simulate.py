"""Fixed-order timing: given each processor's order of tasks, the earliest start of every task.

This is the simulator behind the pipeline templates and the runner's predictions. An order that
cannot run (a processor waits for a task that sits behind a waiting task) is a `Deadlock`, which
names the first stuck task of every processor.

Example
-------
>>> from solvers import Problem, time_orders
>>> p = Problem(duration=[2, 3, 1], num_processors=2, edges=[[0, 1], [0, 2]], delay=[1, 1])
>>> time_orders(p, [[0, 2], [1]]).start.tolist()
[0, 3, 2]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from solvers.graph import csr
from solvers.problem import Problem, Schedule


class Deadlock(ValueError):
    """The given orders cannot run. ``stuck`` maps each blocked processor to its first waiting
    task; ``waits_for`` maps that task to a predecessor it still needs."""

    def __init__(self, problem: Problem, stuck: dict[int, int], waits_for: dict[int, int]):
        self.stuck, self.waits_for = stuck, waits_for
        parts = []
        for q, t in stuck.items():
            need = waits_for.get(t)
            why = f" (needs {problem.task_label(need)})" if need is not None else ""
            parts.append(f"{problem.processor_label(q)} stuck at {problem.task_label(t)}{why}")
        super().__init__("deadlock: " + "; ".join(parts))


def check_orders(problem: Problem, orders: Sequence[Sequence[int]]) -> np.ndarray:
    """Processor of each task implied by ``orders``; ``ValueError`` unless every task appears
    exactly once on a processor it may run on."""
    if len(orders) != problem.num_processors:
        raise ValueError(f"expected {problem.num_processors} orders (one per processor), got {len(orders)}")
    proc = np.full(problem.num_tasks, -1, dtype=np.int64)
    for q, order in enumerate(orders):
        idx = np.asarray(order, dtype=np.int64)
        if len(idx) and (idx.min() < 0 or idx.max() >= problem.num_tasks):
            raise ValueError(f"order of {problem.processor_label(q)} holds a task index out of range")
        twice = idx[proc[idx] >= 0] if len(idx) else idx
        if len(twice) or len(np.unique(idx)) != len(idx):
            t = int(twice[0]) if len(twice) else int(idx[np.argmax(np.bincount(idx))])
            raise ValueError(f"{problem.task_label(t)} appears more than once in the orders")
        proc[idx] = q
    missing = np.flatnonzero(proc < 0)
    if len(missing):
        raise ValueError(
            f"{problem.task_label(int(missing[0]))} is in no processor's order ({len(missing)} tasks missing)"
        )
    bad = np.flatnonzero(~problem.allowed[np.arange(problem.num_tasks), proc])
    if len(bad):
        t = int(bad[0])
        raise ValueError(f"{problem.task_label(t)} may not run on {problem.processor_label(int(proc[t]))}")
    return proc


def time_orders(
    problem: Problem, orders: Sequence[Sequence[int]], arrival: Callable[[int, int], int] | None = None
) -> Schedule:
    """Earliest-start timing of the tasks in the given per-processor orders.

    Each task starts when the task before it on its processor has ended and every predecessor has
    ended (plus the edge's transfer delay when it ran on another processor). Memory is not checked
    here; `solvers.validate` does that.

    ``arrival(e, end)``, when given, replaces ``end + delay[e]`` for every edge ``e`` whose delay is
    paid (say, a transfer over a link whose bandwidth varies in time); it must not return less.
    """
    return timed_in_order(problem, orders, arrival)[0]


def timed_in_order(
    problem: Problem, orders: Sequence[Sequence[int]], arrival: Callable[[int, int], int] | None = None
) -> tuple[Schedule, list[int]]:
    """`time_orders`, and the order in which it timed the tasks: a topological order of the edges
    and the processor orders together (`solvers.polish` re-times from it after a move)."""
    problem.require_rigid("time_orders")
    n = problem.num_tasks
    proc = check_orders(problem, orders)
    src, dst = problem.edges[:, 0], problem.edges[:, 1]
    w = problem.edge_delays(proc)
    chain_src = np.concatenate(
        [np.asarray(o[:-1], dtype=np.int64) for o in orders if len(o) > 1] or [np.zeros(0, np.int64)]
    )
    chain_dst = np.concatenate(
        [np.asarray(o[1:], dtype=np.int64) for o in orders if len(o) > 1] or [np.zeros(0, np.int64)]
    )
    all_src = np.concatenate([src, chain_src])
    all_dst = np.concatenate([dst, chain_dst])
    all_w = np.concatenate([w, np.zeros(len(chain_src), dtype=np.int64)])
    indptr, targets, eid = csr(n, all_src, all_dst)
    ptr, tgt, wt, eids = indptr.tolist(), targets.tolist(), all_w[eid].tolist(), eid.tolist()
    dur = problem.durations_on(proc).tolist()
    deg = np.bincount(all_dst, minlength=n).tolist()
    start = [0] * n
    queue = deque(i for i in range(n) if deg[i] == 0)
    timed: list[int] = []
    while queue:
        u = queue.popleft()
        timed.append(u)
        fin = start[u] + dur[u]
        for k in range(ptr[u], ptr[u + 1]):
            v = tgt[k]
            c = fin + wt[k] if arrival is None or not wt[k] else arrival(eids[k], fin)
            if c > start[v]:
                start[v] = c
            deg[v] -= 1
            if deg[v] == 0:
                queue.append(v)
    if len(timed) < n:
        _raise_deadlock(problem, orders, np.asarray(deg), src, dst)
    return Schedule(processor=proc, start=np.asarray(start, dtype=np.int64)), timed


def _raise_deadlock(problem, orders, deg, src, dst) -> None:
    stuck, waits = {}, {}
    for q, order in enumerate(orders):
        blocked = [t for t in order if deg[t] > 0]
        if blocked:
            t = blocked[0]
            stuck[q] = t
            preds = src[(dst == t) & (deg[src] > 0)]
            if len(preds):
                waits[t] = int(preds[0])
    raise Deadlock(problem, stuck, waits)


def tight_chain(problem: Problem, schedule: Schedule, objective: str = "makespan") -> list[int]:
    """A chain of tasks that fixes the ``schedule``'s objective: from the task that ends last (for
    ``span``, last on the processor of largest span) back through tasks each of which starts the
    moment the one before it in the chain lets it (a predecessor's end plus its paid delay, or the end
    of the task before it on its processor), to a task with no such cause. Shortening the schedule
    means changing something on this chain; in start order.

    >>> p = Problem(duration=[2, 3, 1], num_processors=2, edges=[[0, 1], [0, 2]], delay=[1, 1])
    >>> s = time_orders(p, [[0, 2], [1]])
    >>> tight_chain(p, s)
    [0, 1]
    """
    n = problem.num_tasks
    if not n:
        return []
    start, proc = schedule.start, schedule.processor
    end = schedule.end(problem)
    if objective == "span":
        used = np.bincount(proc, minlength=problem.num_processors) > 0
        q = int(np.argmax(np.where(used, schedule.spans(problem), -1)))  # a processor with tasks
        mine = np.flatnonzero(proc == q)
        t = int(mine[np.lexsort((mine, end[mine]))[-1]])
    else:
        t = int(np.lexsort((np.arange(n), end))[-1])
    order = np.lexsort((np.arange(n), end, start))  # on a processor: the task before ends first
    before = np.full(n, -1, dtype=np.int64)
    by_proc = order[np.argsort(proc[order], kind="stable")]
    same = proc[by_proc[1:]] == proc[by_proc[:-1]]
    before[by_proc[1:][same]] = by_proc[:-1][same]
    src, dst = problem.edges[:, 0], problem.edges[:, 1]
    paid = end[src] + problem.edge_delays(proc)
    tight = paid == start[dst]
    cause = {int(v): int(u) for u, v in zip(src[tight].tolist(), dst[tight].tolist(), strict=True)}
    chain, seen = [t], {t}
    while True:
        u = cause.get(t)
        if u is None and before[t] >= 0 and end[before[t]] == start[t]:
            u = int(before[t])
        if u is None or u in seen:
            break
        chain.append(u)
        seen.add(u)
        t = u
    return chain[::-1]
