"""The validator, fixed-order timing and lower bounds of solvers' core."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import (
    Deadlock,
    InvalidSchedule,
    Problem,
    Schedule,
    lower_bounds,
    peak_memory,
    time_orders,
    validate,
    violations,
)
from tests.solvers.strategies import problems


def chain_problem(**kw):
    # a -> b across two processors with a transfer delay of 2
    base = dict(duration=[3, 4], allowed=[[1, 0], [0, 1]], edges=[[0, 1]], delay=[2], names=("a", "b"))
    base.update(kw)
    return Problem(**base)


def test_problem_refuses_times_that_would_overflow():
    """Durations and delays that add up past `MAX_TIME` would overflow 64-bit starts and CP-SAT's
    domains (a pipeline of 60,000 passes of 10**15 units each once did, with a traceback)."""
    from solvers.problem import MAX_TIME

    Problem(duration=[MAX_TIME // 2, MAX_TIME // 2])  # exactly the most: accepted
    with pytest.raises(ValueError, match="add up to .* more than 2.31e[+]18: .* coarser unit"):
        Problem(duration=[MAX_TIME // 2, MAX_TIME // 2 + 2**20])  # (summed as floats: 2**61 + 1 rounds down)
    with pytest.raises(ValueError, match="add up to"):  # the delays count, over the slowest link
        Problem(duration=[1, 1], edges=[[0, 1]], delay=[MAX_TIME // 2], num_processors=2, link=[[0, 3], [3, 0]])
    with pytest.raises(ValueError, match="add up to"):  # each task's slowest processor counts
        Problem.unrelated([[1, MAX_TIME], [1, 2**20]])


def test_problem_rejects_bad_input():
    with pytest.raises(ValueError, match="negative duration"):
        Problem(duration=[1, -1])
    with pytest.raises(ValueError, match="may run on no processor"):
        Problem(duration=[1], allowed=[[False, False]])
    with pytest.raises(ValueError, match="depends on itself"):
        Problem(duration=[1], edges=[[0, 0]])
    with pytest.raises(ValueError, match="out of range"):
        Problem(duration=[1], edges=[[0, 3]])
    with pytest.raises(ValueError, match="one non-negative delay per edge"):
        Problem(duration=[1, 1], edges=[[0, 1]], delay=[1, 2])


def test_arrays_are_frozen():
    p = chain_problem()
    with pytest.raises(ValueError):
        p.duration[0] = 5


def test_valid_schedule_passes_and_delay_is_paid_only_across_processors():
    p = chain_problem()
    validate(p, Schedule(processor=[0, 1], start=[0, 5]))
    same = chain_problem(allowed=[[1, 1], [1, 1]])
    validate(same, Schedule(processor=[0, 0], start=[0, 3]))
    with pytest.raises(InvalidSchedule, match="transfer takes 2 more"):
        validate(same, Schedule(processor=[0, 1], start=[0, 3]))


def test_precedence_violation_names_task_and_amount():
    p = chain_problem()
    with pytest.raises(InvalidSchedule) as err:
        validate(p, Schedule(processor=[0, 1], start=[0, 4]))
    v = err.value.violations[0]
    assert (v.constraint, v.task, v.amount) == ("precedence", 1, 1)
    assert "b starts at 4 but a ends at 3" in str(err.value)


def test_overlap_and_processor_and_start():
    p = Problem(duration=[3, 3, 1], num_processors=2, names=("x", "y", "z"))
    found = violations(p, Schedule(processor=[0, 0, 1], start=[0, 2, -1]))
    kinds = {(v.constraint, v.task, v.amount) for v in found}
    assert ("overlap", 1, 1) in kinds
    assert ("start", 2, 1) in kinds
    fixed = Problem(duration=[1], allowed=[[True, False]])
    with pytest.raises(InvalidSchedule, match="may not run on processor 1"):
        validate(fixed, Schedule(processor=[1], start=[0]))
    with pytest.raises(InvalidSchedule, match="does not exist"):
        validate(fixed, Schedule(processor=[7], start=[0]))


def test_memory_allocates_at_start_releases_at_end():
    # alloc 5 (task 0), free 5 (task 1), alloc 5 (task 2) back to back, capacity 5
    p = Problem(duration=[1, 1, 1], edges=[[0, 1]], mem_delta=[5, -5, 5], capacity=[5], names=("f", "b", "g"))
    validate(p, Schedule(processor=[0, 0, 0], start=[0, 1, 2]))
    assert peak_memory(p, Schedule(processor=[0, 0, 0], start=[0, 1, 2])).tolist() == [5]
    with pytest.raises(InvalidSchedule, match="g raises memory on processor 0 to 10, over the capacity 5 by 5"):
        validate(p, Schedule(processor=[0, 0, 0], start=[0, 2, 1]))
    # release at time t happens before an allocation at time t
    validate(p, Schedule(processor=[0, 0, 0], start=[0, 1, 2]))


def test_affinity_groups_share_a_processor():
    p = Problem(duration=[1, 1], num_processors=2, group=[4, 4])
    validate(p, Schedule(processor=[1, 1], start=[0, 1]))
    with pytest.raises(InvalidSchedule, match="affinity"):
        validate(p, Schedule(processor=[0, 1], start=[0, 0]))


def test_time_orders_earliest_start_and_deadlock():
    p = Problem(
        duration=[2, 2, 2, 2],
        num_processors=2,
        edges=[[0, 1], [2, 3]],
        delay=[1, 1],
        names=("0F0", "1F0", "1X0", "0X0"),
    )
    s = time_orders(p, [[0, 3], [2, 1]])
    assert s.start.tolist() == [0, 3, 0, 3]
    validate(p, s)
    # rank0 waits for 0X0 which needs 1X0, which sits behind 1F0 on rank1, which needs 0F0... no:
    # here rank0 runs 0X0 first (needs 1X0), rank1 runs 1F0 first (needs 0F0): a cycle
    with pytest.raises(Deadlock) as err:
        time_orders(p, [[3, 0], [1, 2]])
    assert err.value.stuck == {0: 3, 1: 1}
    assert "processor 0 stuck at 0X0 (needs 1X0)" in str(err.value)


def test_orders_put_a_zero_length_task_first_at_equal_starts():
    """Task 2 frees memory in no time when task 0 ends, the moment forward 1 needs the room (releases
    come first at equal times). Ordered by index, 1 would come first and, timed again, run before the
    release: over the capacity. `Schedule.orders` puts the zero-length task first."""
    p = Problem(duration=[2, 3, 0], num_processors=1, edges=[[0, 2]], mem_delta=[1, 1, -1], capacity=[1])
    s = Schedule(processor=[0, 0, 0], start=[0, 2, 2])
    validate(p, s)
    assert s.orders(p) == [[0, 2, 1]]
    again = time_orders(p, s.orders(p))
    assert again.start.tolist() == s.start.tolist()
    validate(p, again)


@settings(max_examples=150, deadline=None)
@given(problem=problems(groups=False), data=st.data())
def test_orders_of_a_timed_schedule_time_to_the_same_schedule(problem, data):
    """Orders timed at their earliest starts, read back with `Schedule.orders` and timed again, give
    the same schedule (zero-length tasks included), so a schedule passed on as orders keeps its
    memory curve and its validity."""
    n, P = problem.num_tasks, problem.num_processors
    topo = problem.topological_order().tolist()
    proc = [data.draw(st.sampled_from(np.flatnonzero(problem.allowed[t]).tolist())) for t in range(n)]
    orders = [[t for t in topo if proc[t] == q] for q in range(P)]
    timed = time_orders(problem, orders)
    again = time_orders(problem, timed.orders(problem))
    assert again.start.tolist() == timed.start.tolist()
    assert violations(problem, again) == violations(problem, timed)


def test_time_orders_rejects_incomplete_orders():
    p = Problem(duration=[1, 1], num_processors=1)
    with pytest.raises(ValueError, match="in no processor's order"):
        time_orders(p, [[0]])
    with pytest.raises(ValueError, match="more than once"):
        time_orders(p, [[0, 1, 0]])


def test_lower_bounds_are_tight_on_a_chain_and_below_any_schedule():
    p = chain_problem()
    b = lower_bounds(p)
    assert b["critical_path"] == 3 + 2 + 4
    s = time_orders(p, [[0], [1]])
    assert s.makespan(p) == max(b.values())
    assert lower_bounds(p, "span") == {"processor_work": 4}
    assert s.span(p) >= 4


def test_span_and_makespan():
    p = Problem(duration=[2, 2], num_processors=2)
    s = Schedule(processor=[0, 1], start=[0, 10])
    assert s.makespan(p) == 12 and s.span(p) == 2
    assert s.spans(p).tolist() == [2, 2]
    with pytest.raises(ValueError, match="unknown objective"):
        s.objective(p, "latency")


def test_validator_scales_to_many_tasks():
    # 200k independent tasks round-robin on 8 processors, back to back
    n, P = 200_000, 8
    rng = np.random.default_rng(0)
    dur = rng.integers(1, 5, n)
    proc = np.arange(n) % P
    start = np.zeros(n, dtype=np.int64)
    for q in range(P):
        idx = np.flatnonzero(proc == q)
        start[idx] = np.concatenate([[0], np.cumsum(dur[idx])[:-1]])
    p = Problem(duration=dur, num_processors=P)
    validate(p, Schedule(processor=proc, start=start))
    start[idx[5]] -= 1
    with pytest.raises(InvalidSchedule, match="overlap 1"):
        validate(p, Schedule(processor=proc, start=start))


@settings(max_examples=150, deadline=None)
@given(problems(max_tasks=10), st.sampled_from(["makespan", "span"]))
def test_tight_chain_explains_the_objective(problem, objective):
    """`tight_chain`: it ends with a task that ends where the objective is fixed (the last end; for
    ``span``, the last end on the processor of largest span), and each task of it starts exactly when
    the one before lets it: that one's end, plus the transfer where the edge pays it."""
    from solvers.listsched import list_schedule
    from solvers.simulate import tight_chain

    result = list_schedule(problem, objective=objective)
    if result.schedule is None:
        return
    s = result.schedule
    chain = tight_chain(problem, s, objective)
    end = s.end(problem)
    assert chain and len(set(chain)) == len(chain)
    last = chain[-1]
    if objective == "span":
        spans, q = s.spans(problem), int(s.processor[last])
        assert spans[q] == spans[np.unique(s.processor)].max() and end[last] == end[s.processor == q].max()
    else:
        assert end[last] == end.max()
    delays = problem.edge_delays(s.processor)
    for u, v in itertools.pairwise(chain):
        edges = zip(problem.edges.tolist(), delays.tolist(), strict=True)
        on_edge = [int(d) for (a, b), d in edges if (a, b) == (u, v)]
        same_processor = s.processor[u] == s.processor[v] and end[u] == s.start[v]
        assert any(end[u] + d == s.start[v] for d in on_edge) or same_processor
