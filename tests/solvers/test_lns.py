"""CP-SAT large-neighbourhood search (`solvers.lns`)."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers.lns
from solvers import Problem, Schedule, solve, time_orders, validate
from solvers.listsched import list_schedule
from solvers.lns import cpsat_lns
from tests.solvers.strategies import heterogeneous, problems


def layered(n: int = 40, processors: int = 3, seed: int = 0) -> Problem:
    """Random layered DAG of ``n`` tasks, four per layer, every processor allowed."""
    rng = np.random.default_rng(seed)
    edges = sorted({(int(rng.integers(v // 4 * 4 - 4, v // 4 * 4)), v) for v in range(4, n) for _ in range(2)})
    return Problem(
        duration=rng.integers(1, 9, n), num_processors=processors, edges=edges, delay=rng.integers(0, 4, len(edges))
    )


def test_lns_improves_on_its_hint_and_validates():
    p = layered()
    hint = list_schedule(p)
    result = cpsat_lns(p, time_limit=6, window=12, step_limit=0.5, hint=hint.schedule)
    validate(p, result.schedule)
    assert result.solver == "lns"
    assert result.lower_bound <= result.objective <= hint.objective
    assert result.status in ("optimal", "feasible")
    if result.status == "feasible":  # the whole-problem call did not prove it: polish, then windows
        assert result.objective <= result.info["polish"] <= hint.objective


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


def _start_and_cuts(problem: Problem, objective: str, data) -> tuple[Schedule, np.ndarray] | None:
    """List scheduling's schedule of ``problem`` (None where it finds none) and a cut per processor
    drawn between 0 and just past its end."""
    start = list_schedule(problem, objective=objective)
    if start.schedule is None:
        return None
    horizon = int(start.schedule.end(problem).max()) + 1
    P = problem.num_processors
    return start.schedule, np.array(data.draw(st.lists(st.integers(0, horizon), min_size=P, max_size=P)))


@settings(max_examples=200, deadline=None)
@given(
    problems(max_tasks=12, max_processors=3) | heterogeneous(max_tasks=12, max_processors=3),
    st.sampled_from(["makespan", "span"]),
    st.data(),
)
def test_a_window_is_replaced_validly_and_never_worse(problem, objective, data):
    """`reoptimize_window`: the free tasks move, the others stay exactly where they were, and the
    schedule stays valid (memory included) and no worse on the objective; a free task that changes
    memory keeps its processor, and an affinity group with a task in place keeps its processor; given
    a mask of processors, a free task that changes processor goes to a marked one. Equal and
    heterogeneous processors and links alike."""
    pytest.importorskip("ortools")
    from solvers.cpsat import reoptimize_window

    start = list_schedule(problem, objective=objective)
    if start.schedule is None:
        return
    free = np.array(data.draw(st.lists(st.booleans(), min_size=problem.num_tasks, max_size=problem.num_tasks)))
    P = problem.num_processors
    mask = data.draw(st.none() | st.lists(st.booleans(), min_size=P, max_size=P).map(np.array))
    moved = reoptimize_window(
        problem, start.schedule, free, time_limit=2, workers=1, objective=objective, processors=mask
    )
    assert moved is not None  # the current placement is a solution
    validate(problem, moved)
    if mask is not None:  # a free task moves only to a marked processor
        went = moved.processor != start.schedule.processor
        assert mask[moved.processor[went]].all()
    kept = ~free
    assert (moved.start[kept] == start.schedule.start[kept]).all()
    assert (moved.processor[kept] == start.schedule.processor[kept]).all()
    memory = problem.mem_delta != 0
    assert (moved.processor[memory] == start.schedule.processor[memory]).all()
    assert moved.objective(problem, objective) <= start.schedule.objective(problem, objective)


@settings(max_examples=150, deadline=None)
@given(
    problems(max_tasks=12, max_processors=3) | heterogeneous(max_tasks=12, max_processors=3),
    st.sampled_from(["makespan", "span"]),
    st.data(),
)
def test_tails_are_replaced_validly_and_never_worse(problem, objective, data):
    """`reoptimize_tails`: each processor's tasks from its cut on may move (on their processor), every
    other task stays exactly where it was; the result is valid (memory included), no worse, and no
    free task starts before the kept tasks of its processor end. Equal and heterogeneous processors."""
    pytest.importorskip("ortools")
    from solvers.cpsat import reoptimize_tails

    drawn = _start_and_cuts(problem, objective, data)
    if drawn is None:
        return
    sched, cut = drawn
    moved = reoptimize_tails(problem, sched, cut, 2, objective=objective, workers=1)
    assert moved is not None  # the current placement is a solution
    validate(problem, moved)
    free = sched.start >= cut[sched.processor]
    assert (moved.start[~free] == sched.start[~free]).all()
    assert (moved.processor == sched.processor).all()
    end = sched.end(problem)
    for q in range(problem.num_processors):
        kept = ~free & (sched.processor == q)
        if kept.any():
            assert (moved.start[free & (sched.processor == q)] >= end[kept].max()).all()
    assert moved.objective(problem, objective) <= sched.objective(problem, objective)


def test_tails_reach_the_optimum_of_a_late_block():
    """Three tasks on one processor, the last two left late: freed from time 1 on, they close up; and
    the bound given (the optimum) is accepted as the objective's floor."""
    from solvers.cpsat import reoptimize_tails

    p = Problem(duration=[2, 3, 1], num_processors=2, edges=[[0, 1]], delay=[5])
    s = Schedule(processor=[0, 0, 1], start=[0, 6, 9])
    got = reoptimize_tails(p, s, np.array([1, 0]), 5, bound=5)
    assert got.start[:2].tolist() == [0, 2]  # task 2 may lie anywhere in [0, 4]: every such place is optimal
    assert got.makespan(p) == 5
    with pytest.raises(ValueError, match="one time per processor"):
        reoptimize_tails(p, s, np.array([1]), 5)


def test_a_tail_windows_own_bound_is_its_optimum_when_proven():
    """`solve_tails`' ``stats``: the late block above, freed from time 1 on, is proven at 5, which is
    the window's bound; with nothing free the schedule is its own window, bound and all."""
    from solvers.cpsat import solve_tails

    p = Problem(duration=[2, 3, 1], num_processors=2, edges=[[0, 1]], delay=[5])
    s = Schedule(processor=[0, 0, 1], start=[0, 6, 9])
    stats: dict = {}
    # task 0 kept (on processor 0 from 0), task 1 and 2 free: nothing can end before 2 + 3
    got, proven = solve_tails(p, s, np.array([1, 0]), 5, stats=stats)
    assert proven and got.makespan(p) == 5
    assert stats == {"free": 2, "bound": 5}
    stats = {}
    got, proven = solve_tails(p, s, np.array([100, 100]), 5, stats=stats)
    assert proven and got is s and stats == {"free": 0, "bound": 10}


@settings(max_examples=60, deadline=None)
@given(problems(max_tasks=10, max_processors=3), st.sampled_from(["makespan", "span"]), st.data())
def test_a_tail_windows_bound_lies_between_the_bound_given_and_what_it_found(problem, objective, data):
    """`solve_tails`' ``stats["bound"]``: at least the (valid) bound it was given, at most the window's
    schedule (the start is one of the window's schedules, so also at most the start), and equal to
    the schedule where proven."""
    from solvers.bounds import lower_bound
    from solvers.cpsat import solve_tails

    drawn = _start_and_cuts(problem, objective, data)
    if drawn is None:
        return
    sched, cut = drawn
    value = sched.objective(problem, objective)
    given_bound = data.draw(st.sampled_from([0, lower_bound(problem, objective)]))  # valid bounds only
    stats: dict = {}
    got, proven = solve_tails(problem, sched, cut, 2, objective=objective, bound=given_bound, workers=1, stats=stats)
    assert stats["free"] == int((sched.start >= cut[sched.processor]).sum())
    assert got is not None  # the start is a solution
    found = got.objective(problem, objective)
    assert given_bound <= stats["bound"] <= found <= value
    if proven:
        assert stats["bound"] == found


@settings(max_examples=60, deadline=None)
@given(problems(max_tasks=10, max_processors=3), st.sampled_from(["makespan", "span"]), st.data())
def test_a_tail_window_finds_the_same_optimum_with_its_memory_expanded_or_not(problem, objective, data):
    """`solve_tails` keeps the memory reservoirs as they are (``expand_memory=False``) or lets CP-SAT
    expand them into pairwise precedences (True); by default it expands them only for windows of at
    most `TAIL_EXPANSION_TASKS` free tasks. Both models are the same problem: each schedule is valid
    (memory included), and where both are proven optimal they reach the same objective."""
    from solvers.cpsat import solve_tails

    drawn = _start_and_cuts(problem, objective, data)
    if drawn is None:
        return
    sched, cut = drawn
    found = {}
    for expand in (False, True):
        got, proven = solve_tails(problem, sched, cut, 5, objective=objective, workers=1, expand_memory=expand)
        assert got is not None  # the start is a solution
        validate(problem, got)
        found[expand] = got.objective(problem, objective), proven
    (a, proven_a), (b, proven_b) = found[False], found[True]
    if proven_a and proven_b:
        assert a == b


def test_a_tail_window_expands_its_memory_only_up_to_a_size(monkeypatch):
    """`solve_tails`' default: CP-SAT expands the reservoirs of a window of at most
    `TAIL_EXPANSION_TASKS` free tasks, and keeps those of a wider one as they are."""
    import solvers.cpsat
    from solvers.cpsat import solve_tails

    seen = []

    class Spy(solvers.cpsat.cp_model.CpSolver):
        def solve(self, model, *args):
            seen.append(self.parameters.expand_reservoir_constraints)
            return super().solve(model, *args)

    monkeypatch.setattr(solvers.cpsat.cp_model, "CpSolver", Spy)
    p = Problem(duration=[2] * 6, num_processors=1, mem_delta=[1, 1, 1, -1, -1, -1], capacity=[2], edges=[[0, 3]])
    s = list_schedule(p).schedule
    free = p.num_tasks  # the cut at 0 frees every task
    for limit, expanded in ((free, True), (free - 1, False)):
        monkeypatch.setattr(solvers.cpsat, "TAIL_EXPANSION_TASKS", limit)
        got, proven = solve_tails(p, s, np.array([0]), 5, workers=1)
        validate(p, got)
        assert proven and seen[-1] is expanded


def test_a_tail_window_takes_more_cpsat_parameters_and_a_log(monkeypatch):
    """`solve_tails`' ``parameters`` (by name; a list extends a repeated one) reach CP-SAT, and ``log``
    hears its search log; the window is solved as without them."""
    import solvers.cpsat
    from solvers.cpsat import solve_tails

    seen = []

    class Spy(solvers.cpsat.cp_model.CpSolver):
        def solve(self, model, *args):
            seen.append((self.parameters.random_seed, list(self.parameters.ignore_subsolvers)))
            return super().solve(model, *args)

    monkeypatch.setattr(solvers.cpsat.cp_model, "CpSolver", Spy)
    p = Problem(duration=[2, 3, 1], num_processors=2, edges=[[0, 1]], delay=[5])
    s = Schedule(processor=[0, 0, 1], start=[0, 6, 9])
    lines: list[str] = []
    parameters = {"random_seed": 7, "ignore_subsolvers": ["ls", "rins/rens"]}
    got, proven = solve_tails(p, s, np.array([1, 0]), 5, parameters=parameters, log=lines.append)
    assert proven and got.makespan(p) == 5
    assert seen == [(7, ["ls", "rins/rens"])]
    assert any("CP-SAT" in line for line in lines)


@settings(max_examples=20, deadline=None)
@given(problems(max_tasks=10, max_processors=3), st.sampled_from(["makespan", "span"]), st.sampled_from([0.3, 1.0]))
def test_a_band_step_is_valid_and_never_worse(problem, objective, band):
    """`improve_bands` (memory limits and affinity groups included): what it returns is valid and no
    worse than where it started."""
    from solvers.lns import improve_bands

    start = list_schedule(problem, objective=objective)
    if start.schedule is None:
        return
    got, info = improve_bands(problem, start.schedule, objective=objective, time_limit=0.8, band=band, step_limit=0.3)
    validate(problem, got)
    assert got.objective(problem, objective) <= start.schedule.objective(problem, objective)
    assert info["steps"] >= 1 or start.schedule.objective(problem, objective) == 0


def test_band_steps_keep_zero_length_tasks_in_edge_order(monkeypatch):
    """Task 2 feeds task 1, both of length 0 at time 2 on one processor. The kept tasks' order pairs
    once listed them by index, against the edge: with the edge, that pair held both to one start."""
    from solvers.lns import improve_bands

    p = Problem(duration=[2, 0, 0, 1, 3], num_processors=1, edges=[[0, 2], [2, 1], [1, 3]])
    start = time_orders(p, [[0, 2, 1, 3, 4]])
    pairs, real = [], solvers.lns.cpsat

    def spy(*args, **kw):
        pairs.extend(map(tuple, kw["order_pairs"].tolist()))
        return real(*args, **kw)

    monkeypatch.setattr(solvers.lns, "cpsat", spy)
    improve_bands(p, start, time_limit=1.5, band=0.2, step_limit=0.1)
    assert (2, 1) in pairs and (1, 2) not in pairs


def test_a_band_over_every_task_is_cpsat_from_the_start():
    """With the band over every task nothing is kept in order, so one step is CP-SAT on the whole
    problem from the start: on a small layered DAG it reaches CP-SAT's own optimum from list's schedule."""
    from solvers.cpsat import cpsat
    from solvers.lns import improve_bands

    p = layered(16, processors=2, seed=1)
    start = list_schedule(p)
    optimum = cpsat(p, time_limit=10)
    assert optimum.status == "optimal" and start.objective > optimum.objective
    got, info = improve_bands(p, start.schedule, time_limit=10, band=1.0, step_limit=5, bound=optimum.objective)
    validate(p, got)
    assert got.objective(p, "makespan") == optimum.objective and info["improvements"] >= 1
    with pytest.raises(ValueError, match="band"):
        improve_bands(p, start.schedule, band=0)


def test_a_window_under_a_memory_limit_reorders_within_it():
    """One processor of capacity 4: a (+4) then b (-4, frees it) then c (+4) is the only valid order
    of the three; a window over b and c with a in place may not put c before b, however much earlier
    c could start."""
    from solvers.cpsat import reoptimize_window

    p = Problem(duration=[1, 5, 1], num_processors=1, mem_delta=[4, -4, 4], capacity=[4], edges=[(0, 1)])
    s = Schedule(processor=[0, 0, 0], start=[0, 1, 6])
    moved = reoptimize_window(p, s, np.array([False, True, True]), time_limit=2)
    validate(p, moved)
    assert moved.start.tolist() == [0, 1, 6]
    roomy = Problem(duration=[1, 5, 1], num_processors=1, mem_delta=[4, -4, 4], capacity=[8], edges=[(0, 1)])
    moved = reoptimize_window(roomy, s, np.array([False, True, True]), time_limit=2)
    validate(roomy, moved)
    assert moved.start.tolist() == [0, 2, 1]  # room for both: c first ends the window no later, sooner in sum


def test_lns_steps_on_a_memory_limited_span_problem():
    """Memory limits and the span objective run window steps too; what they accept is valid and
    never worse than the start."""
    rng = np.random.default_rng(3)
    p = layered(400, processors=4, seed=2)
    p = Problem(
        duration=p.duration,
        num_processors=4,
        edges=p.edges,
        delay=p.delay,
        mem_delta=rng.integers(-3, 4, p.num_tasks),
        capacity=[40] * 4,
    )
    start = list_schedule(p, objective="span")
    assert start.schedule is not None
    r = cpsat_lns(p, objective="span", time_limit=4, window=30, hint=start.schedule, workers=1)
    validate(p, r.schedule)
    assert r.info["steps"] >= 1
    assert r.objective <= start.objective


def test_local_steps_run_on_a_large_memory_free_problem():
    """5,000 tasks: whole-problem steps would each rebuild a model of every task; window steps
    model the window only, and what they accept is valid and never worse than the start."""
    p = layered(5000, processors=8, seed=1)
    start = list_schedule(p)
    r = cpsat_lns(p, time_limit=4, window=30, hint=start.schedule, workers=1)
    validate(p, r.schedule)
    assert r.info["steps"] >= 1
    assert r.objective <= start.objective


def test_coarse_levels_reach_the_optimum_of_a_problem_in_large_units():
    """Durations of thousands of time steps: the coarse level (the longest task 6 units) solves the
    problem in small numbers, and its orders timed with the real durations are optimal here."""
    from solvers.lns import improve_coarse

    p = Problem(duration=[3000, 3000, 2000, 2000, 2000], num_processors=2)
    serial = Schedule(processor=np.zeros(5, dtype=np.int64), start=np.array([0, 3000, 6000, 8000, 10000]))
    validate(p, serial)
    got, info = improve_coarse(p, serial, time_limit=10, bound=6000)
    validate(p, got)
    assert got.objective(p, "makespan") == 6000
    assert list(info["levels"]) == ["1/500"]  # the first level reached the bound: no other ran


def test_coarse_levels_keep_the_order_of_symmetry_chains():
    """Task 0 feeds a long task on the other processor, task 1 does not: running 0 first is shorter.
    The coarse levels find that, unless a symmetry chain (the caller's word that the tasks are
    interchangeable, here wrongly) says that 1 starts first: then they keep 1 first."""
    from solvers.lns import improve_coarse

    p = Problem(duration=[3000, 3000, 6000], num_processors=2, edges=[[0, 2]], allowed=[[1, 0], [1, 0], [0, 1]])
    one_first = Schedule(processor=np.array([0, 0, 1]), start=np.array([3000, 0, 6000]))
    validate(p, one_first)
    free, _ = improve_coarse(p, one_first, time_limit=10, bound=9000)
    assert free.objective(p, "makespan") == 9000 and free.start[0] < free.start[1]
    kept, info = improve_coarse(p, one_first, time_limit=10, bound=9000, symmetry=[[1, 0]])
    validate(p, kept)
    assert kept.start[1] < kept.start[0] and kept.objective(p, "makespan") == 12000
    assert info["levels"]  # the levels ran, and found nothing shorter with 1 first


@settings(max_examples=15, deadline=None)
@given(problems(max_tasks=10, max_processors=3), st.sampled_from(["makespan", "span"]), st.integers(1, 1000))
def test_coarse_levels_are_valid_and_never_worse(problem, objective, scale):
    """`improve_coarse` (memory limits and affinity groups included), on the problem with every time
    ``scale`` times longer: what it returns is valid and no worse than where it started; a level
    runs only where its unit is at least 2 time steps."""
    import dataclasses

    from solvers.lns import COARSE_RESOLUTIONS, improve_coarse

    problem = dataclasses.replace(problem, duration=problem.duration * scale, delay=problem.delay * scale)
    start = list_schedule(problem, objective=objective)
    if start.schedule is None:
        return
    got, info = improve_coarse(problem, start.schedule, objective=objective, time_limit=1.5)
    validate(problem, got)
    assert got.objective(problem, objective) <= start.schedule.objective(problem, objective)
    longest = int(problem.duration.max())
    coarse_enough = [r for r in COARSE_RESOLUTIONS if longest / r >= 2]
    assert len(info["levels"]) <= len(coarse_enough)
    if not coarse_enough:
        assert info["levels"] == {} and got is start.schedule


def test_coarsened_refuses_a_unit_below_one():
    from solvers.lns import coarsened

    p = Problem(duration=[5, 1, 0], num_processors=1)
    assert coarsened(p, 4).duration.tolist() == [1, 1, 0]  # a task that takes time keeps at least 1
    for unit in (0.5, float("nan")):
        with pytest.raises(ValueError, match="unit"):
            coarsened(p, unit)


def wide_layered(n: int, processors: int, seed: int) -> Problem:
    """Random layered DAG of ``n`` tasks in layers of about sqrt(n), each task with 1-3 predecessors in
    the layer before; durations 1-20, transfer delays 0-20 (about as long as a task)."""
    rng = np.random.default_rng(seed)
    width = round(n**0.5)
    later = np.arange(width, n)
    dst = np.repeat(later, rng.integers(1, 4, len(later)))
    src = (dst // width - 1) * width + rng.integers(0, width, len(dst))
    edges = np.unique(np.stack([src, dst], axis=1), axis=0)
    return Problem(
        duration=rng.integers(1, 21, n), num_processors=processors, edges=edges, delay=rng.integers(0, 21, len(edges))
    )


def test_windows_of_a_few_processors_improve_a_polished_schedule_on_many():
    """400 tasks on 32 processors, from HEFT's schedule polished to a local optimum (439): windows
    of `WINDOW_PROCESSORS` processors around the critical chain reach 430 in about 30 steps (0.6 s
    here). Windows of 30 tasks across all 32 processors ended at 432 after 30 s (487 steps). Each
    step is limited by CP-SAT's deterministic time, so the steps are the same on any machine (18 of
    them, 1 s here); the time limit is only a ceiling."""
    from solvers.heuristics import heft
    from solvers.lns import improve_windows
    from solvers.polish import polish

    p = wide_layered(400, 32, seed=0)
    start = polish(p, heft(p).schedule, time_limit=60)
    assert start.info["local_optimum"] and start.objective == 439
    got, info = improve_windows(
        p, start.schedule, time_limit=300, window=30, bound=430, workers=1, steps=100, step_work=0.02
    )
    validate(p, got)
    assert got.objective(p, "makespan") <= 430


def test_a_window_spans_the_processors_of_its_task_and_its_neighbours_first():
    """`_window_processors`: the task's processor, then those of its neighbours on the chain, then
    those of its neighbours in the graph, then random ones, `WINDOW_PROCESSORS` in all."""
    from solvers.graph import neighbours
    from solvers.lns import WINDOW_PROCESSORS, _window_processors

    assert WINDOW_PROCESSORS == 4
    # task 2 on processor 5, its chain neighbours 1 and 3 on 7 and 5, its graph neighbour 4 on 9
    processor = np.array([0, 7, 5, 5, 9, 11, 12])
    edges = np.array([[2, 4], [0, 1]])
    near = neighbours(7, edges)
    rng = np.random.default_rng(0)
    for _ in range(20):
        mask = _window_processors(processor, 2, [1, 2, 3], near, 16, rng)
        assert mask.sum() == 4 and mask[[5, 7, 9]].all()
    mask = _window_processors(processor, 0, [], near, 16, rng)  # own 0, graph neighbour 1 on 7
    assert mask.sum() == 4 and mask[[0, 7]].all()


def test_every_other_chain_window_centres_on_the_end_of_the_chain():
    """`_chain_position`: chain windows come on odd steps; steps 1, 5, 9, ... centre on one of the
    chain's last `TAIL` tasks, steps 3, 7, ... anywhere on it (both ends reached)."""
    from solvers.lns import TAIL, _chain_position

    rng = np.random.default_rng(0)
    tail = [_chain_position(100, step, rng) for step in range(1, 4000, 4)]
    assert min(tail) == 100 - TAIL and max(tail) == 99
    anywhere = [_chain_position(100, step, rng) for step in range(3, 4000, 4)]
    assert min(anywhere) == 0 and max(anywhere) == 99
    assert {_chain_position(3, 1, rng) for _ in range(50)} == {0, 1, 2}  # a chain shorter than TAIL


@settings(max_examples=30, deadline=None)
@given(heterogeneous(max_tasks=30, max_processors=4), st.sampled_from(["makespan", "span"]))
def test_lns_on_heterogeneous_problems_is_valid_never_worse_and_above_the_bound(problem, objective):
    """Heterogeneous processors and links: no whole-problem CP-SAT call, windows from the hint.
    The result is valid, no worse than the hint and never below the bound of `solvers.bounds`."""
    from solvers.bounds import lower_bound

    start = list_schedule(problem, objective=objective)
    if start.schedule is None:
        return
    r = cpsat_lns(problem, objective=objective, time_limit=0.5, window=6, hint=start.schedule, workers=1)
    validate(problem, r.schedule)
    assert r.objective <= start.objective
    assert r.lower_bound == min(lower_bound(problem, objective), r.objective) <= r.objective


def unequal(problem: Problem, seed: int) -> Problem:
    """``problem`` on processors of speeds 1, 2 or 4 (a task's duration is 4 times its own over the
    speed) and links of speeds 1, 2 or 4 between each pair (a delay's factor is 4 over it)."""
    rng = np.random.default_rng(seed)
    P = problem.num_processors
    speed = rng.choice([1, 2, 4], size=P)
    links = np.triu(rng.choice([1, 2, 4], size=(P, P)), 1)
    links = links + links.T
    np.fill_diagonal(links, 4)
    on = 4 * problem.duration[:, None] // speed[None, :]
    return Problem.unrelated(on, edges=problem.edges, delay=problem.delay, link=4 // links)


def test_windows_improve_a_polished_schedule_on_heterogeneous_processors():
    """100 tasks on 8 processors of unequal speeds and links, from `best`'s schedule polished to a
    local optimum: window steps, which model each task's duration on each processor and each link's
    factor, take it below what polish could reach. Each step is limited by CP-SAT's deterministic
    time, so the steps are the same on any machine (4 of them, 3 s here; with steps of 0.1 s of wall
    time, 20 s on CI's machine reached 3 units below polish's result); the time limit is only a
    ceiling."""
    from solvers.heuristics import best
    from solvers.lns import improve_windows
    from solvers.polish import polish

    p = unequal(wide_layered(100, 8, seed=1), seed=101)
    start = polish(p, best(p).schedule, time_limit=60)
    assert start.info["local_optimum"]
    target = start.objective - 10
    got, info = improve_windows(p, start.schedule, time_limit=300, bound=target, workers=1, steps=100, step_work=0.02)
    validate(p, got)
    assert got.objective(p, "makespan") <= target


def test_window_steps_limited_by_deterministic_work_repeat_exactly():
    """With ``step_work`` and one worker, two runs from the same schedule take the same steps and end
    at the same schedule, whatever else the machine is doing (the steps' wall-clock limit is what
    made the same test end at different makespans on different machines)."""
    from solvers.heuristics import best
    from solvers.lns import improve_windows

    p = unequal(wide_layered(60, 6, seed=2), seed=7)
    start = best(p).schedule
    runs = [improve_windows(p, start, time_limit=300, workers=1, steps=12, step_work=0.01, seed=3) for _ in range(2)]
    (a, info_a), (b, info_b) = runs
    validate(p, a)
    assert info_a == info_b and info_a["steps"] == 12
    assert a.processor.tolist() == b.processor.tolist() and a.start.tolist() == b.start.tolist()


def test_a_seed_reaches_cpsat_in_every_step_and_seed_0_leaves_its_default(monkeypatch):
    """``seed`` is CP-SAT's random seed less one in every step that calls it (the whole-problem call of
    `cpsat_lns`, band, coarse, tail and window steps): seed 0 leaves CP-SAT's own default (1), so a
    call without a seed searches as before. A seed out of range is refused."""
    import solvers.cpsat
    from solvers.cpsat import MAX_SEED, cpsat
    from solvers.lns import improve_bands, improve_coarse, improve_tails, improve_windows

    seen: list[int] = []

    class Spy(solvers.cpsat.cp_model.CpSolver):
        def solve(self, model, *args):
            seen.append(self.parameters.random_seed)
            return super().solve(model, *args)

    monkeypatch.setattr(solvers.cpsat.cp_model, "CpSolver", Spy)
    p = layered(24, processors=2, seed=1)
    start = list_schedule(p).schedule
    big = Problem(duration=[3000, 3000, 2000, 2000, 2000], num_processors=2)  # coarse levels run on it
    serial = Schedule(processor=np.zeros(5, dtype=np.int64), start=np.array([0, 3000, 6000, 8000, 10000]))
    cut = np.zeros(2, dtype=np.int64)  # every task free
    for seed in (0, 4):
        steps = {
            "lns": lambda s=seed: cpsat_lns(p, time_limit=1.0, window=8, step_limit=0.2, hint=start, seed=s),
            # a band step starts only with more than 0.5 s left: room for one on a loaded machine
            "bands": lambda s=seed: improve_bands(p, start, time_limit=1.5, band=0.5, step_limit=0.3, seed=s),
            "coarse": lambda s=seed: improve_coarse(big, serial, time_limit=2, bound=6000, seed=s),
            # each of a tail window's three searches first: CP-SAT's fixed search, the unhinted, the hinted
            "tails, fixed": lambda s=seed: improve_tails(p, start, cut, time_limit=0.6, fixed_first=0.1, seed=s),
            "tails, unhinted": lambda s=seed: improve_tails(p, start, cut, time_limit=0.6, unhinted=1, seed=s),
            "tails, hinted": lambda s=seed: improve_tails(p, start, cut, time_limit=0.6, seed=s),
            "windows": lambda s=seed: improve_windows(p, start, time_limit=0.5, window=8, step_limit=0.2, seed=s),
        }
        for name, run in steps.items():
            seen.clear()
            run()
            assert seen and set(seen) == {seed + 1}, (name, seed, seen)
    for bad in (-1, MAX_SEED + 1):
        with pytest.raises(ValueError, match="seed"):
            cpsat(p, time_limit=1, seed=bad)
