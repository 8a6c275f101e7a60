"""`solvers.bounds.one_processor_bound`: the optimum of one processor's relaxation under its memory,
never above a valid schedule, and a bound still when cut short."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers.bounds
from solvers import Problem, validate
from solvers.bounds import one_processor_bound
from solvers.cpsat import cpsat
from tests.paths import benchmark


@st.composite
def alike_jobs(draw):
    """``jobs`` alike jobs, each a chain of tasks that visits processor 0 and the others in turn (the
    others shared by the jobs), allocating memory on processor 0 at its first task there and freeing
    it at later ones; the chains of processor 0's tasks by position in the job."""
    jobs, length, others = draw(st.integers(1, 4)), draw(st.integers(2, 5)), draw(st.integers(1, 2))
    where = [0] + [draw(st.integers(0, others)) for _ in range(length - 1)]
    dur = [draw(st.integers(1, 6)) for _ in range(length)]
    delay = [draw(st.integers(0, 3)) for _ in range(length - 1)]
    mine = [i for i, q in enumerate(where) if q == 0]
    alloc = draw(st.integers(1, 3))
    mem = [0] * length
    mem[mine[0]] = alloc
    for i in mine[1:]:  # frees it in parts
        part = draw(st.integers(0, alloc - sum(-x for x in mem if x < 0)))
        mem[i] = -part
    cap = draw(st.integers(alloc, alloc * jobs + 1))
    n = jobs * length
    allowed = np.zeros((n, others + 1), dtype=bool)
    edges, delays = [], []
    for j in range(jobs):
        for i in range(length):
            allowed[j * length + i, where[i]] = True
            if i:
                edges.append([j * length + i - 1, j * length + i])
                delays.append(delay[i - 1])
    capacity = [cap] + [10**9] * others
    problem = Problem(
        duration=dur * jobs,
        allowed=allowed,
        edges=np.array(edges, dtype=np.int64).reshape(-1, 2),
        delay=delays,
        mem_delta=mem * jobs,
        capacity=capacity,
    )
    return problem, [[j * length + i for j in range(jobs)] for i in mine]


@pytest.fixture(scope="module")
def bench():
    """benchmarks/rank_relaxation.py, whose `relaxation` is the problem this bound solves exactly."""
    with benchmark("rank_relaxation") as module:
        yield module


@settings(max_examples=100, deadline=None)
@given(case=alike_jobs(), objective=st.sampled_from(["span", "makespan"]))
def test_it_is_the_relaxations_optimum_and_below_every_schedule(bench, case, objective):
    """Equal to CP-SAT's proven optimum of the relaxation (processor 0 alone under its memory; makespan,
    where the relaxation's objective is processor 0's alone), with the chains and without them; at most
    CP-SAT's best of the problem itself; the same with that schedule as ``upper``; less cut short."""
    problem, chains = case
    bound, exact = one_processor_bound(problem, 0, chains, objective)
    assert exact
    if bound is None:  # no sequence fits processor 0's memory: nor does any schedule
        assert cpsat(problem, objective=objective, time_limit=5.0).status == "infeasible"
        return
    assert one_processor_bound(problem, 0, (), objective) == (bound, True)  # the chains lose nothing
    relaxed, _ = bench.relaxation(problem, [0])
    res = cpsat(relaxed, objective=objective, time_limit=5.0)
    if objective == "span":  # the relaxation's span objective is the largest over its processors
        value = None if res.schedule is None else int(res.schedule.spans(relaxed)[0])
    else:
        value = res.objective
    if res.status == "optimal" and objective == "makespan":
        assert bound == value
    if res.schedule is not None:
        assert bound <= value
    whole = cpsat(problem, objective=objective, time_limit=2.0, symmetry=chains)
    if whole.schedule is not None:
        validate(problem, whole.schedule)
        assert bound <= whole.objective
        assert one_processor_bound(problem, 0, chains, objective, upper=whole.objective)[0] == min(
            bound, whole.objective
        )
    cut, _ = one_processor_bound(problem, 0, chains, objective, max_states=1)
    assert cut <= bound


def test_span_relaxation_is_exact_where_other_processors_bind_nothing():
    """Two jobs of a task on processor 0, 5 elsewhere and a task on 0 that frees the first's memory:
    with memory for one job the second waits for the first (14); with memory for two they overlap (8)."""

    def jobs(cap):
        return Problem(
            duration=[1, 5, 1, 1, 5, 1],
            allowed=[[1, 0], [0, 1], [1, 0]] * 2,
            edges=[[0, 1], [1, 2], [3, 4], [4, 5]],
            mem_delta=[1, 0, -1] * 2,
            capacity=[cap, 9],
        )

    assert one_processor_bound(jobs(1), 0, [[0, 3], [2, 5]]) == (14, True)
    assert one_processor_bound(jobs(2), 0, [[0, 3], [2, 5]]) == (8, True)
    # makespan: the other processor runs both middle tasks one after the other
    assert one_processor_bound(jobs(2), 0, [[0, 3], [2, 5]], "makespan")[0] <= 12
    assert one_processor_bound(jobs(2), 1) == (10, True)  # processor 1's span: its two tasks back to back at best


def test_bad_input_is_refused_with_a_clear_error():
    free = Problem(duration=[1, 1], num_processors=2)
    with pytest.raises(ValueError, match="bound to one processor"):
        one_processor_bound(free, 0)
    fixed = Problem(duration=[1, 1], allowed=[[1, 0], [0, 1]])
    with pytest.raises(ValueError, match="unknown objective"):
        one_processor_bound(fixed, 0, objective="latency")
    with pytest.raises(ValueError, match="one processor"):
        one_processor_bound(fixed, 0, [[0, 1]])
    assert one_processor_bound(Problem(duration=[1], allowed=[[0, 1]]), 0) == (0, True)


def test_doctests():
    assert doctest.testmod(solvers.bounds).failed == 0
