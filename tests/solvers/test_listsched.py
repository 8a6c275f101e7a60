"""List scheduling (`solvers.listsched`): valid, within its bounds, and exact where it must be."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers.listsched
from solvers import Problem, lower_bound, lower_bounds, solve, solver_names, time_orders, validate
from solvers.listsched import effective_allowed, heft, list_schedule, upward_rank
from tests.paths import benchmark
from tests.solvers.strategies import brute_force, problems


def two_chains() -> Problem:
    """a0 (3) -> a1 (2) and b0 (2) -> b1 (4), any processor, delay 5: optimum 6, one chain each."""
    return Problem(duration=[3, 2, 2, 4], num_processors=2, edges=[[0, 1], [2, 3]], delay=[5, 5])


def memory_serialised() -> Problem:
    """On processor 0, A (+4) .. Af (-4) and B (+4) .. Bf (-4) with capacity 5; Af waits for X (5)
    on processor 1. Without the memory limit B runs beside X (makespan 7); with it, 9."""
    A, Af, B, Bf, X = range(5)
    allowed = np.zeros((5, 2), dtype=bool)
    allowed[[A, Af, B, Bf], 0] = True
    allowed[X, 1] = True
    return Problem(
        duration=[1, 1, 1, 1, 5],
        allowed=allowed,
        edges=[[A, X], [X, Af], [B, Bf]],
        delay=[0, 0, 0],
        mem_delta=[4, -4, 4, -4, 0],
        capacity=[5, 0],
    )


def span_case() -> Problem:
    """x (2) on processor 0; y1 (2) on processor 1 after x with delay 3; y0 (1) on processor 1.
    Makespan 7 either way; span 3 only when y0 runs right before y1."""
    return Problem(duration=[2, 2, 1], allowed=[[1, 0], [0, 1], [0, 1]], edges=[[0, 1]], delay=[3])


def forward_pipeline(p: int, m: int, f: int, d: int) -> Problem:
    """Forward-only pipeline: F(s, i) = s * m + i on processor s, F(s, i) -> F(s + 1, i)."""
    n = p * m
    ids = np.arange(n).reshape(p, m)
    allowed = np.zeros((n, p), dtype=bool)
    allowed[np.arange(n), np.arange(n) // m] = True
    edges = np.stack([ids[:-1].ravel(), ids[1:].ravel()], axis=1)
    return Problem(duration=np.full(n, f), allowed=allowed, edges=edges, delay=np.full(len(edges), d))


@settings(max_examples=200, deadline=None)
@given(problems())
def test_list_schedule_is_valid_and_above_every_bound(problem):
    for objective in ("makespan", "span"):
        result = list_schedule(problem, objective=objective)
        assert result.lower_bound == lower_bound(problem, objective)
        if result.schedule is None:
            assert result.status in ("unknown", "infeasible") and result.objective is None
            continue
        validate(problem, result.schedule)
        assert result.objective == result.schedule.objective(problem, objective)
        assert all(result.objective >= b for b in lower_bounds(problem, objective).values())
        assert result.status == ("optimal" if result.objective == result.lower_bound else "feasible")


@settings(max_examples=60, deadline=None)
@given(problems(max_tasks=5, max_processors=2))
def test_list_schedule_infeasible_only_when_nothing_is_valid(problem):
    result = list_schedule(problem)
    best = brute_force(problem)
    if result.status == "infeasible":
        assert best is None
    if result.schedule is not None:
        assert best is not None and best[0] <= result.objective


@settings(max_examples=100, deadline=None)
@given(problems(memory=False))
def test_without_memory_limits_list_schedule_always_succeeds(problem):
    result = list_schedule(problem)
    if effective_allowed(problem).any(axis=1).all():
        assert result.schedule is not None
        validate(problem, result.schedule)
    else:
        assert result.status == "infeasible"


@settings(max_examples=50, deadline=None)
@given(problems(memory=False, groups=False))
def test_full_orders_reproduce_time_orders(problem):
    free = list_schedule(problem)
    orders = free.schedule.orders(problem)
    fixed = list_schedule(problem, orders=orders)
    expected = time_orders(problem, orders)
    assert fixed.schedule.processor.tolist() == expected.processor.tolist()
    assert fixed.schedule.start.tolist() == expected.start.tolist()


def test_two_chains_go_to_two_processors():
    for solver in (list_schedule, heft):
        result = solver(two_chains())
        assert result.objective == 6 and result.status == "optimal"
        assert result.schedule.processor[0] == result.schedule.processor[1]
        assert result.schedule.processor[2] == result.schedule.processor[3]


def test_a_long_transfer_keeps_both_tasks_on_one_processor():
    p = Problem(duration=[2, 2], num_processors=2, edges=[[0, 1]], delay=[10])
    result = list_schedule(p)
    assert result.objective == 4
    assert result.schedule.processor[0] == result.schedule.processor[1]


def test_memory_delays_the_second_allocation():
    p = memory_serialised()
    unlimited = Problem(duration=p.duration, allowed=p.allowed, edges=p.edges, delay=p.delay)
    assert list_schedule(unlimited).objective == 7
    result = list_schedule(p)
    validate(p, result.schedule)
    assert result.objective == 9


def test_span_takes_the_late_timing_of_the_same_orders():
    p = span_case()
    assert list_schedule(p).objective == 7
    result = list_schedule(p, objective="span")
    validate(p, result.schedule)
    assert result.objective == 3 and result.schedule.start[2] == 4


def test_heft_span_keeps_zero_length_tasks_in_edge_order():
    """Task 2 feeds task 1, both of length 0 at time 1: HEFT's orders once listed them by index, and
    timing them late for the span (`_as_late_as_possible`) stopped in a deadlock."""
    p = Problem(duration=[1, 0, 0], num_processors=1, edges=[[0, 2], [2, 1]])
    result = heft(p, objective="span")
    validate(p, result.schedule)
    assert result.objective == 1


@pytest.mark.parametrize("p, m, f, d", [(1, 5, 3, 2), (4, 8, 2, 1), (8, 3, 5, 0)])
def test_forward_pipeline_meets_the_closed_form(p, m, f, d):
    result = list_schedule(forward_pipeline(p, m, f, d))
    assert result.objective == (p - 1) * (f + d) + m * f
    assert result.status == "optimal"


def test_affinity_group_follows_its_first_task():
    p = Problem(duration=[1, 5, 1], num_processors=3, group=[0, -1, 0], edges=[[0, 2]], delay=[0])
    s = list_schedule(p).schedule
    validate(p, s)
    assert s.processor[0] == s.processor[2]


def test_group_without_common_processor_is_infeasible():
    p = Problem(duration=[1, 1], allowed=[[1, 0], [0, 1]], group=[3, 3])
    result = list_schedule(p)
    assert result.status == "infeasible" and "group 3" in result.info["reason"]


def test_allocation_beyond_every_capacity_is_infeasible():
    p = Problem(duration=[1, 1], num_processors=2, mem_delta=[6, 0], capacity=[5, 4])
    assert list_schedule(p).status == "infeasible"


def test_memory_deadlock_reports_unknown():
    # two allocations of 3 on a capacity of 5, freed only by a task that needs both
    p = Problem(duration=[1, 1, 1], edges=[[0, 2], [1, 2]], mem_delta=[3, 3, -6], capacity=[5])
    result = list_schedule(p)
    assert result.status == "unknown" and result.schedule is None
    assert "memory" in result.info["reason"]


def test_orders_bind_processors_and_sequence():
    p = Problem(duration=[1, 1, 1, 1], num_processors=2)
    s = list_schedule(p, orders=[[3, 1], [0]]).schedule
    validate(p, s)
    assert s.processor[3] == s.processor[1] == 0 and s.processor[0] == 1
    assert s.start[1] >= s.start[3] + 1


@pytest.mark.parametrize(
    "orders, message",
    [
        ([[0]], "expected 2 lists"),
        ([[0, 0], []], "more than once"),
        ([[1, 0], []], "contradict"),
        ([[5], []], "out of range"),
    ],
)
def test_bad_orders_are_refused(orders, message):
    p = Problem(duration=[1, 1], num_processors=2, edges=[[0, 1]], delay=[0])
    with pytest.raises(ValueError, match=message):
        list_schedule(p, orders=orders)


def test_orders_on_a_forbidden_processor_are_refused():
    p = Problem(duration=[1], allowed=[[True, False]])
    with pytest.raises(ValueError, match="may not run"):
        list_schedule(p, orders=[[], [0]])


def test_priority_options():
    p = Problem(duration=[1, 1, 1], num_processors=1)
    assert list_schedule(p, priority="index").schedule.start.tolist() == [0, 1, 2]
    assert list_schedule(p, priority=[0, 2, 1]).schedule.start.tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match="unknown priority"):
        list_schedule(p, priority="random")
    with pytest.raises(ValueError, match="expected 3 values"):
        list_schedule(p, priority=[1, 2])
    with pytest.raises(ValueError, match="unknown objective"):
        list_schedule(p, objective="latency")


def test_upward_rank_counts_expected_delays():
    p = Problem(duration=[2, 3], num_processors=2, edges=[[0, 1]], delay=[4])
    # two processors each: the transfer is paid with probability 1/2
    assert (upward_rank(p) / 64).tolist() == [7.0, 3.0]


def test_registry_runs_list_and_heft():
    assert {"list", "heft", "cpsat", "lns"} <= set(solver_names())
    p = two_chains()
    assert solve(p, "heft").solver == "heft"
    assert solve(p, "list", objective="span").objective_name == "span"


def test_empty_problem():
    result = list_schedule(Problem(duration=[], num_processors=2))
    assert result.objective == 0 and result.status == "optimal"


def test_docstring_examples():
    assert doctest.testmod(solvers.listsched).failed == 0


def _bench():
    with benchmark("solvers_bench") as module:
        return module


@pytest.mark.parametrize("memory", [True, False])
def test_benchmark_pipeline_validates(memory):
    problem = _bench().pipeline_problem(16, 512, memory=memory)
    result = list_schedule(problem)
    validate(problem, result.schedule)
    assert result.objective >= result.lower_bound


def test_benchmark_random_dag_validates():
    problem = _bench().random_layered_problem(100_000)
    result = list_schedule(problem)
    validate(problem, result.schedule)
    assert result.objective >= result.lower_bound


def test_a_task_blocked_by_memory_moves_to_a_processor_with_room():
    """Found by random search (about 6% of small memory-limited instances deadlocked): task 3 waited
    behind an allocation on one processor for a release that never came while the other had room."""
    p = Problem(
        duration=[0, 1, 2, 1, 2], num_processors=2, edges=[[0, 1], [0, 3], [1, 2], [1, 4]],
        mem_delta=[4, 3, 0, 4, -3], capacity=[5, 5],
    )  # fmt: skip
    for solver in (list_schedule, heft):
        r = solver(p)
        assert r.schedule is not None, r.info
        validate(p, r.schedule)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_memory_limited_list_schedules_are_valid_or_say_why_not(data):
    """Whatever list scheduling returns on small memory-limited instances is valid; when it finds
    nothing it says so with the memory reason (allocations never released can leave a packing that
    no greedy order completes; CP-SAT and best find those)."""
    n = data.draw(st.integers(2, 6))
    dur = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    mem = data.draw(st.lists(st.integers(-3, 4), min_size=n, max_size=n))
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if data.draw(st.booleans())]
    p = Problem(duration=dur, num_processors=2, edges=edges or None, mem_delta=mem, capacity=[5, 5])
    r = list_schedule(p)
    if r.schedule is not None:
        validate(p, r.schedule)
    else:
        assert r.status in ("unknown", "infeasible") and "memory" in r.info["reason"]


def test_heft_places_each_task_where_it_finishes_first():
    """Task 1 waits for task 0's data either way; on the other processor it finishes at 8, behind
    task 2 at 11. List scheduling takes the processor where a task can start first; HEFT the one
    where it finishes first (found by random search)."""
    p = Problem(duration=[5, 1, 5], num_processors=2, edges=[[0, 1], [0, 2]], delay=[2, 4])
    h, lst = heft(p), list_schedule(p)
    assert (h.objective, lst.objective) == (10, 11) and h.info["variant"] == "insertion"
    assert h.schedule.processor.tolist() == [0, 1, 0] and h.schedule.start.tolist() == [0, 7, 5]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_heft_with_insertion_is_valid_and_above_the_bound(data):
    n, P = data.draw(st.integers(2, 25)), data.draw(st.integers(1, 4))
    dur = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if data.draw(st.integers(0, 5)) == 0]
    delay = data.draw(st.lists(st.integers(0, 5), min_size=len(edges), max_size=len(edges)))
    allowed = [[data.draw(st.booleans()) or q == t % P for q in range(P)] for t in range(n)]
    group = data.draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
    p = Problem(duration=dur, num_processors=P, edges=edges or np.zeros((0, 2), dtype=int), delay=delay or None,
                allowed=allowed, group=group)  # fmt: skip
    r = heft(p)
    if r.schedule is None:  # a group whose tasks share no processor
        assert r.status == "infeasible"
        return
    validate(p, r.schedule)
    assert r.objective >= r.lower_bound


def test_heft_with_memory_limits_keeps_list_placement():
    p = Problem(duration=[1, 1, 1], edges=[[0, 1]], mem_delta=[4, -4, 4], capacity=[5])
    r = heft(p)
    assert r.info["variant"].startswith("list placement") and r.objective == list_schedule(p).objective


# -- memory deadlocks: repaired, and compared with brute force -------------------------------------

DEADLOCKED_BEFORE = [
    # (durations, allowed, edges, memory deltas, capacities, groups): each deadlocked list scheduling
    # before the repair; found by random search, each with a schedule brute force finds
    ([5, 1, 5, 2], [[1, 1], [1, 1], [0, 1], [1, 1]], [[1, 3]], [0, 4, 0, -2], [1, 10**9], [1, 1, 0, 1]),
    ([2, 6, 3, 5, 6], [[1, 1], [0, 1], [0, 1], [1, 1], [1, 0]], [[0, 2], [1, 3], [2, 4]], [-2, 0, 4, -1, -3],
     [10**9, 1], [2, 0, 0, 0, 1]),
    ([6, 2, 5, 2, 3, 6], [[1, 1], [1, 1], [1, 0], [0, 1], [1, 1], [1, 0]], [], [0, -3, 2, 0, -4, 0], [1, 10],
     [2, -1, 0, -1, 1, 2]),
    ([6, 0, 5, 3, 4], [[1, 1], [1, 0], [1, 1], [1, 1], [0, 1]], [[0, 1], [1, 2], [2, 3]], [0, -1, 0, -1, 4],
     [10**9, 3], [-1, 2, 1, -1, -1]),
    ([6, 0, 0, 0, 0], [[1, 1], [1, 1], [1, 0], [0, 1], [1, 0]], [[0, 1], [1, 2], [2, 4], [3, 4]], [0, 2, 2, 0, 3],
     [5, 10**9], [-1, -1, 2, 1, -1]),
    ([2, 5, 5, 5, 2, 6], [[1, 1], [0, 1], [1, 1], [1, 1], [1, 1], [1, 1]],
     [[0, 2], [0, 3], [0, 4], [0, 5], [1, 3], [1, 4], [2, 5], [4, 5]], [3, 3, -1, -1, 0, 4], [1, 8],
     [0, -1, 2, 0, 2, 1]),
    ([3, 3, 3], [[1, 1], [1, 1], [1, 1]], [], [1, 4, -1], [3, 2], [0, 2, 1]),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(DEADLOCKED_BEFORE)))
def test_memory_deadlocks_are_repaired(case):
    """A release bound where a blocked task waits, an allocation moved away, the blocked task moved,
    and processors where an allocation never fits left out: each case deadlocked before."""
    dur, allowed, edges, mem, cap, group = DEADLOCKED_BEFORE[case]
    p = Problem(duration=dur, allowed=allowed, edges=np.array(edges, dtype=np.int64).reshape(-1, 2),
                mem_delta=mem, capacity=cap, group=group)  # fmt: skip
    r = list_schedule(p)
    assert r.schedule is not None, r.info
    validate(p, r.schedule)
    assert r.objective >= brute_force(p)[0]


def _compare_with_brute_force(cases: int, seed: int) -> tuple[int, list[Problem]]:
    """``cases`` random tiny problems with memory limits and affinity groups: every list schedule is
    valid, above the bound and never below brute force's optimum. Returns how many had a schedule
    (by brute force) and those where list scheduling found none."""
    rng = np.random.default_rng(seed)
    feasible, missed = 0, []
    for _ in range(cases):
        n, P = int(rng.integers(1, 7)), int(rng.integers(1, 3))
        allowed = rng.random((n, P)) < 0.6
        allowed[np.arange(n), rng.integers(0, P, n)] = True
        pairs = rng.integers(0, n, size=(int(rng.integers(0, 2 * n + 1)), 2))
        edges = np.array(sorted({(min(u, v), max(u, v)) for u, v in pairs.tolist() if u != v}), dtype=np.int64)
        p = Problem(
            duration=rng.integers(0, 7, n), allowed=allowed, edges=edges.reshape(-1, 2),
            delay=rng.integers(0, 5, len(edges)), mem_delta=rng.integers(-4, 5, n) * (rng.random(n) < 0.5),
            capacity=[int(c) if rng.random() < 0.7 else 10**9 for c in rng.integers(0, 11, P)],
            group=rng.integers(-1, 3, n),
        )  # fmt: skip
        r = list_schedule(p)
        optimum = brute_force(p)
        feasible += optimum is not None
        if r.schedule is not None:
            validate(p, r.schedule)
            assert optimum is not None and r.objective >= max(optimum[0], r.lower_bound)
        elif optimum is not None:
            missed.append(p)
    return feasible, missed


# Allocations and releases of zero-length tasks at one instant (the validator counts releases first)
# and a few packings no greedy order completes are still missed: 3 in 18,000 seeded cases here.
MISSED_AT_MOST = 0.0005


def test_list_schedules_against_brute_force():
    feasible, missed = _compare_with_brute_force(300, seed=0)
    assert len(missed) <= MISSED_AT_MOST * feasible, missed


@pytest.mark.slow
def test_list_schedules_against_brute_force_10k():
    feasible, missed = _compare_with_brute_force(10_000, seed=1)
    assert len(missed) <= MISSED_AT_MOST * feasible, [(p.duration.tolist(), p.mem_delta.tolist()) for p in missed]
