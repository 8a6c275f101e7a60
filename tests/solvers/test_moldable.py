"""Moldable tasks: the validator's core check, the allotment rules, list scheduling with a core budget,
CP-SAT with optional intervals, and the bound (property-tested on random DAGs)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers import InvalidSchedule, Problem, Schedule, lower_bound, validate, violations
from solvers.cpsat_moldable import best_heuristic, cpsat_moldable
from solvers.moldable import ALLOTMENTS, allot, list_moldable, moldable_bound


@st.composite
def moldable_problems(draw, max_tasks=9):
    n = draw(st.integers(1, max_tasks))
    P = draw(st.integers(1, 2))
    width = draw(st.lists(st.integers(1, 4), min_size=P, max_size=P))
    modes = []
    for _ in range(n):
        k = draw(st.integers(1, 3))
        serial = draw(st.integers(0, 12))
        ms = []
        for c in sorted(draw(st.sets(st.integers(1, max(width)), min_size=1, max_size=k))):
            ms.append((c, serial // c + draw(st.integers(0, 2))))  # faster with cores, plus an overhead
        modes.append(ms)
    edges = sorted({(u, v) for u, v in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                                                      max_size=2 * n)) if u < v})  # fmt: skip
    return Problem.moldable(modes, edges=edges or None, width=width, num_processors=P)


def test_defaults_keep_a_problem_rigid_and_its_schedules_unchanged():
    p = Problem(duration=[2, 3], num_processors=1)
    assert not p.is_moldable and p.width.tolist() == [1] and p.mode_cores.tolist() == [[1], [1]]
    s = Schedule(processor=[0, 0], start=[0, 2])
    assert s.mode.tolist() == [0, 0] and s.end(p).tolist() == [2, 5]
    validate(p, s)
    with pytest.raises(InvalidSchedule, match="overlap"):
        validate(p, Schedule(processor=[0, 0], start=[0, 1]))


def test_the_validator_counts_cores_and_modes():
    p = Problem.moldable([[(1, 4), (2, 3)], [(1, 4), (2, 3)], [(3, 1)]], width=[3])
    validate(p, Schedule(processor=[0, 0, 0], start=[0, 0, 4], mode=[1, 0, 0]))  # 2 + 1 cores, then 3
    with pytest.raises(InvalidSchedule, match="cores: .* while 1 of its 3 cores are in use and it needs 3"):
        validate(p, Schedule(processor=[0, 0, 0], start=[0, 0, 3], mode=[1, 0, 0]))  # task 2 at 3: task 1 holds 1 core
    with pytest.raises(InvalidSchedule, match="mode: .* runs in mode 2, which it does not have"):
        validate(p, Schedule(processor=[0, 0, 0], start=[0, 4, 8], mode=[2, 0, 0]))
    # at equal times ends come first: back to back on all cores is fine
    validate(p, Schedule(processor=[0, 0, 0], start=[0, 3, 7], mode=[1, 1, 0]))


def test_bad_modes_are_refused_with_the_task():
    with pytest.raises(ValueError, match="task 1 has no mode"):
        Problem.moldable([[(1, 2)], []])
    with pytest.raises(ValueError, match="cores must be at least 1"):
        Problem.moldable([[(0, 2)]])
    with pytest.raises(ValueError, match="needs more cores than any processor"):
        Problem.moldable([[(4, 2)]], width=[2])
    with pytest.raises(ValueError, match="is not its fastest mode"):
        Problem(duration=[5], modes=[[(1, 5), (2, 3)]], width=[2])
    with pytest.raises(ValueError, match="use solvers.moldable"):
        from solvers import get_solver

        get_solver("list")(Problem.moldable([[(1, 2)]], width=[2]))


def test_allotment_rules():
    p = Problem.moldable([[(1, 10), (2, 6), (4, 5)]], width=[4])
    assert allot(p, "all_cores").tolist() == [2]
    assert allot(p, "fastest").tolist() == [2]
    assert allot(p, "efficient").tolist() == [2]  # 5 is the fastest; 6 is 20% slower
    q = Problem.moldable([[(1, 10), (2, 6), (4, 5)]] * 4, width=[4])
    # CPA: 4 independent tasks; the least-area mode (1 core) already has path 10 <= area 40/4
    assert allot(q, "cpa").tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="unknown allotment"):
        allot(p, "magic")


def test_a_chain_gets_all_cores_and_independent_tasks_share_them():
    chain = Problem.moldable([[(1, 8), (4, 2)]] * 3, edges=[[0, 1], [1, 2]], width=[4])
    assert list_moldable(chain).objective == 6 == moldable_bound(chain)
    wide = Problem.moldable([[(1, 8), (4, 3)]] * 4, width=[4])
    assert list_moldable(wide).objective == 8  # one core each, all at once
    assert list_moldable(wide, allotment="all_cores").objective == 12
    assert list_moldable(wide, allotment=[0, 0, 0, 0], concurrency=2).objective == 16


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moldable_problems())
def test_list_schedules_are_valid_and_never_below_the_bound(p):
    bound = moldable_bound(p)
    assert lower_bound(p) == bound
    for rule in (*ALLOTMENTS, None):
        r = list_moldable(p, allotment=rule)
        validate(p, r.schedule)
        assert r.objective >= bound and r.objective == r.schedule.makespan(p)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moldable_problems(max_tasks=7))
def test_cp_sat_is_valid_never_worse_than_its_hint_and_never_below_the_bound(p):
    hint = best_heuristic(p)
    r = cpsat_moldable(p, time_limit=5, hint=hint.schedule)
    validate(p, r.schedule)
    assert moldable_bound(p) <= r.lower_bound <= r.objective <= hint.objective


def test_cp_sat_proves_small_optima_by_brute_force():
    """Two processors of 2 cores, four tasks: CP-SAT's optimum equals an exhaustive search over modes,
    processors and start times."""
    import itertools

    p = Problem.moldable([[(1, 4), (2, 2)], [(1, 3), (2, 2)], [(1, 2)], [(2, 3)]], edges=[[0, 2]], width=[2, 2],
                         num_processors=2)  # fmt: skip
    r = cpsat_moldable(p, time_limit=10)
    assert r.status == "optimal" and r.objective == 5
    shorter = [
        (modes, procs, starts)
        for modes in itertools.product(*(range(int(c)) for c in p.mode_count))
        for procs in itertools.product(range(2), repeat=4)
        for starts in itertools.product(range(r.objective), repeat=4)
        if Schedule(processor=procs, start=starts, mode=modes).makespan(p) < r.objective
        and not violations(p, Schedule(processor=procs, start=starts, mode=modes), limit=1)
    ]
    assert shorter == []  # no schedule ends sooner


def test_cp_sat_returns_its_hint_when_out_of_time():
    rng = np.random.default_rng(0)
    modes = [[(c, int(d) // c + 1) for c in (1, 2, 4, 8)] for d in rng.integers(4, 40, 300)]
    p = Problem.moldable(modes, edges=[[i, i + 1] for i in range(0, 298, 3)], width=[8])
    hint = best_heuristic(p)
    r = cpsat_moldable(p, time_limit=0.05, hint=hint.schedule)
    assert r.objective <= hint.objective and r.lower_bound >= moldable_bound(p)
