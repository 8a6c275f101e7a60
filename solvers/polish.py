"""Order polishing: local search on the per-processor orders of a schedule, along its critical chain.

A schedule timed at its earliest starts (`solvers.time_orders`) is fixed by its orders. Its
objective is fixed by a chain of tasks each of which starts the moment the one before it lets it
(`solvers.simulate.tight_chain`). Where consecutive tasks of the chain share a processor they form
a *block*; as in job-shop local search, only a change to a block can shorten the chain:

- a task of a block moved to just after the block (or up to `REACH` places further): whatever it
  delayed on the chain now starts earlier, and the task itself fills a later gap;
- a task of a block moved to the block's start;
- a task of a block moved to the end of its processor's order: a processor whose own span has room
  can take work off the chain that way (tried first: on Zero Bubble's V row, deferring weight passes
  of the middle ranks so is what reaches the optimum).

Where a task of the chain may run elsewhere (it is in no affinity group), it may also move to
another processor: to one that runs a predecessor or successor of it, whose transfer it then saves,
or to one of `ELSEWHERE` others drawn at random. It goes where its start time puts it in that
processor's order, or one place before. These moves are tried before the others. Against saga
on random DAGs of 100 and 1,000 tasks on 4 to 32 processors, equal and heterogeneous, polishing the
best list heuristic's schedule for at most 5 s made it at most saga's best heuristic on 23 of 24
classes (19 before; `benchmarks/results/solvers_saga_polish-2core-vm.txt`).

Each step tries these moves in random order (``seed``): moves to another processor first, then the
moves to the end, and among them tasks without successors first (moving one delays no other task).
It keeps the first that makes the schedule better: a smaller objective, or the same objective and a
smaller sum of per-processor spans (for ``span``) or ends of each processor's last task (for
``makespan``), which makes room on the chains beside the critical one. When none does, a move that
keeps the objective (another chain of the same length now fixes it) is taken instead, and the task
it moved stays put for `TABU` steps; after `SIDEWAYS` such moves in a row without a better schedule
the search stops, with the best one seen. A move is skipped when its orders deadlock or a
processor's memory would go over its capacity (tasks on a processor run one after another, so its
peak is the largest running sum of their memory changes). The search also stops at the time limit,
at a known lower bound, or where no move keeps the objective (a local optimum). Each move costs one
timing of the whole schedule, O(tasks + edges): on Zero Bubble's V row re-cut to p=32, m=256 (49,152
tasks) 31 moves, each one better, reached the bound in 5.5 s.

Example
-------
>>> from solvers import Problem, Schedule
>>> p = Problem(duration=[4, 1, 4], num_processors=2, edges=[[1, 2]], allowed=[[1, 0], [1, 0], [0, 1]])
>>> s = Schedule(processor=[0, 0, 1], start=[0, 4, 5])
>>> polish(p, s).objective  # task 1 first: task 2 starts at 1
5
"""

from __future__ import annotations

import time

import numpy as np

from solvers.graph import csr
from solvers.problem import OBJECTIVES, Problem, Result, Schedule
from solvers.simulate import Deadlock, tight_chain, time_orders
from solvers.validate import violations

REACH = 3
"""How many places past the end of its block a task may be moved in one step."""

SIDEWAYS = 64
"""Moves in a row that keep the score (another chain of the same length) before the search stops."""

TABU = 8
"""Steps during which a task moved sideways stays where it was put."""

ELSEWHERE = 3
"""Processors drawn at random, beside those of its neighbours, that a chain task may move to."""


def polish(
    problem: Problem,
    schedule: Schedule,
    /,
    *,
    objective: str = "makespan",
    time_limit: float = 10.0,
    seed: int = 0,
    bound: int = 0,
) -> Result:
    """Improve the orders of a valid ``schedule`` by moves on its critical chain (see the module text)
    for at most ``time_limit`` seconds, or until the objective reaches a known lower ``bound``. The
    result is valid and never worse than ``schedule``; ``info`` counts the moves tried, kept and taken
    sideways, and says whether a local optimum was reached. ``ValueError`` for an invalid schedule."""
    t0 = time.perf_counter()
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    problem.require_rigid("polish")
    if violations(problem, schedule, limit=1):
        raise ValueError("polish: the schedule to start from is not valid")
    orders = schedule.orders(problem)
    current = time_orders(problem, orders)
    if violations(problem, current, limit=1):  # earliest starts broke something (zero-length ties): keep it
        current = schedule
    key = _score(problem, current, objective)
    capacity, delta = problem.capacity, problem.mem_delta
    limited = set(np.flatnonzero(capacity <= np.clip(delta, 0, None).sum()).tolist())  # may overflow
    rng = np.random.default_rng(seed)
    sink = np.bincount(problem.edges[:, 0], minlength=problem.num_tasks) == 0
    # tasks that may change processor: more than one allowed, and no affinity group to keep together
    movable = (problem.allowed.sum(axis=1) > 1) & (problem.group < 0)
    src, dst = problem.edges[:, 0], problem.edges[:, 1]
    # each task's predecessors and successors, built once: a processor move looks them up per chain task
    near = csr(problem.num_tasks, np.concatenate([src, dst]), np.concatenate([dst, src]))[:2] if movable.any() else None
    tried = kept = sideways = 0
    optimum = False
    tabu: dict[int, int] = {}  # task -> the step until which it stays where a sideways move put it
    best = (key, orders, current)
    step = 0
    while time.perf_counter() - t0 < time_limit and key[0] > bound:
        step += 1
        chain = tight_chain(problem, current, objective)
        where = {t: (q, k) for q, order in enumerate(orders) for k, t in enumerate(order)}
        far, close = _moves(chain, where, orders)
        across = [] if near is None else _across(problem, current, chain, where, orders, movable, near, rng)
        rng.shuffle(across)
        rng.shuffle(far)
        rng.shuffle(close)
        # the long moves first, tasks without successors first among them (moving one delays no
        # other task): one of them may shorten several chains at once
        far.sort(key=lambda m: not sink[orders[m[0]][m[1]]])
        moves = across + [(q, k, q, to) for q, k, to in far + close]
        better = level = None
        for q, k, dest, to in moves:
            if time.perf_counter() - t0 >= time_limit:
                break
            if tabu.get(orders[q][k], 0) >= step:
                continue
            trial = list(orders)
            source = list(orders[q])
            task = source.pop(k)
            order = source if dest == q else list(orders[dest])
            order.insert(to, task)
            trial[q], trial[dest] = source, order
            if any(r in limited and np.cumsum(delta[trial[r]]).max(initial=0) > capacity[r] for r in {q, dest}):
                continue
            tried += 1
            try:
                timed = time_orders(problem, trial)
            except Deadlock:
                continue
            score = _score(problem, timed, objective)
            if score < key:
                better = (trial, timed, score)
                break
            if score[0] == key[0] and level is None:
                level = (trial, timed, score, orders[q][k])
        if better is not None:
            orders, current, key = better
            kept += 1
            if key < best[0]:
                best, sideways = (key, orders, current), 0
            continue
        if level is None or sideways >= SIDEWAYS:
            optimum = level is None
            break
        orders, current, key, moved = level  # the same score by another chain: walk the plateau
        tabu[moved] = step + TABU
        sideways += 1
    key, orders, current = best
    value, given = key[0], schedule.objective(problem, objective)
    if value > given or violations(problem, current, limit=1):
        # earliest starts can lengthen a span (a first task moved earlier): keep what was given
        current, value = schedule, given
    info = {"tried": tried, "kept": kept, "sideways": sideways, "local_optimum": optimum}
    return Result(current, "feasible", value, 0, time.perf_counter() - t0, "polish", objective, info)


def _score(problem: Problem, schedule: Schedule, objective: str) -> tuple[int, int]:
    """The objective, then the sum of per-processor spans (``span``) or last ends (``makespan``)."""
    if objective == "span":
        spans = schedule.spans(problem)
        return int(spans.max(initial=0)), int(spans.sum())
    last = np.zeros(problem.num_processors, dtype=np.int64)
    np.maximum.at(last, schedule.processor, schedule.end(problem))
    return int(last.max(initial=0)), int(last.sum())


def _moves(
    chain: list[int], where: dict[int, tuple[int, int]], orders: list[list[int]]
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(processor, position, new position) of each move on the blocks of the critical ``chain``: those
    to the end of the processor, and the others. ``where`` maps a task to (processor, position)."""
    blocks: list[list[int]] = []  # [processor, first position, last position]
    for t in chain:
        q, k = where[t]
        if blocks and blocks[-1][0] == q and blocks[-1][2] == k - 1:
            blocks[-1][2] = k
        else:
            blocks.append([q, k, k])
    far, moves = [], []
    for q, a, b in blocks:
        if b == a:
            continue
        last = len(orders[q]) - 1
        for k in range(a, b):
            moves += [(q, k, to) for to in range(b, min(b + REACH, last) + 1)]
            if b + REACH < last:
                far.append((q, k, last))
        moves += [(q, k, a) for k in range(a + 1, b + 1)]
    return far, moves


def _across(
    problem: Problem,
    schedule: Schedule,
    chain: list[int],
    where: dict[int, tuple[int, int]],
    orders: list[list[int]],
    movable: np.ndarray,
    near: tuple[np.ndarray, np.ndarray],
    rng: np.random.Generator,
) -> list[tuple[int, int, int, int]]:
    """(processor, position, new processor, position there) of each move of a task of the critical
    ``chain`` to another processor (see the module text). ``near`` holds each task's predecessors and
    successors, as (indptr, tasks)."""
    indptr, tasks = near
    start, P = schedule.start, problem.num_processors
    out = []
    for t in chain:
        if not movable[t]:
            continue
        q, k = where[t]
        beside = schedule.processor[tasks[indptr[t] : indptr[t + 1]]].tolist()
        for dest in set(beside) | set(rng.integers(0, P, size=ELSEWHERE).tolist()):
            if dest == q or not problem.allowed[t, dest]:
                continue
            at = int(np.searchsorted(start[orders[dest]], start[t], side="right")) if orders[dest] else 0
            out += [(q, k, dest, to) for to in {at, max(at - 1, 0)}]
    return out
