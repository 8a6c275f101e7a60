"""Order polishing (`solvers.polish`): valid, never worse, and it finds what its moves reach."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers.ils
import solvers.polish
from solvers import Deadlock, Problem, Schedule, solve, time_orders, validate
from solvers.listsched import list_schedule
from solvers.polish import polish
from tests.solvers.strategies import problems


@settings(max_examples=200, deadline=None)
@given(problems(max_tasks=12, max_processors=3), st.sampled_from(["makespan", "span"]), st.integers(0, 3))
def test_polish_is_valid_and_never_worse(problem, objective, seed):
    """Any problem (memory limits, affinity groups, delays): the result validates and is no worse than
    the schedule it started from."""
    start = list_schedule(problem, objective=objective)
    if start.schedule is None:
        return
    r = polish(problem, start.schedule, objective=objective, time_limit=2, seed=seed)
    validate(problem, r.schedule)
    assert r.objective == r.schedule.objective(problem, objective) <= start.schedule.objective(problem, objective)


def test_a_task_blocking_the_chain_moves_behind_it():
    """Task 0 (4 long) runs before task 1 on processor 0, and task 2 on processor 1 waits for task 1:
    moving task 0 behind task 1 lets task 2 start at 1, the optimum 5."""
    p = Problem(duration=[4, 1, 4], num_processors=2, edges=[[1, 2]], allowed=[[1, 0], [1, 0], [0, 1]])
    r = polish(p, Schedule(processor=[0, 0, 1], start=[0, 4, 5]))
    assert (r.objective, r.info["kept"]) == (5, 1)
    assert r.schedule.start.tolist() == [1, 0, 1]


def test_a_chain_task_moves_to_its_predecessors_processor():
    """Task 1 waits 10 for its predecessor's result from processor 0; on processor 0 itself it starts
    at 2 (the optimum 4), or task 0 on processor 1. Affinity groups, or a single allowed processor
    each, keep both where they are."""
    free = Problem(duration=[2, 2], num_processors=2, edges=[[0, 1]], delay=[10])
    r = polish(free, Schedule(processor=[0, 1], start=[0, 12]))
    validate(free, r.schedule)
    assert r.objective == 4 and r.schedule.processor[0] == r.schedule.processor[1]
    for kept in (
        Problem(duration=[2, 2], num_processors=2, edges=[[0, 1]], delay=[10], group=[0, 1]),
        Problem(duration=[2, 2], num_processors=2, edges=[[0, 1]], delay=[10], allowed=[[1, 0], [0, 1]]),
    ):
        assert polish(kept, Schedule(processor=[0, 1], start=[0, 12])).objective == 14


def test_memory_stops_a_move_that_would_overflow():
    """Processor 0 runs 0 (+2), 3 (after 0, frees 2), then 1 (+2), which task 2 on processor 1 waits
    for. Moving 1 ahead would let task 2 start sooner but hold 4: under a capacity of 2 no move fits
    and the schedule stays; under 4 the move is made."""

    def problem(capacity):
        return Problem(
            duration=[1, 1, 4, 4],
            num_processors=2,
            edges=[[1, 2], [0, 3]],
            allowed=[[1, 0], [1, 0], [0, 1], [1, 0]],
            mem_delta=[2, 2, 0, -2],
            capacity=[capacity, capacity],
        )

    start = Schedule(processor=[0, 0, 1, 0], start=[0, 5, 6, 1])
    tight = polish(problem(2), start)
    validate(problem(2), tight.schedule)
    assert tight.objective == 10 and tight.info["kept"] == 0
    roomy = polish(problem(4), start)
    validate(problem(4), roomy.schedule)
    assert roomy.objective < 10


def test_bad_input_is_refused():
    p = Problem(duration=[1, 1], num_processors=1)
    with pytest.raises(ValueError, match="unknown objective"):
        polish(p, Schedule(processor=[0, 0], start=[0, 1]), objective="latency")
    with pytest.raises(ValueError, match="not valid"):
        polish(p, Schedule(processor=[0, 0], start=[0, 0]))


def test_docstring_examples():
    assert doctest.testmod(solvers.polish).failed == 0
    assert doctest.testmod(solvers.ils).failed == 0


def test_span_is_never_lengthened_by_earliest_starts():
    """A late first task keeps a processor's span short; earliest-start timing would start it at 0.
    Polish keeps the given schedule when its own timing is worse."""
    p = Problem(duration=[1, 5, 1], num_processors=2, edges=[[1, 2]], allowed=[[0, 1], [1, 0], [0, 1]])
    given_ = Schedule(processor=[1, 0, 1], start=[4, 0, 5])  # processor 1 spans 4..6
    r = polish(p, given_, objective="span")
    assert r.objective <= given_.span(p) == 5
    assert np.array_equal(r.schedule.start, given_.start) or r.objective < 5


def test_polish_stops_at_a_known_bound():
    """With the optimum known (5 here), the search ends at the move that reaches it; without it, it
    goes on to look for more and ends at a local optimum."""
    p = Problem(duration=[4, 1, 4], num_processors=2, edges=[[1, 2]], allowed=[[1, 0], [1, 0], [0, 1]])
    s = Schedule(processor=[0, 0, 1], start=[0, 4, 5])
    bounded = polish(p, s, bound=5)
    assert bounded.objective == 5 and bounded.info["tried"] == bounded.info["kept"] == 1
    assert not bounded.info["local_optimum"]
    assert polish(p, s).info["local_optimum"]


@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_a_move_is_retimed_as_a_full_timing_would(objective):
    """`_Timing` re-times only what a move reaches. On random problems (unrelated processors, link
    factors, zero-length tasks) and random moves, its score and the schedule it makes equal those of
    timing the moved orders in full; where it finds a deadlock, so does the full timing, and where it
    says the makespan exceeds a cutoff, it does."""
    rng = np.random.default_rng(7)
    checked = deadlocks = worse = 0
    for _ in range(150):
        n, P = int(rng.integers(2, 16)), int(rng.integers(1, 5))
        pairs = rng.integers(0, n, size=(2 * n, 2))
        edges = np.unique(np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1), axis=0).reshape(-1, 2)
        link = rng.integers(0, 4, size=(P, P))
        p = Problem.unrelated(
            rng.integers(0, 7, size=(n, P)), edges=edges, delay=rng.integers(0, 5, len(edges)), link=link
        )
        orders = [[] for _ in range(P)]
        for t in range(n):  # index order is topological: these orders can run
            orders[int(rng.integers(P))].append(t)
        timing = solvers.polish._Timing(p, orders)
        for _ in range(20):
            q = int(rng.choice([r for r in range(P) if orders[r]]))
            k, dest = int(rng.integers(len(orders[q]))), int(rng.integers(P))
            to = int(rng.integers(len(orders[dest]) + (dest != q)))
            trial = list(orders)
            source = list(orders[q])
            task = source.pop(k)
            order = source if dest == q else list(orders[dest])
            order.insert(to, task)
            trial[q], trial[dest] = source, order
            try:  # at the makespan itself, or just below it, the cutoff is where a wrong bound shows
                cutoff = time_orders(p, trial).makespan(p) - int(rng.integers(0, 3))
            except Deadlock:
                cutoff = None
            scored = timing.trial(orders, q, k, dest, to, objective, cutoff)
            if scored is solvers.polish.WORSE:  # it says the makespan exceeds the cutoff: it does
                assert time_orders(p, trial).makespan(p) > cutoff
                worse += 1
                continue
            if scored is False:  # it says the moved orders deadlock: they do
                with pytest.raises(Deadlock):
                    time_orders(p, trial)
                deadlocks += 1
                continue
            if scored is None:  # no room left between its keys: polish times such a move in full
                continue
            full = time_orders(p, trial)  # a key order exists, so the moved orders cannot deadlock
            assert scored[0] == solvers.polish._score(p, full, objective)
            checked += 1
            if rng.random() < 0.5:
                made = timing.apply(scored[1], trial)
                assert made.start.tolist() == full.start.tolist()
                assert made.processor.tolist() == full.processor.tolist()
                orders = trial
    assert checked > 1000 and deadlocks > 100 and worse > 100


@settings(max_examples=40, deadline=None)
@given(problems(max_tasks=10, max_processors=3), st.sampled_from(["makespan", "span"]))
def test_ils_is_valid_never_worse_than_best_and_never_below_the_bound(problem, objective):
    """Any problem (memory limits, affinity groups, delays): `ils` returns a valid schedule no worse
    than the `best` schedule it started from, and never below its proven bound; it says optimal only
    at the bound. No worse than an unlimited `best` either, unless its own `best` (a quarter of its
    0.05 s) skipped candidates for time, which a loaded machine makes it do."""
    from solvers.heuristics import best

    start = best(problem, objective=objective)
    r = solve(problem, "ils", objective=objective, time_limit=0.05)
    if start.schedule is None:
        assert r.schedule is None
        return
    assert r.lower_bound <= r.objective == r.schedule.objective(problem, objective) <= r.info["best"]
    assert (r.status == "optimal") == (r.objective <= r.lower_bound)
    if "skipped: time limit" not in r.info["candidates"].values():
        assert r.objective <= start.objective


def test_ils_lists_what_its_best_ran_and_skipped_for_time():
    """The instance hypothesis found on a loaded machine: only ``fcp-ends``, 13th of `best`'s
    candidates, puts task 1 on processor 2 (span 1). With almost no time `ils`'s own `best` runs the
    first candidate alone, lists the others as skipped, and `ils` ends at its start's span (2); with
    time it reaches 1, as an unlimited `best` does."""
    p = Problem(duration=[1, 1], num_processors=3, edges=[[0, 1]], delay=[0], allowed=[[1, 0, 0], [1, 0, 1]],
                group=[0, 1])  # fmt: skip
    assert solve(p, "best", objective="span").objective == 1
    hurried = solve(p, "ils", objective="span", time_limit=1e-6)
    listed = hurried.info["candidates"]
    assert list(listed.values()).count("skipped: time limit") == len(listed) - 1
    assert hurried.objective == hurried.info["best"] == 2
    assert solve(p, "ils", objective="span", time_limit=5).objective == 1


def test_ils_starts_from_heft_with_another_rank_weight_where_that_is_better():
    """An instance found by random search: every candidate of `best` ends at 12 (``heft-t0.25`` among
    them), and so does HEFT with the transfers of its rank weighted 0.5, 0.75 or 1.5; weighted 3, it
    ends at 11, the bound. `ils` starts from that and stops there, proven optimal."""
    from solvers.heuristics import best, heft_ranked
    from solvers.ils import ILS_RANK_WEIGHTS

    p = Problem(duration=[5, 4, 3, 5, 2, 3], num_processors=2, edges=[[0, 3], [2, 3], [2, 4]], delay=[1, 3, 0])
    assert best(p).objective == 12 and 3.0 in ILS_RANK_WEIGHTS
    assert [heft_ranked(w)[1](p).objective for w in ILS_RANK_WEIGHTS] == [12, 12, 12, 11]
    r = solve(p, "ils", time_limit=2)
    assert (r.objective, r.status, r.info["best"], r.info["start"]) == (11, "optimal", 12, "heft-t3")
    validate(p, r.schedule)


def test_kicks_leave_a_local_optimum():
    """A random layered DAG of 100 tasks on 8 unrelated processors with link factors: polish alone
    stops at a local optimum; with kicks (`ils`, 2 s) the schedule is strictly shorter."""
    rng = np.random.default_rng(0)
    n, P, width = 100, 8, 10
    later = np.arange(width, n)
    dst = np.repeat(later, rng.integers(1, 4, size=len(later)))
    src = (dst // width - 1) * width + rng.integers(0, width, size=len(dst))
    edges = np.unique(np.stack([src, dst], axis=1), axis=0)
    speed = rng.choice([1, 2, 4], size=P)
    link = rng.choice([1, 2, 4], size=(P, P))
    cost = 4 * rng.integers(1, 21, size=n)
    problem = Problem.unrelated(
        cost[:, None] // speed[None, :], edges=edges, delay=rng.integers(0, 22, size=len(edges)), link=link
    )
    start = solve(problem, "best")
    alone = polish(problem, start.schedule, time_limit=30)
    assert alone.info["local_optimum"]
    kicked = solve(problem, "ils", time_limit=2)
    assert kicked.objective < alone.objective <= start.objective
    assert kicked.info["kicks"] > 0


def test_polish_stops_at_its_effort_and_gives_the_same_schedule_each_time():
    """``effort`` counts the tasks timed, not seconds: two runs give the same schedule, a larger
    effort is never worse, and the count ends within one step's work of the limit."""
    rng = np.random.default_rng(3)
    n = 300
    edges = np.unique(np.sort(rng.integers(0, n, size=(2 * n, 2)), axis=1), axis=0)
    edges = edges[edges[:, 0] < edges[:, 1]]
    p = Problem(duration=rng.integers(1, 21, n), num_processors=8, edges=edges, delay=rng.integers(0, 21, len(edges)))
    start = list_schedule(p)
    size = n + len(edges)
    runs = [polish(p, start.schedule, time_limit=1e9, effort=e * size) for e in (0, 5, 5, 20)]
    for r in runs:
        validate(p, r.schedule)
    assert runs[0].objective == start.objective and runs[0].info["tried"] == 0  # spent before the first step
    same = runs[1].schedule, runs[2].schedule
    assert np.array_equal(same[0].start, same[1].start) and np.array_equal(same[0].processor, same[1].processor)
    assert runs[1].info == runs[2].info
    assert runs[3].objective < runs[1].objective < start.objective  # 379 < 382 < 383
    for r, e in zip(runs[1:], (5, 5, 20), strict=True):  # stopped by the effort, not at an optimum
        assert not r.info["local_optimum"] and e * size <= r.info["work"] < (e + 3) * size
