"""Random problems for property tests, and a brute-force solver for tiny ones."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
from hypothesis import strategies as st

from solvers import Deadlock, Problem, Schedule, time_orders, violations


@st.composite
def problems(draw, max_tasks: int = 12, max_processors: int = 3, memory: bool = True, groups: bool = True) -> Problem:
    """A random DAG: tasks 0..n-1 with edges from lower to higher index, then numbered afresh in a
    random order (solvers must not take the index order for a topological one), with random allowed
    sets, delays, memory deltas (a random capacity or none per processor) and affinity groups."""
    n = draw(st.integers(1, max_tasks))
    P = draw(st.integers(1, max_processors))
    ints = lambda lo, hi, k: draw(st.lists(st.integers(lo, hi), min_size=k, max_size=k))  # noqa: E731
    rows = st.lists(st.booleans(), min_size=P, max_size=P)
    allowed = np.array(draw(st.lists(rows, min_size=n, max_size=n)))
    allowed[np.arange(n), ints(0, P - 1, n)] = True
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    edges = sorted({(min(u, v), max(u, v)) for u, v in pairs if u != v})
    options = {}
    if memory:
        mem = np.array(ints(-4, 4, n)) * np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        caps = [
            c if c is not None else 10**9
            for c in draw(st.lists(st.one_of(st.none(), st.integers(0, 10)), min_size=P, max_size=P))
        ]
        options.update(mem_delta=mem, capacity=caps)
    if groups:
        options["group"] = ints(-1, 2, n)
    edges = np.array(edges, dtype=np.int64).reshape(-1, 2)
    duration = np.array(ints(0, 6, n), dtype=np.int64)
    old = np.array(draw(st.permutations(range(n))), dtype=np.int64)  # new task i is task old[i]
    new = np.argsort(old)
    for name in ("mem_delta", "group"):
        if name in options:
            options[name] = np.asarray(options[name])[old]
    return Problem(
        duration=duration[old], allowed=allowed[old], edges=new[edges], delay=ints(0, 4, len(edges)), **options
    )


@st.composite
def heterogeneous(draw, max_tasks: int = 12, max_processors: int = 3, memory: bool = True) -> Problem:
    """A random problem of `problems`, its tasks given a duration per processor and its links a
    delay factor per processor pair."""
    base = draw(problems(max_tasks=max_tasks, max_processors=max_processors, memory=memory))
    n, P = base.num_tasks, base.num_processors
    on = draw(st.lists(st.lists(st.integers(0, 9), min_size=P, max_size=P), min_size=n, max_size=n))
    link = draw(st.lists(st.lists(st.integers(0, 3), min_size=P, max_size=P), min_size=P, max_size=P))
    return Problem.unrelated(
        on, allowed=base.allowed, edges=base.edges, delay=base.delay, mem_delta=base.mem_delta,
        capacity=base.capacity, group=base.group, link=link,
    )  # fmt: skip


def brute_force(problem: Problem, objective: str = "makespan") -> tuple[int, Schedule] | None:
    """Best valid earliest-start schedule over all processor assignments and processor orders
    (``None`` when none validates). Every schedule it returns is valid, so nothing proven optimal
    may beat it; it can miss optima that overlap zero-length tasks with others. Assignments go from
    the least to the most loaded processor, and stop where that load alone reaches the best value
    found (the makespan and the span are each at least every processor's work)."""
    n, P = problem.num_tasks, problem.num_processors
    g = nx.DiGraph(problem.edges.tolist())
    g.add_nodes_from(range(n))
    later = {t: nx.descendants(g, t) for t in range(n)}
    on = np.array([problem.durations_on(np.full(n, q)) for q in range(P)]).reshape(P, n)

    def load(assign: tuple[int, ...]) -> int:  # the busiest processor's work: no schedule ends before it
        return max(np.bincount(assign, weights=on[assign, range(n)], minlength=P), default=0) if n else 0

    assignments = [
        a for a in itertools.product(range(P), repeat=n) if all(problem.allowed[t, q] for t, q in enumerate(a))
    ]
    best = None
    for assign in sorted(assignments, key=load):  # least loaded first, so the rest can be cut off
        if best is not None and load(assign) >= best[0]:
            break  # this and every later assignment keep a processor busy at least as long as the best
        per = [[t for t in range(n) if assign[t] == q] for q in range(P)]
        choices = [
            [
                list(p)
                for p in itertools.permutations(tasks)
                if not any(p[i] in later[p[j]] for i in range(len(p)) for j in range(i + 1, len(p)))
            ]
            for tasks in per
        ]
        for orders in itertools.product(*choices):
            try:
                schedule = time_orders(problem, list(orders))
            except Deadlock:
                continue
            if violations(problem, schedule, limit=1):
                continue
            value = schedule.objective(problem, objective)
            if best is None or value < best[0]:
                best = (value, schedule)
    return best
