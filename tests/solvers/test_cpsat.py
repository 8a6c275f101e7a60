"""CP-SAT (`solvers.cpsat`): valid, bounded, exact on known optima, never worse than its hint."""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest
from hypothesis import given, settings

import solvers.cpsat
from solvers import Problem, Schedule, lower_bound, solve, validate
from solvers.cpsat import cpsat
from solvers.listsched import list_schedule
from tests.solvers.strategies import brute_force, problems
from tests.solvers.test_listsched import memory_serialised, span_case, two_chains


def check(problem: Problem, result, objective: str = "makespan") -> None:
    """What every CP-SAT result must satisfy."""
    assert result.status in ("optimal", "feasible", "infeasible", "unknown")
    assert result.lower_bound >= lower_bound(problem, objective)
    if result.schedule is None:
        assert result.status in ("infeasible", "unknown") and result.objective is None
        return
    validate(problem, result.schedule)
    assert result.objective == result.schedule.objective(problem, objective)
    assert result.lower_bound <= result.objective
    assert (result.status == "optimal") == (result.lower_bound == result.objective)


@settings(max_examples=25, deadline=None)
@given(problems(max_tasks=5, max_processors=2))
def test_cpsat_is_valid_and_nothing_beats_its_optimum(problem):
    for objective in ("makespan", "span"):
        best = brute_force(problem, objective)
        heuristic = list_schedule(problem, objective=objective)
        result = cpsat(problem, objective=objective, time_limit=2)
        check(problem, result, objective)
        if result.status == "infeasible":
            assert best is None and heuristic.schedule is None
        if result.status == "optimal":
            assert best is None or best[0] >= result.objective
            assert heuristic.schedule is None or heuristic.objective >= result.objective


@settings(max_examples=25, deadline=None)
@given(problems(max_tasks=8, max_processors=3))
def test_cpsat_with_hint_is_never_worse_than_the_hint(problem):
    for objective in ("makespan", "span"):
        hint = list_schedule(problem, objective=objective)
        result = cpsat(problem, objective=objective, time_limit=2, hint=hint.schedule)
        check(problem, result, objective)
        if hint.schedule is not None:
            assert result.schedule is not None and result.objective <= hint.objective


def test_two_chains_optimum():
    result = cpsat(two_chains(), time_limit=5)
    assert (result.status, result.objective) == ("optimal", 6)


def test_memory_forces_serialisation():
    p = memory_serialised()
    unlimited = Problem(duration=p.duration, allowed=p.allowed, edges=p.edges, delay=p.delay)
    assert cpsat(unlimited, time_limit=5).objective == 7
    result = cpsat(p, time_limit=5)
    check(p, result)
    assert (result.status, result.objective) == ("optimal", 9)
    for expand in (False, True):  # the reservoirs kept as they are, or expanded: the same optimum
        result = cpsat(p, time_limit=5, expand_memory=expand)
        check(p, result)
        assert (result.status, result.objective) == ("optimal", 9)


def test_long_transfer_keeps_tasks_together():
    p = Problem(duration=[2, 2, 3], num_processors=2, edges=[[0, 1]], delay=[10])
    result = cpsat(p, time_limit=5)
    assert (result.status, result.objective) == ("optimal", 4)
    assert result.schedule.processor[0] == result.schedule.processor[1] != result.schedule.processor[2]


def test_span_and_makespan_differ():
    p = span_case()
    makespan = cpsat(p, time_limit=5)
    span = cpsat(p, objective="span", time_limit=5)
    assert (makespan.status, makespan.objective) == ("optimal", 7)
    assert (span.status, span.objective) == ("optimal", 3)
    check(p, span, "span")


def test_affinity_group_shares_a_processor():
    # without the group, 0 and 1 would go to different processors
    p = Problem(duration=[3, 3, 1], num_processors=2, group=[5, 5, -1])
    result = cpsat(p, time_limit=5)
    check(p, result)
    assert result.objective == 6 and result.schedule.processor[0] == result.schedule.processor[1]


def test_a_bound_past_the_horizon_is_infeasible_not_an_invalid_model():
    """A schedule with its gaps closed ends by the sum of the work and the delays, so a proven bound past
    it means no schedule exists. A bound past CP-SAT's domains (2**62) once made the model invalid and
    raised RuntimeError (a pipeline whose memory limit was far below one micro-batch's activations)."""
    p = Problem(duration=[2, 3], num_processors=1)
    for known in (6, 2**63):
        r = cpsat(p, time_limit=2, known_bound=known, keep_processor=[0, 0])
        assert r.status == "infeasible" and r.schedule is None and "lower bound" in r.info["reason"]
    assert cpsat(p, time_limit=2, known_bound=5).objective == 5


def test_memory_deadlock_is_infeasible():
    p = Problem(duration=[1, 1, 1], edges=[[0, 2], [1, 2]], mem_delta=[3, 3, -6], capacity=[5])
    result = cpsat(p, time_limit=5)
    assert result.status == "infeasible" and result.schedule is None


def test_release_before_allocation_at_the_same_time():
    # task 1 releases 4 at time 2; task 2 (after 0 on the same processor) allocates 4 at time 2
    p = Problem(
        duration=[2, 2, 1],
        edges=[[0, 2]],
        delay=[0],
        mem_delta=[0, -4, 4],
        allowed=[[1, 0], [0, 1], [0, 1]],
        capacity=[0, 0],
    )
    result = cpsat(p, time_limit=5)
    check(p, result)
    assert result.objective == 3


def test_group_without_common_processor_is_infeasible():
    result = cpsat(Problem(duration=[1, 1], allowed=[[1, 0], [0, 1]], group=[0, 0]), time_limit=1)
    assert result.status == "infeasible" and "group" in result.info["reason"]


def test_hint_is_returned_when_the_time_is_up():
    rng = np.random.default_rng(0)
    n = 60
    edges = np.array([(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.1])
    p = Problem(duration=rng.integers(1, 9, n), num_processors=3, edges=edges, delay=rng.integers(0, 5, len(edges)))
    hint = list_schedule(p).schedule
    result = cpsat(p, time_limit=0, hint=hint)
    check(p, result)
    assert result.info["source"] == "hint"
    assert result.objective == hint.makespan(p)


def test_invalid_hint_is_only_a_hint():
    p = two_chains()
    result = cpsat(p, time_limit=5, hint=Schedule(processor=[0, 0, 0, 9], start=[0, 0, 0, 0]))
    check(p, result)
    assert result.objective == 6 and result.info["hint"].startswith("invalid")
    with pytest.raises(ValueError, match="expected 4 tasks"):
        cpsat(p, hint=Schedule(processor=[0], start=[0]))


def test_progress_reports_improving_solutions():
    p = Problem(duration=[3, 3, 2, 2, 2, 4, 1], num_processors=3)
    seen: list[dict] = []
    result = cpsat(p, time_limit=5, progress=seen.append)
    assert seen and set(seen[0]) == {"incumbent", "bound", "gap", "elapsed"}
    assert seen[-1]["incumbent"] == result.objective
    assert all(a["incumbent"] >= b["incumbent"] for a, b in itertools.pairwise(seen))
    assert all(0 <= s["gap"] <= 1 for s in seen)


def test_symmetry_chains_order_the_starts():
    p = Problem(duration=[2, 2, 2, 2, 3], num_processors=2)
    result = cpsat(p, time_limit=5, symmetry=[[3, 2, 1, 0]])
    check(p, result)
    assert result.objective == 6
    s = result.schedule.start
    assert s[3] <= s[2] <= s[1] <= s[0]


def test_kept_processors_and_order_pairs_are_respected():
    p = Problem(duration=[2, 2, 2, 2], num_processors=2)
    result = cpsat(p, time_limit=5, keep_processor=np.array([0, 0, 0, -1]), order_pairs=np.array([[2, 0]]))
    check(p, result)
    s = result.schedule
    assert s.processor[:3].tolist() == [0, 0, 0] and s.start[0] >= s.start[2] + 2
    assert result.objective == 6
    with pytest.raises(ValueError, match="may not use"):
        cpsat(Problem(duration=[1], allowed=[[1, 0]]), keep_processor=np.array([1]))


def test_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="unknown objective"):
        cpsat(two_chains(), objective="latency")


def test_registry_validates_cpsat():
    result = solve(two_chains(), "cpsat", time_limit=5)
    assert result.solver == "cpsat" and result.objective == 6


def test_docstring_examples():
    assert doctest.testmod(solvers.cpsat).failed == 0


def test_a_search_past_its_time_limit_is_stopped_from_outside():
    """CP-SAT's presolve of a large model can run long past max_time_in_seconds; the watchdog in
    solve_interruptibly stops it OVERRUN_GRACE seconds after the limit (not marked interrupted)."""
    import threading
    import time

    from solvers.cpsat import OVERRUN_GRACE, cp_model, solve_interruptibly

    class Stuck:  # a solver that, like a long presolve, ignores its own limit until stopped
        def __init__(self):
            self.parameters = cp_model.CpSolver().parameters
            self.parameters.max_time_in_seconds = 0.2
            self.stopped = threading.Event()

        def solve(self, model, callback):
            assert self.stopped.wait(30), "never stopped"
            return cp_model.UNKNOWN

        def stop_search(self):
            self.stopped.set()

    t0 = time.perf_counter()
    code, interrupted = solve_interruptibly(Stuck(), None, None)
    took = time.perf_counter() - t0
    assert code == cp_model.UNKNOWN and not interrupted
    assert 0.2 + OVERRUN_GRACE <= took < 0.2 + OVERRUN_GRACE + 1.0
