"""`--solver best`: the best of everything it lists, fused and split backward, with a bound that holds
for everything it searched."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersched.describe.stages import Pipeline
from layersched.schedule.solve import fused_is_dominated, solve_best, solve_pipeline
from solvers import validate

pytest.importorskip("ortools")


def pipeline(F, I, W, B, overhead, m=4, transfer=1, mem=None, capacity=None) -> Pipeline:
    S = len(F)
    ints = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    zero = np.zeros(S, dtype=np.int64)
    mem_f = ints(mem if mem is not None else [0] * S)
    return Pipeline(
        "t",
        S,
        m,
        ints(F),
        ints(I),
        ints(W),
        np.full(S - 1, transfer, dtype=np.int64),
        mem_f,
        mem_f // 2,
        capacity,
        zero,
        zero,
        time_unit="unit",
        memory_unit="unit",
        action_overhead=overhead,
        backward=None if B is None else ints(B),
    )


def check_best(pipe: Pipeline, time_limit: float = 2.0):
    sol = solve_best(pipe, time_limit=time_limit)
    validate(sol.tasks.problem, sol.schedule)
    value, bound = sol.metrics["value"], sol.metrics["lower_bound"]
    listed = {k: v for k, v in sol.info["candidates"].items() if isinstance(v, int)}
    assert listed, sol.info
    for name, v in listed.items():
        assert value <= v, f"best {value} is worse than its candidate {name} {v}"
    assert bound <= value
    return sol, listed


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stages=st.integers(2, 3),
    m=st.integers(2, 4),
    costs=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(0, 9)), min_size=3, max_size=3),
    fused_saving=st.integers(0, 6),
    overhead=st.fixed_dictionaries({k: st.integers(0, 4) for k in "FIWB"}),
)
def test_best_is_never_worse_than_any_candidate_it_lists(stages, m, costs, fused_saving, overhead):
    F, I, W = (list(x) for x in zip(*costs[:stages], strict=True))
    B = [max(1, i + w - fused_saving) for i, w in zip(I, W, strict=True)]
    sol, listed = check_best(pipeline(F, I, W, B, overhead, m=m))
    # a bound valid for everything searched is below every candidate too: here every candidate is
    # at the searched placement (one stage per rank), so none may beat the bound
    assert all(sol.metrics["lower_bound"] <= v for v in listed.values())


def test_fused_backward_wins_where_splitting_costs_more():
    """A runner cost per action makes I + W dearer than B: the split search alone (the old `best`)
    cannot reach the fused optimum and must not claim a bound above it."""
    pipe = pipeline([4, 4], [4, 4], [4, 4], None, {"F": 0, "I": 8, "W": 8, "B": 0}, m=4)
    assert not fused_is_dominated(pipe)
    sol, listed = check_best(pipe, time_limit=5)
    assert not sol.split_backward
    assert sol.metrics["value"] == min(listed["gpipe"], listed["1f1b"])
    assert set(sol.info["searched"]) == {"split", "fused"}
    # the split graph's own optimum is worse: its bound alone would have been wrong for the result
    split = sol.info["searched"]["split"]
    assert split["status"] == "optimal" and split["bound"] > sol.metrics["value"]
    assert sol.metrics["lower_bound"] == sol.metrics["value"]  # both modes proven: fused is optimal


def test_split_backward_alone_is_searched_where_it_covers_fused():
    pipe = pipeline([2, 2, 2], [2, 2, 2], [1, 1, 1], None, 0, m=6)
    assert fused_is_dominated(pipe)
    sol, _ = check_best(pipe)
    assert set(sol.info["searched"]) == {"split"}
    # never worse than the best single template, which it also lists
    assert sol.metrics["value"] <= solve_pipeline(pipe, schedule="zb-h1").metrics["value"]


def test_cpsat_searches_on_large_memory_instances_instead_of_stalling_in_presolve():
    """Zero Bubble's 1.5B with 64 micro-batches: 294,912 pairs of memory events. Expanded into pairwise
    precedences, presolve took the whole 8 s and CP-SAT stopped with UNKNOWN (the hint came back);
    kept as reservoirs, it searches and reports its own FEASIBLE (or OPTIMAL)."""
    from dataclasses import replace

    import solvers.cpsat as cpsat_module
    from layersched.describe.config import load_problem
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.solve import symmetry_chains
    from tests.paths import PROBLEMS

    pipe = replace(pipeline_from_spec(load_problem(PROBLEMS / "zb-1.5b.yaml")), num_microbatches=64)
    sol = solve_pipeline(pipe, schedule="zb-h1")
    assert cpsat_module._reservoir_pairs(sol.tasks.problem) > cpsat_module.RESERVOIR_EXPANSION_LIMIT
    r = cpsat_module.cpsat(
        sol.tasks.problem, objective="span", time_limit=8, hint=sol.schedule, symmetry=symmetry_chains(sol.tasks)
    )
    assert r.info["cp_status"] in ("FEASIBLE", "OPTIMAL"), r.info
    assert r.objective <= sol.metrics["value"]


def test_best_polishes_the_v_template_to_its_memory_relay_bound():
    """Zero Bubble's V row re-cut to p=8, m=16: the zb-v template leaves a little idle on the chain of
    the last micro-batch; `best` moves passes off that chain (polish) until it meets its bound (the
    memory relay through the middle rank): proven optimal. The time limit holds: CP-SAT's presolve
    probing ran 19.7 s of a 2.4 s limit here before `limit_probing`."""
    import time

    from layersched.describe.config import ProblemSpec, load_problem
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.bounds import pipeline_bounds
    from tests.paths import PROBLEMS

    spec = load_problem(PROBLEMS / "zb-v-6.2b.yaml").model_dump(exclude_none=True)
    spec["pipeline"].update(stages=16, microbatches=16, memory_limit=16 * spec["pipeline"]["memory_forward"])
    pipe = pipeline_from_spec(ProblemSpec.model_validate(spec))
    template = solve_pipeline(pipe, schedule="zb-v").metrics["value"]
    t0 = time.perf_counter()
    sol, listed = check_best(pipe, time_limit=6)
    assert time.perf_counter() - t0 < 6 + 2  # CP-SAT may overrun by its 1 s grace, checking by 0.1 s
    assert sol.metrics["value"] < template
    assert listed["polish (split)"] < template
    relay = pipeline_bounds(pipe, pipe.stage_to_rank(), "span")["memory_relay"]
    assert sol.metrics["value"] == sol.metrics["lower_bound"] == relay
    assert sol.result.status == "optimal"


@pytest.mark.slow
def test_best_is_optimal_on_the_zb_v_row():
    """The issue's ZB-V row (p=16, m=48) in 30 s: bubble 0.0697, the ZB authors' published figure, and
    proven optimal by the memory relay bound (torch's ScheduleZBVZeroBubble order gives 0.0712)."""
    from layersched.describe.config import load_problem
    from layersched.describe.stages import pipeline_from_spec
    from tests.paths import PROBLEMS

    pipe = pipeline_from_spec(load_problem(PROBLEMS / "zb-v-6.2b.yaml"))
    sol, _ = check_best(pipe, time_limit=30)
    assert round(sol.metrics["bubble_rate"], 4) == 0.0697
    assert sol.metrics["value"] == sol.metrics["lower_bound"]


def test_a_short_limit_tries_the_fixed_patterns_before_a_greedy_search():
    """Zero Bubble's V row re-cut to p=24, m=48 (6,912 tasks): chunk-greedy's estimate (ranks times
    passes, at the slowest rate measured) is over 3 s here, zb-v's pattern takes milliseconds. Under a
    3 s limit `best` runs the fixed patterns first, does not start chunk-greedy, and ends in time with
    zb-v's schedule or better. Before, chunk-greedy ran first (alphabetically; the first template
    always runs), took 9 s and left no time for zb-v: bubble 0.2192 against zb-v's 0.1056."""
    import time

    from layersched.describe.config import ProblemSpec, load_problem
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.greedy import simulation_steps
    from layersched.schedule.templates import get_template
    from tests.paths import PROBLEMS

    spec = load_problem(PROBLEMS / "zb-v-6.2b.yaml").model_dump(exclude_none=True)
    spec["pipeline"].update(stages=48, microbatches=48, memory_limit=48 * spec["pipeline"]["memory_forward"])
    pipe = pipeline_from_spec(ProblemSpec.model_validate(spec))
    assert get_template("chunk-greedy").seconds_per_step * simulation_steps(pipe) > 3
    t0 = time.perf_counter()
    sol, listed = check_best(pipe, time_limit=3)
    assert time.perf_counter() - t0 < 3 + 2
    assert sol.info["candidates"]["chunk-greedy"].startswith("not tried")
    assert "zb-v" in listed and sol.metrics["value"] <= listed["zb-v"]


@pytest.mark.parametrize("most", [10_000, 10])
def test_the_coarse_levels_keep_the_symmetry_chains_up_to_a_size(monkeypatch, most):
    """`best` hands the coarse levels the micro-batch chains (`symmetry_chains`) where the graph has at
    most `COARSE_SYMMETRY_TASKS` tasks, and none where it has more; it starts them from a schedule in
    the chains' order. (The tail step before them, the levels and later steps are stubbed: this is about
    what the levels are given.)"""
    import solvers.lns
    from layersched.schedule import solve

    calls = []

    def coarse(problem, schedule, **kw):
        calls.append((problem, schedule, kw["symmetry"]))
        return schedule, {"levels": {}}

    monkeypatch.setattr(solvers.lns, "improve_coarse", coarse)
    monkeypatch.setattr(solvers.lns, "improve_bands", lambda p, s, **kw: (s, {}))
    monkeypatch.setattr(solvers.lns, "improve_windows", lambda p, s, **kw: (s, {}))
    monkeypatch.setattr(solve, "COARSE_SYMMETRY_TASKS", most)
    monkeypatch.setattr(solvers.lns, "improve_tails", lambda p, s, cut, **kw: (s, {}))
    # the 1.5B interleaved row re-cut to p=4, m=8: nothing before the coarse levels reaches the bound
    import yaml

    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from tests.paths import PROBLEMS

    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(stages=12, microbatches=8, memory_limit=12 * doc["pipeline"]["memory_forward"])
    solve_best(pipeline_from_spec(ProblemSpec.model_validate(doc)), time_limit=8)
    assert calls
    for problem, schedule, chains in calls:
        n = problem.num_tasks
        if n <= most:
            assert chains and sorted(t for c in chains for t in c) == list(range(n))
            assert all(np.all(np.diff(schedule.start[c]) >= 0) for c in chains)
        else:
            assert chains is None


@pytest.mark.parametrize(("first", "order"), [(10_000, ["coarse", "tails"]), (0, ["tails", "coarse"])])
def test_the_coarse_levels_come_before_the_tail_step_on_small_graphs(monkeypatch, first, order):
    """Where the graph has at most `COARSE_FIRST_TASKS` tasks the coarse levels run before the tail
    step, elsewhere after it (each once; both stubbed, so the order is what is seen)."""
    import solvers.lns
    from layersched.schedule import solve

    calls = []

    def step(name):
        def run(problem, schedule, *args, **kw):
            calls.append(name)
            return schedule, {"levels": {}}

        return run

    monkeypatch.setattr(solvers.lns, "improve_coarse", step("coarse"))
    monkeypatch.setattr(solvers.lns, "improve_tails", step("tails"))
    monkeypatch.setattr(solvers.lns, "improve_bands", lambda p, s, **kw: (s, {}))
    monkeypatch.setattr(solvers.lns, "improve_windows", lambda p, s, **kw: (s, {}))
    monkeypatch.setattr(solve, "COARSE_FIRST_TASKS", first)
    import yaml

    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from tests.paths import PROBLEMS

    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(stages=12, microbatches=8, memory_limit=12 * doc["pipeline"]["memory_forward"])
    solve_best(pipeline_from_spec(ProblemSpec.model_validate(doc)), time_limit=8)
    assert calls == order


def _small_interleaved_pipe() -> Pipeline:
    """The 1.5B interleaved row re-cut to p=3, m=6, two stages per rank, under 1F1B's memory."""
    import yaml

    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from tests.paths import PROBLEMS

    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(
        stages=6, stages_per_rank=2, microbatches=6, memory_limit=6 * doc["pipeline"]["memory_forward"]
    )
    return pipeline_from_spec(ProblemSpec.model_validate(doc))


def _small_interleaved_row():
    """The 1.5B interleaved row re-cut to p=3, m=6, two stages per rank (1F1B's memory): its split-backward
    task graph, torch's interleaved zero-bubble order timed on it, and our bound on the span."""
    from layersched.schedule.bounds import pipeline_bounds
    from layersched.schedule.solve import complete_orders, task_graph
    from layersched.schedule.templates import template_orders
    from solvers import time_orders

    pipe = _small_interleaved_pipe()
    tasks = task_graph(pipe, True, pipe.stage_to_rank())
    torch_order = time_orders(tasks.problem, complete_orders(tasks, template_orders("interleaved-zb", pipe)))
    return tasks, torch_order, max(pipeline_bounds(pipe, pipe.stage_to_rank(), "span").values())


def test_best_tries_the_mixed_chunk_order_before_torchs():
    """``interleaved-zb-alt`` (`Template.first_in_best`) is tried before the other fixed templates: where
    it ties torch's order, as on the small 1.5B row, the search starts from it (the first of equal
    hints)."""
    sol = solve_best(_small_interleaved_pipe(), time_limit=3, templates=["interleaved-zb", "interleaved-zb-alt"])
    tried = [name for name in sol.info["candidates"] if name.startswith("interleaved")]
    assert tried == ["interleaved-zb-alt", "interleaved-zb"]
    assert sol.info["candidates"]["interleaved-zb-alt"] == sol.info["candidates"]["interleaved-zb"] == 625_715


def test_the_tail_step_beats_torchs_interleaved_order_on_a_small_row():
    """The tail step (`solvers.lns.improve_tails` from `tail_cut`) re-solves every rank's passes from
    its last forward on: on the 1.5B interleaved row re-cut to p=3, m=6, two stages per rank, torch's
    order (625,715) gets shorter (621,199 when proven optimal for that window) in one improving step,
    the result is valid (memory included), and the passes before each rank's last forward keep their
    places."""
    from layersched.schedule.solve import tail_cut
    from solvers.lns import improve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    assert torch_order.span(problem) == 625_715
    cut = tail_cut(tasks, torch_order)
    forwards = [n for n in tasks.names if tasks.graph.nodes[n]["kind"] == "F"]
    for q in range(problem.num_processors):  # each rank's cut: the start of its last forward
        mine = [tasks.index[n] for n in forwards if torch_order.processor[tasks.index[n]] == q]
        assert cut[q] == max(torch_order.start[mine])
    got, info = improve_tails(problem, torch_order, cut, objective="span", time_limit=30, bound=bound, workers=1)
    validate(problem, got)
    assert 621_199 <= got.span(problem) < 625_715
    assert info == {"steps": 1, "improvements": 1, "windows": 1}
    before = torch_order.start < cut[torch_order.processor]
    for q, (mine, torchs) in enumerate(zip(got.orders(problem), torch_order.orders(problem), strict=True)):
        kept = int(before[torch_order.processor == q].sum())
        assert kept and list(mine[:kept]) == list(torchs[:kept])


def test_the_tail_step_widens_its_window_while_each_is_proven_and_then_beats_one_window():
    """`widening_tails` frees each rank's passes from its last forward, then its second-last, ...:
    the next window is tried only once CP-SAT proves the last one optimal. On the row of the test
    above, one window's proven optimum is 621,199 from torch's 625,715; the widening windows go
    below it (613,229 within 3 s on the 2-core VM; 604,954 in 60 s, against a bound of 603,113),
    valid and never below the bound. The first window's cut is `tail_cut`'s; given that cut alone,
    the step tries that one window."""
    from layersched.schedule.solve import tail_cut, widening_tails
    from solvers.lns import improve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    cuts = widening_tails(tasks)
    assert list(cuts(torch_order, 0)) == list(tail_cut(tasks, torch_order))
    assert list(cuts(torch_order, 2)) == list(tail_cut(tasks, torch_order, forwards=3))
    assert cuts(torch_order, 2 * 6) is None  # each rank has 12 forwards: a 13th-last cuts nothing
    assert cuts(torch_order, 2 * 6 - 1) is not None
    # 8 s: twice what 3 improvements in 5 windows took on the 2-core VM (613,229 in 4 s, one worker)
    got, info = improve_tails(problem, torch_order, cuts, objective="span", time_limit=8, bound=bound, workers=1)
    validate(problem, got)
    assert bound <= got.span(problem) < 621_199
    assert info["windows"] >= 2 and info["improvements"] >= 2
    # one window alone (a fixed cut): its proven optimum, above what the widening reached
    got, info = improve_tails(
        problem, torch_order, tail_cut(tasks, torch_order), objective="span", time_limit=20, bound=bound, workers=1
    )
    assert info["windows"] == 1 and got.span(problem) == 621_199


def test_skewed_tail_windows_cut_the_ranks_nearer_the_last_stage_deeper():
    """With ``skew``, `widening_tails` cuts the rank that holds the last stage ``skew`` forwards deeper
    than the rank farthest from it, the ranks between in proportion, each never past its first
    forward; without it, every rank at the same depth. On the row above (p=3, loop placement: the
    last stage on rank 2) the first window frees each rank from its 1st, 2nd and 3rd-last forward; in
    a V (the last stage back on rank 0) rank 0 is cut deepest. A skewed window's step is valid and
    never below the bound."""
    import yaml

    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.solve import complete_orders, tail_cut, task_graph, widening_tails
    from layersched.schedule.templates import template_orders
    from solvers import time_orders
    from solvers.lns import improve_tails
    from tests.paths import PROBLEMS

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    assert list(widening_tails(tasks, skew=0)(torch_order, 1)) == list(tail_cut(tasks, torch_order, 2))
    cuts = widening_tails(tasks, skew=2)
    assert list(cuts(torch_order, 0)) == list(tail_cut(tasks, torch_order, np.array([1, 2, 3])))
    assert list(cuts(torch_order, 4)) == list(tail_cut(tasks, torch_order, np.array([5, 6, 7])))
    # 12 forwards a rank: the last window frees every rank from its first forward, none goes past it
    assert list(cuts(torch_order, 11)) == list(tail_cut(tasks, torch_order, 12))
    assert cuts(torch_order, 12) is None
    frees = [int((torch_order.start >= cuts(torch_order, k)[torch_order.processor]).sum()) for k in range(3)]
    assert frees == sorted(frees) and frees[0] < frees[2]
    got, _ = improve_tails(problem, torch_order, cuts, objective="span", time_limit=3, bound=bound, workers=1)
    validate(problem, got)
    assert bound <= got.span(problem) <= torch_order.span(problem)

    doc = yaml.safe_load((PROBLEMS / "zb-v-6.2b.yaml").read_text())
    doc["pipeline"].update(stages=8, microbatches=8, memory_limit=8 * doc["pipeline"]["memory_forward"])
    pipe = pipeline_from_spec(ProblemSpec.model_validate(doc))
    v = task_graph(pipe, True, pipe.stage_to_rank())
    order = time_orders(v.problem, complete_orders(v, template_orders("zb-v", pipe)))
    assert list(widening_tails(v, skew=3)(order, 0)) == list(tail_cut(v, order, np.array([4, 3, 2, 1])))


@pytest.mark.parametrize(
    ("ranks", "placement", "skew"),
    [(16, "loop", "wide"), (9, "loop", "wide"), (8, "loop", "narrow"), (7, "loop", "narrow"), (6, "loop", None),
     (16, "v", None)],
)  # fmt: skip
def test_best_skews_its_tail_windows_from_seven_ranks_on_deeper_from_nine_and_not_in_a_v(ranks, placement, skew):
    """`TAIL_SKEW` applies from `TAIL_SKEW_RANKS` ranks on (fewer did worse), `TAIL_SKEW_WIDE` from
    `TAIL_SKEW_WIDE_RANKS` on (better there, worse below), and neither in a V, where the first and
    the last stage share a rank (it did a little worse there)."""
    import yaml

    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule import solve
    from tests.paths import PROBLEMS

    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(stages=2 * ranks, stages_per_rank=2, placement=placement)
    pipe = pipeline_from_spec(ProblemSpec.model_validate(doc))
    assert solve.TAIL_SKEW_RANKS == 7 and solve.TAIL_SKEW_WIDE_RANKS == 9
    assert 0 < solve.TAIL_SKEW < solve.TAIL_SKEW_WIDE
    want = {"wide": solve.TAIL_SKEW_WIDE, "narrow": solve.TAIL_SKEW, None: 0.0}[skew]
    assert solve._tail_skew(pipe, pipe.stage_to_rank()) == want


def test_a_tail_window_not_proven_within_window_limit_gives_way_to_the_next_while_it_improves(monkeypatch):
    """With ``window_limit``, `improve_tails` gives each window at most that many seconds. A window that
    had them all without a proof gives way to the next, wider one where it improved, and ends the step
    where it found nothing; a window that had less (the step's time was ending), or any window without
    ``window_limit``, ends the step where it is not proven. Here CP-SAT's proofs are hidden: each
    window is solved as usual (on this small row, to its optimum within a second or so) and reported
    not proven."""
    import solvers.lns
    from layersched.schedule.solve import tail_cut, widening_tails
    from solvers.lns import improve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    real, calls = solvers.lns.solve_tails, []

    def unproven(problem, schedule, cut, seconds, **kw):
        found, _ = real(problem, schedule, cut, seconds, **kw)
        calls.append((list(cut), seconds, found is not None and found.span(problem) < schedule.span(problem)))
        return found, False

    monkeypatch.setattr(solvers.lns, "solve_tails", unproven)
    got, info = improve_tails(
        problem, torch_order, widening_tails(tasks), objective="span", time_limit=300, bound=bound, workers=1,
        window_limit=30,
    )  # fmt: skip
    validate(problem, got)
    assert info["windows"] == len(calls) >= 2
    assert [improved for *_, improved in calls] == [True] * (len(calls) - 1) + [False]
    assert info["improvements"] == len(calls) - 1 and got.span(problem) < 621_199  # below the first window's optimum
    assert all(seconds <= 30 for _, seconds, _ in calls)
    assert calls[0][0] == list(tail_cut(tasks, torch_order))
    for limits in ({"time_limit": 300}, {"time_limit": 20, "window_limit": 30}):
        calls.clear()
        _, info = improve_tails(
            problem, torch_order, widening_tails(tasks), objective="span", bound=bound, workers=1, **limits
        )
        assert info["windows"] == 1 and len(calls) == 1 and calls[0][2]  # it improved, yet the step ended
        assert limits["time_limit"] - 1 < calls[0][1] <= limits["time_limit"]


def test_a_tail_window_that_found_nothing_jumps_to_a_much_wider_one_with_jump(monkeypatch):
    """With ``jump``, a window that had all of ``window_limit`` and found nothing gives way to a much
    wider one: after window ``k``, window ``2k + 2``, until the cuts give no more windows. Without it,
    such a window ends the step. Here the first window is solved as usual and improves (reported not
    proven), and every later one finds nothing."""
    import solvers.lns
    from layersched.schedule.solve import widening_tails
    from solvers.lns import improve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    real, asked, solved = solvers.lns.solve_tails, [], []

    def first_only(problem, schedule, cut, seconds, **kw):
        solved.append(list(cut))
        if len(solved) > 1:
            return None, False
        return real(problem, schedule, cut, seconds, **kw)[0], False

    widening = widening_tails(tasks)

    def cuts(schedule, k):
        asked.append(k)
        return widening(schedule, k)

    monkeypatch.setattr(solvers.lns, "solve_tails", first_only)
    for jump, windows, tried in ((True, [0, 1, 4, 10, 22], 4), (False, [0, 1], 2)):
        asked.clear()
        solved.clear()
        got, info = improve_tails(
            problem, torch_order, cuts, objective="span", time_limit=300, bound=bound, workers=1, window_limit=30,
            jump=jump,
        )  # fmt: skip
        validate(problem, got)
        assert got.span(problem) < torch_order.span(problem)  # the first window's improvement is kept
        # each rank has 12 forwards: window 22 would free from a 23rd-last, so there is none
        assert asked == windows and info["windows"] == len(solved) == tried
        assert solved[0] == list(widening_tails(tasks)(torch_order, 0))


def test_a_tail_window_proven_slowly_jumps_to_window_2k_plus_2_with_jump_proven(monkeypatch):
    """With ``jump_proven``, a window proven optimal after more than that share of its seconds is
    followed by window ``2k + 2`` (0 by 2, 2 by 6), not by the next one; one proven sooner, or any
    without ``jump_proven``, by the next, until the cuts give no more. Here the first window is solved
    as usual (in about a second of its 30), and every window is reported proven at once."""
    import solvers.lns
    from layersched.schedule.solve import widening_tails
    from solvers.lns import improve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    real, asked, solved = solvers.lns.solve_tails, [], []

    def proven(problem, schedule, cut, seconds, **kw):
        solved.append(list(cut))
        return (real(problem, schedule, cut, seconds, **kw)[0] if len(solved) == 1 else schedule), True

    widening = widening_tails(tasks)

    def cuts(schedule, k):
        asked.append(k)
        return widening(schedule, k)

    monkeypatch.setattr(solvers.lns, "solve_tails", proven)
    for jump_proven, windows in ((0.0, [0, 2, 6, 14]), (None, list(range(13))), (0.5, list(range(13)))):
        asked.clear()
        solved.clear()
        got, info = improve_tails(
            problem, torch_order, cuts, objective="span", time_limit=300, bound=bound, workers=1, window_limit=30,
            jump=True, jump_proven=jump_proven,
        )  # fmt: skip
        validate(problem, got)
        assert got.span(problem) < torch_order.span(problem)  # the first window's improvement is kept
        # each rank has 12 forwards: windows 12 and 14 would free from a 13th- and 15th-last, so there are none
        assert asked == windows and info["windows"] == len(solved) == len(windows) - 1


def test_the_fixed_search_alone_solves_a_tail_window_validly_and_its_proof_is_the_windows_optimum():
    """`solve_tails(fixed_search=True)`: CP-SAT's fixed search on one worker. On the small row's first
    window (torch's order 625,715; the window's proven optimum 621,199, as the usual search finds) its
    schedule is valid, keeps every pass before the cuts in place, is no worse than the hint and never
    below the bound; where it says proven, it is that optimum."""
    from layersched.schedule.solve import tail_cut
    from solvers.cpsat import solve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    cut = tail_cut(tasks, torch_order)
    usual, usual_proven = solve_tails(problem, torch_order, cut, 20, objective="span", bound=bound, workers=1)
    assert usual_proven and usual.span(problem) == 621_199
    seen: dict = {}
    got, proven = solve_tails(
        problem, torch_order, cut, 5, objective="span", bound=bound, stats=seen, fixed_search=True
    )
    assert got is not None
    validate(problem, got)
    assert bound <= seen["bound"] <= got.span(problem) <= torch_order.span(problem)
    kept = torch_order.start < cut[torch_order.processor]
    assert (got.start[kept] == torch_order.start[kept]).all() and (got.processor == torch_order.processor).all()
    assert not proven or got.span(problem) == 621_199


def test_with_fixed_first_a_tail_window_tries_the_fixed_search_first_and_stops_where_it_meets_the_bound(monkeypatch):
    """With ``fixed_first``, `improve_tails` gives each window to the fixed search first, for at most
    ``fixed_first`` seconds and half the window's. A schedule there that meets the window's own bound
    is proven: no second search, and the widening goes on. One that does not is the hint of the usual
    search (2 workers), which gets the rest of the window's seconds. Here the fixed search is played
    by the usual one: at once proven optimal (621,199) but reported unproven, with the window's bound
    given as 621,199 or one less."""
    import solvers.lns
    from layersched.schedule.solve import tail_cut
    from solvers.lns import improve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    real = solvers.lns.solve_tails
    optimum, _ = real(problem, torch_order, tail_cut(tasks, torch_order), 20, objective="span", bound=bound, workers=1)
    assert optimum.span(problem) == 621_199
    calls = []

    def fake(problem, schedule, cut, seconds, *, stats=None, fixed_search=False, **kw):
        calls.append((fixed_search, seconds, kw["workers"], schedule.span(problem)))
        if fixed_search:
            stats.update(bound=621_199 - slack, free=0)
            return optimum, False
        return real(problem, schedule, cut, seconds, stats=stats, **kw)

    def run(time_limit):
        calls.clear()
        got, info = improve_tails(
            problem, torch_order, tail_cut(tasks, torch_order), objective="span", time_limit=time_limit, bound=bound,
            workers=2, fixed_first=1.0,
        )  # fmt: skip
        validate(problem, got)
        assert got.span(problem) == 621_199 and info["windows"] == 1

    monkeypatch.setattr(solvers.lns, "solve_tails", fake)
    slack = 0
    run(6)
    assert calls == [(True, 1.0, 1, 625_715)]  # met the bound: proven, nothing more asked
    slack = 1
    run(1.5)
    (first, half, one, hinted), (second, rest, two, from_fixed) = calls  # then the usual search from its schedule
    assert (first, one, hinted) == (True, 1, 625_715) and 0.7 < half <= 0.75  # half of what was left of 1.5 s
    assert (second, two, from_fixed) == (False, 2, 621_199) and 0 < rest <= 1.5


def test_solve_tails_without_its_hint_gives_cpsat_no_hint_and_still_solves_the_window_validly(monkeypatch):
    """`solve_tails(hint=False)`: the model CP-SAT solves carries no hint (with it, one value per free
    pass), and on the small row's first window the search still finds a valid schedule that keeps every
    pass before the cuts in place, never below the bound; proven, it is the window's optimum (621,199,
    as the hinted search proves)."""
    from ortools.sat.python import cp_model

    from layersched.schedule.solve import tail_cut
    from solvers.cpsat import solve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    cut = tail_cut(tasks, torch_order)
    free = int((torch_order.start >= cut[torch_order.processor]).sum())
    hints, real = [], cp_model.CpSolver.solve

    def solve(self, model, *args, **kw):
        status = real(self, model, *args, **kw)
        # counted after the solve: reading ``model.proto`` before it changes CP-SAT's search (seen here:
        # the unhinted search then ended at 652,076 in 20 s, where it proves 621,199 in 4 s)
        hints.append(len(model.proto.solution_hint.vars))
        return status

    monkeypatch.setattr(cp_model.CpSolver, "solve", solve)
    hinted, _ = solve_tails(problem, torch_order, cut, 20, objective="span", bound=bound, workers=1)
    got, proven = solve_tails(problem, torch_order, cut, 20, objective="span", bound=bound, workers=1, hint=False)
    assert hints == [free, 0] and free > 0
    assert got is not None
    validate(problem, got)
    kept = torch_order.start < cut[torch_order.processor]
    assert (got.start[kept] == torch_order.start[kept]).all() and (got.processor == torch_order.processor).all()
    assert bound <= got.span(problem) and hinted.span(problem) == 621_199
    assert not proven or got.span(problem) == 621_199


def test_with_unhinted_a_wide_tail_window_searches_half_its_seconds_without_the_hint_then_with_it(monkeypatch):
    """With ``unhinted``, a tail window that frees at least that many passes gives the first half of its
    usual search to `solve_tails` without the hint (``hint=False``), and the rest to the hinted search,
    from the shorter of that search's schedule and the hint; a narrower window, or any window without
    ``unhinted``, has the hinted search alone. Here every search is solved as usual (for at most
    0.4 s), the unhinted ones reported unproven and the hinted ones proven, so the step widens one
    forward at a time through all twelve windows."""
    import solvers.lns
    from layersched.schedule.solve import widening_tails
    from solvers.lns import improve_tails

    tasks, torch_order, bound = _small_interleaved_row()
    problem = tasks.problem
    real, calls = solvers.lns.solve_tails, []

    def searched(problem, schedule, cut, seconds, *, hint=True, **kw):
        calls.append((int((schedule.start >= cut[schedule.processor]).sum()), hint, seconds, schedule.span(problem)))
        return real(problem, schedule, cut, min(seconds, 0.4), hint=hint, **kw)[0], hint

    monkeypatch.setattr(solvers.lns, "solve_tails", searched)
    for unhinted in (None, 60):
        calls.clear()
        got, info = improve_tails(
            problem, torch_order, widening_tails(tasks), objective="span", time_limit=240, bound=bound, workers=1,
            window_limit=20, unhinted=unhinted,
        )  # fmt: skip
        validate(problem, got)
        assert got.span(problem) <= torch_order.span(problem) and info["windows"] == 12
        wide = [free for free, hint, *_ in calls if not hint]
        frees = [free for free, hint, *_ in calls if hint]  # one hinted search per window, each wider
        assert len(frees) == 12 and frees == sorted(set(frees))
        assert wide == [free for free in frees if unhinted is not None and free >= unhinted]
        for (free, hint, half, span), after in zip(calls, calls[1:], strict=False):
            if not hint:  # the hinted rest of the same window follows, from a schedule no longer than its start
                assert after[:2] == (free, True) and after[3] <= span
                assert 9.5 < half <= 10 <= after[2] < 20  # half the window's 20 s, then what is left of them
        assert unhinted is None or 0 < len(wide) < 12  # both kinds of window were met


def test_the_first_tail_window_is_the_widest_of_three_within_first_tasks():
    """`widening_tails(tasks, first_tasks)`: the first window frees each rank's passes from its last,
    second-last or third-last forward, the widest that frees at most ``first_tasks`` passes (the last
    where none does), chosen at the first call; the windows widen one forward at a time from there,
    up to the fewest forwards a rank has."""
    from layersched.schedule.solve import tail_cut, widening_tails

    tasks, torch_order, _ = _small_interleaved_row()

    def frees(forwards: int) -> int:
        cut = tail_cut(tasks, torch_order, forwards)
        return int((torch_order.start >= cut[torch_order.processor]).sum())

    sizes = [frees(f) for f in (1, 2, 3)]
    assert sizes[0] < sizes[1] < sizes[2]
    choices = [(0, 0), (sizes[1] - 1, 0), (sizes[1], 1), (sizes[2] - 1, 1), (sizes[2], 2), (10**9, 2)]
    for first_tasks, skipped in choices:
        cuts = widening_tails(tasks, first_tasks)
        for k in (0, 1, 3):
            assert list(cuts(torch_order, k)) == list(tail_cut(tasks, torch_order, forwards=skipped + k + 1)), (
                first_tasks,
                k,
            )
        assert cuts(torch_order, 12 - skipped) is None  # each rank has 12 forwards
        assert cuts(torch_order, 11 - skipped) is not None


def test_best_starts_its_tail_step_at_the_wider_window_on_a_small_row(monkeypatch):
    """`best` gives the tail step `widening_tails` with `TAIL_FIRST_TASKS`: on the small row (every
    window of which frees fewer passes) its first window is each rank's passes from the third-last
    forward on. Each window has at most `TAIL_WINDOW_SHARE` of the step, and never more than
    `TAIL_WINDOW_LIMIT` seconds; one that found nothing jumps as `TAIL_JUMP` says, and one proven
    optimal as `TAIL_JUMP_PROVEN` says. The row has 3 ranks, fewer than `TAIL_SKEW_RANKS`, so the
    window is even; from that many ranks on it is skewed by `TAIL_SKEW` (the last stage's rank, here
    rank 2, 2 forwards deeper than rank 0)."""
    import yaml

    import solvers.lns
    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule import solve
    from tests.paths import PROBLEMS

    seen = []

    def tails(problem, schedule, cuts, **kw):
        seen.append((cuts(schedule, 0), schedule))
        assert kw["window_limit"] == min(solve.TAIL_WINDOW_LIMIT, solve.TAIL_WINDOW_SHARE * kw["time_limit"])
        assert kw["window_limit"] < kw["time_limit"]
        assert kw["jump"] is solve.TAIL_JUMP and kw["jump_proven"] is solve.TAIL_JUMP_PROVEN
        assert kw["unhinted"] == solve.TAIL_UNHINTED_TASKS
        return schedule, {}

    monkeypatch.setattr(solvers.lns, "improve_tails", tails)
    # on a graph this small the coarse levels run first (`COARSE_FIRST_TASKS`) and may reach the bound,
    # leaving the tail step nothing to do: stubbed, so the tail step starts from CP-SAT's schedule
    monkeypatch.setattr(solvers.lns, "improve_coarse", lambda p, s, **kw: (s, {"levels": {}}))
    # and the steps after the tail step, so that the call ends once it has
    monkeypatch.setattr(solvers.lns, "improve_bands", lambda p, s, **kw: (s, {}))
    monkeypatch.setattr(solvers.lns, "improve_windows", lambda p, s, **kw: (s, {}))
    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(
        stages=6, stages_per_rank=2, microbatches=6, memory_limit=6 * doc["pipeline"]["memory_forward"]
    )
    pipe = pipeline_from_spec(ProblemSpec.model_validate(doc))
    solve_best(pipe, time_limit=8)
    tasks = solve.task_graph(pipe, True, pipe.stage_to_rank())
    assert tasks.problem.num_tasks <= solve.TAIL_FIRST_TASKS  # so the widest of the three fits
    assert seen
    cut, schedule = seen[0]
    assert list(cut) == list(solve.tail_cut(tasks, schedule, forwards=3))
    assert pipe.num_ranks < solve.TAIL_SKEW_RANKS and solve.TAIL_SKEW == 2
    seen.clear()
    monkeypatch.setattr(solve, "TAIL_SKEW_RANKS", pipe.num_ranks)
    solve_best(pipe, time_limit=8)
    cut, schedule = seen[0]
    assert list(cut) == list(solve.tail_cut(tasks, schedule, forwards=np.array([3, 4, 5])))


def test_best_runs_the_tail_step_and_lists_it(monkeypatch):
    """`best` runs the tail step after CP-SAT, where the time allows, and lists what it reached (the
    steps after it are stubbed, so the call ends once the tail step has)."""
    import yaml

    import solvers.lns
    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from tests.paths import PROBLEMS

    monkeypatch.setattr(solvers.lns, "improve_coarse", lambda p, s, **kw: (s, {"levels": {}}))
    monkeypatch.setattr(solvers.lns, "improve_bands", lambda p, s, **kw: (s, {}))
    monkeypatch.setattr(solvers.lns, "improve_windows", lambda p, s, **kw: (s, {}))
    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(
        stages=6, stages_per_rank=2, microbatches=6, memory_limit=6 * doc["pipeline"]["memory_forward"]
    )
    sol = solve_best(pipeline_from_spec(ProblemSpec.model_validate(doc)), time_limit=15)
    listed = sol.info["candidates"]
    assert listed["tail (split)"] < listed["interleaved-zb"] == 625_715
    assert sol.metrics["value"] <= listed["tail (split)"]


@pytest.mark.parametrize(
    "spec",
    [
        # two stages on each of two ranks, no weight gradients (W = 0), under a memory limit
        dict(stages=4, stages_per_rank=2, placement=[0, 0, 1, 1], microbatches=4, forward=13, backward_input=7,
             backward_weight=0, transfer=7, memory_forward=8, memory_freed_by_weight=5, memory_limit=42,
             objective="makespan"),
        # three stages per rank in loop placement, every W zero-length
        dict(stages=9, stages_per_rank=3, placement="loop", microbatches=4, forward=[3, 14, 10, 11, 4, 19, 17, 5, 4],
             backward_input=[20, 1, 5, 17, 3, 2, 12, 9, 18], backward_weight=0, transfer=6, memory_forward=1,
             memory_freed_by_weight=1, memory_limit=11),
        # every pass zero-length, only the transfers take time (1F1B's memory for three stages per rank)
        dict(stages=12, stages_per_rank=3, placement="loop", microbatches=8, forward=0, backward_input=0,
             backward_weight=0, transfer=1803, memory_forward=201216, memory_freed_by_weight=73728,
             memory_limit=2414592, objective="span"),
    ],
)  # fmt: skip
def test_best_takes_templates_with_zero_length_weight_passes_under_a_memory_limit(spec):
    """A stage without weights has ``W = 0``: a zero-length pass that frees its memory the moment a
    forward may start. The templates' schedules validate; read back as orders and timed again for the
    search they must still validate (they once put the forward first and broke the limit, and `best`
    stopped with "polish: the schedule to start from is not valid")."""
    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec

    pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "w0", "pipeline": spec}))
    sol, listed = check_best(pipe)
    assert max(sol.metrics["peak_memory"]) <= pipe.capacity
    assert any(name.startswith("polish") for name in sol.info["candidates"]), sol.info["candidates"]


def test_best_gives_its_seed_to_polish_and_to_every_cpsat_step(monkeypatch):
    """``seed`` reaches polish, the whole-model CP-SAT call (as CP-SAT's random seed less one) and the
    tail, coarse, band and window steps (stubbed here, and given room by a short `BAND_STEP`); without
    one they all get 0, which leaves CP-SAT's own default."""
    import yaml

    import solvers.cpsat
    import solvers.lns
    import solvers.polish
    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule import solve
    from tests.paths import PROBLEMS

    seen: list[tuple[str, int]] = []

    class Spy(solvers.cpsat.cp_model.CpSolver):
        def solve(self, model, *args):
            seen.append(("cpsat", self.parameters.random_seed - 1))
            return super().solve(model, *args)

    real_polish = solvers.polish.polish

    def polish(problem, start, **kw):
        seen.append(("polish", kw["seed"]))
        return real_polish(problem, start, **{**kw, "time_limit": 0.2})

    def step(name):
        def stub(problem, schedule, *args, **kw):
            seen.append((name, kw["seed"]))
            return schedule, {"levels": {}}

        return stub

    monkeypatch.setattr(solvers.cpsat.cp_model, "CpSolver", Spy)
    monkeypatch.setattr(solvers.polish, "polish", polish)
    for name in ("tails", "coarse", "bands", "windows"):
        monkeypatch.setattr(solvers.lns, f"improve_{name}", step(name))
    monkeypatch.setattr(solve, "BAND_STEP", 0.05)
    # the 1.5B interleaved row re-cut to p=4, m=8: no template reaches the bound, so every step runs
    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(stages=12, microbatches=8, memory_limit=12 * doc["pipeline"]["memory_forward"])
    pipe = pipeline_from_spec(ProblemSpec.model_validate(doc))
    for seed in (0, 3):
        seen.clear()
        solve_best(pipe, time_limit=4, seed=seed)
        assert {name for name, _ in seen} == {"polish", "cpsat", "tails", "coarse", "bands", "windows"}
        assert {s for _, s in seen} == {seed}, seen
