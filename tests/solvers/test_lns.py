"""CP-SAT large-neighbourhood search (`solvers.lns`)."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers.lns
from solvers import Problem, solve, validate
from solvers.listsched import list_schedule
from solvers.lns import cpsat_lns, neighbourhood
from tests.solvers.strategies import problems


def layered(n: int = 40, processors: int = 3, seed: int = 0) -> Problem:
    """Random layered DAG of ``n`` tasks, four per layer, every processor allowed."""
    rng = np.random.default_rng(seed)
    edges = sorted({(int(rng.integers(v // 4 * 4 - 4, v // 4 * 4)), v) for v in range(4, n) for _ in range(2)})
    return Problem(
        duration=rng.integers(1, 9, n), num_processors=processors, edges=edges, delay=rng.integers(0, 4, len(edges))
    )


@settings(max_examples=40, deadline=None)
@given(problems(max_tasks=10), st.integers(0, 9))
def test_neighbourhood_keeps_what_the_schedule_already_meets(problem, first):
    schedule = list_schedule(problem).schedule
    if schedule is None:
        return
    window = 3
    keep, pairs = neighbourhood(problem, schedule, min(first, max(problem.num_tasks - window, 0)), window)
    assert (keep == -1).sum() == min(window, problem.num_tasks)
    kept = keep >= 0
    assert (keep[kept] == schedule.processor[kept]).all()
    end = schedule.end(problem)
    for a, b in pairs.tolist():
        assert kept[a] and kept[b] and schedule.processor[a] == schedule.processor[b]
        assert schedule.start[b] >= end[a]


def test_lns_improves_on_its_hint_and_validates():
    p = layered()
    hint = list_schedule(p)
    result = cpsat_lns(p, time_limit=6, window=12, step_limit=0.5, hint=hint.schedule)
    validate(p, result.schedule)
    assert result.solver == "lns"
    assert result.lower_bound <= result.objective <= hint.objective
    assert result.status in ("optimal", "feasible")


def test_small_problem_is_one_cpsat_call():
    p = Problem(duration=[3, 3, 2, 2, 2], num_processors=2)
    result = cpsat_lns(p, time_limit=5, window=10)
    assert (result.status, result.objective, result.solver) == ("optimal", 6, "lns")


def test_span_objective():
    p = layered(24)
    result = cpsat_lns(p, objective="span", time_limit=3, window=8, step_limit=0.3)
    validate(p, result.schedule)
    assert result.objective == result.schedule.span(p) >= result.lower_bound


def test_registry_runs_lns():
    p = Problem(duration=[3, 3, 2, 2, 2], num_processors=2)
    assert solve(p, "lns", time_limit=5, window=3).objective == 6


def test_bad_arguments_are_refused():
    p = Problem(duration=[1])
    with pytest.raises(ValueError, match="window"):
        cpsat_lns(p, window=0)
    with pytest.raises(ValueError, match="unknown objective"):
        cpsat_lns(p, objective="latency")


def test_docstring_examples():
    assert doctest.testmod(solvers.lns).failed == 0


def test_a_kept_task_pins_its_affinity_group():
    """LNS may keep one task of a group and free another: the freed one must stay with its group."""
    import numpy as np

    from solvers.cpsat import cpsat

    r = cpsat(Problem([5, 5], num_processors=2, group=[0, 0]), keep_processor=np.array([0, -1]))
    assert r.schedule.processor.tolist() == [0, 0]
    with pytest.raises(ValueError, match="kept on different processors"):
        cpsat(Problem([5, 5], num_processors=2, group=[0, 0]), keep_processor=np.array([0, 1]))


@settings(max_examples=60, deadline=None)
@given(problems(max_tasks=12, max_processors=3, memory=False), st.data())
def test_a_window_is_replaced_validly_and_never_later(problem, data):
    """`reoptimize_window`: the free tasks move, the others stay exactly where they were, and the
    schedule stays valid and ends no later (an affinity group with a task in place keeps its
    processor)."""
    pytest.importorskip("ortools")
    from solvers.cpsat import reoptimize_window

    start = list_schedule(problem)
    if start.schedule is None:
        return
    free = np.array(data.draw(st.lists(st.booleans(), min_size=problem.num_tasks, max_size=problem.num_tasks)))
    moved = reoptimize_window(problem, start.schedule, free, time_limit=2, workers=1)
    assert moved is not None  # the current placement is a solution
    validate(problem, moved)
    kept = ~free
    assert (moved.start[kept] == start.schedule.start[kept]).all()
    assert (moved.processor[kept] == start.schedule.processor[kept]).all()
    assert moved.makespan(problem) <= start.objective


def test_local_steps_run_on_a_large_memory_free_problem():
    """5,000 tasks: whole-problem steps would each rebuild a model of every task; window steps
    model the window only, and what they accept is valid and never worse than the start."""
    p = layered(5000, processors=8, seed=1)
    start = list_schedule(p)
    r = cpsat_lns(p, time_limit=4, window=30, hint=start.schedule, workers=1)
    validate(p, r.schedule)
    assert r.info["local"] and r.info["steps"] >= 1
    assert r.objective <= start.objective
