"""benchmarks/rank_relaxation.py: its relaxation keeps every schedule of the row, with the same spans."""

import dataclasses

import numpy as np
import pytest

from layersched.describe.config import load_problem
from layersched.describe.stages import pipeline_from_spec
from layersched.schedule.solve import complete_orders, task_graph
from layersched.schedule.templates import template_orders
from solvers import Problem, Schedule
from solvers.simulate import time_orders
from solvers.validate import violations
from tests.paths import ROOT, benchmark


@pytest.fixture(scope="module")
def bench():
    with benchmark("rank_relaxation") as module:
        yield module


@pytest.mark.parametrize("keep", [[0], [3], [0, 3], [1, 2, 3]])
def test_every_schedule_of_the_row_is_one_of_the_relaxation(bench, tmp_path, keep):
    pipe = pipeline_from_spec(load_problem(bench.recut(tmp_path, "zb-interleaved-1.5b", 4, 8)))
    tasks = task_graph(pipe, True, pipe.stage_to_rank())
    problem = tasks.problem
    torch = time_orders(problem, complete_orders(tasks, template_orders("interleaved-zb", pipe)))
    relaxed, proc = bench.relaxation(problem, keep)
    moved = Schedule(processor=proc, start=torch.start)
    assert not violations(relaxed, moved, limit=1)
    assert moved.spans(relaxed)[: len(keep)].max() == max(int(torch.spans(problem)[q]) for q in keep)
    # the kept ranks keep their memory limits; the others have none
    assert relaxed.capacity[: len(keep)].tolist() == problem.capacity[keep].tolist()
    assert (relaxed.mem_delta[proc >= len(keep)] == 0).all()


def test_a_delay_inside_a_rank_stays_unpaid(bench):
    # tasks 0 and 1 share processor 0 (their edge's delay is not paid); task 2 is on processor 1
    problem = Problem(duration=[2, 3, 1], allowed=[[1, 0], [1, 0], [0, 1]], edges=[[0, 1], [1, 2]], delay=[5, 4])
    relaxed, proc = bench.relaxation(problem, [1])
    assert proc.tolist() == [1, 2, 0]
    timed = time_orders(relaxed, [[2], [0], [1]])
    assert timed.start.tolist() == [0, 2, 9]  # 0 -> 1 unpaid, 1 -> 2 paid
    with pytest.raises(ValueError, match="bound to one processor"):
        bench.relaxation(Problem(duration=[1, 1], num_processors=2), [0])
    for keep in ([1, 1], [2], [-1]):
        with pytest.raises(ValueError, match="distinct processors"):
            bench.relaxation(problem, keep)
    assert np.array_equal(relaxed.duration, problem.duration)


def test_the_more_rows_are_the_bundled_rows_re_cut_as_named(bench, tmp_path):
    """multichunk.py's ``--rows more``: each row loads, and differs from its bundled row only in what its
    name says (ranks, micro-batches, stages per rank, transfer), under 1F1B's memory."""
    import multichunk  # beside rank_relaxation, on the path while ``bench`` lives

    paths = multichunk.more_rows(tmp_path)
    base = {
        name: pipeline_from_spec(load_problem(ROOT / "problems" / f"{name}.yaml"))
        for name in ("zb-interleaved-1.5b", "zb-v-6.2b")
    }
    assert len({p.stem for p in paths}) == len(paths) == 6
    for path in paths:
        pipe = pipeline_from_spec(load_problem(path))
        name = path.stem
        row = base["zb-v-6.2b" if name.startswith("zb-v-6.2b") else "zb-interleaved-1.5b"]
        v = 2 if "-v2" in name else row.stages_per_rank
        assert name.split("-p")[1].startswith(f"{pipe.num_ranks}-m{pipe.num_microbatches}")
        assert pipe.stages_per_rank == v and pipe.placement == row.placement
        assert (pipe.forward == row.forward[0]).all() and (pipe.backward_input == row.backward_input[0]).all()
        transfer = 4025 if name.endswith("-c4025") else row.transfer[0]
        assert (pipe.transfer == transfer).all()
        assert pipe.capacity == v * pipe.num_ranks * row.mem_forward[0]


def test_the_unseen_rows_load_and_the_uneven_one_differs_only_at_its_ends(bench, tmp_path):
    """multichunk.py's ``--rows unseen``: every row loads under a name of its own, and `uneven_row`
    is its even re-cut with only the first and the last stage's F, I and W scaled by ``UNEVEN``."""
    import multichunk

    paths = multichunk.unseen_rows(tmp_path)
    assert len({p.stem for p in paths}) == len(paths) == 9
    pipes = {p.stem: pipeline_from_spec(load_problem(p)) for p in paths}
    uneven = pipes["zb-interleaved-1.5b-p4-m16-v2-uneven"]
    even = pipes["zb-interleaved-1.5b-p4-m16-v2"]
    assert uneven.num_ranks == 4 and uneven.num_microbatches == 16 and uneven.stages_per_rank == 2
    _assert_scaled_at_the_ends(multichunk.UNEVEN, uneven, even)


def test_with_order_keeps_exactly_the_schedules_that_run_the_order(bench):
    problem = Problem(duration=[2, 3, 1], num_processors=2, edges=[[0, 2]], delay=[4])
    held = bench.with_order(problem, [1, 0])  # task 1, then task 0, on one processor
    assert not violations(held, time_orders(held, [[1, 0, 2], []]), limit=1)
    assert violations(held, time_orders(problem, [[0, 1], [2]]), limit=1)  # 0 before 1 breaks the chain
    assert not violations(problem, time_orders(problem, [[0, 1], [2]]), limit=1)
    assert held.delay.tolist() == [4, 0]
    with pytest.raises(ValueError, match="distinct tasks"):
        bench.with_order(problem, [1, 1])
    with pytest.raises(ValueError, match="distinct tasks"):
        bench.with_order(problem, [3])


def test_complete_holds_rank_0_to_its_order_and_never_loses(bench, tmp_path):
    pipe = pipeline_from_spec(load_problem(bench.recut(tmp_path, "zb-interleaved-1.5b", 4, 8)))
    tasks = task_graph(pipe, True, pipe.stage_to_rank())
    problem = tasks.problem
    order = template_orders("interleaved-zb", pipe)[0]
    start, found = bench.complete(tasks, order, time_limit=2.0, bound=0)
    for schedule in (start, found):
        assert not violations(problem, schedule, limit=1)
        assert schedule.orders(problem)[0] == [tasks.index[a] for a in order]
    assert found.objective(problem, "span") <= start.objective(problem, "span")


def test_with_order_frees_a_window_between_the_passes_before_and_after_it(bench):
    """``free=(1, 3)`` of the order 0, 1, 2, 3: tasks 1 and 2 in either order, after 0 and before 3."""
    problem = Problem(duration=[1, 1, 1, 1], num_processors=1)
    held = bench.with_order(problem, [0, 1, 2, 3], free=(1, 3))
    for order in ([0, 1, 2, 3], [0, 2, 1, 3]):
        assert not violations(held, time_orders(problem, [order]), limit=1), order
    for order in ([1, 0, 2, 3], [0, 1, 3, 2], [3, 0, 1, 2]):
        assert violations(held, time_orders(problem, [order]), limit=1), order
    empty = bench.with_order(problem, [0, 1, 2, 3], free=(2, 2))  # nothing free: the whole chain
    assert violations(empty, time_orders(problem, [[0, 2, 1, 3]]), limit=1)
    for free in ((2, 1), (0, 5), (-1, 2)):
        with pytest.raises(ValueError, match="free"):
            bench.with_order(problem, [0, 1, 2, 3], free=free)


def test_held_steps_keep_rank_0_outside_the_window_and_never_lose(bench, tmp_path):
    pipe = pipeline_from_spec(load_problem(bench.recut(tmp_path, "zb-interleaved-1.5b", 4, 8)))
    tasks = task_graph(pipe, True, pipe.stage_to_rank())
    problem = tasks.problem
    torch = time_orders(problem, complete_orders(tasks, template_orders("interleaved-zb", pipe)))
    before = bench.rank_order(tasks, torch)
    lines = []
    found = bench.held_steps(tasks, torch, 0, window=10, stride=100, first=40, rounds=1, step=2.0, log=lines.append)
    assert not violations(problem, found, limit=1)
    assert found.objective(problem, "span") <= torch.objective(problem, "span")
    after = bench.rank_order(tasks, found)
    assert after[:40] == before[:40] and after[50:] == before[50:]
    assert sorted(after[40:50]) == sorted(before[40:50])
    assert len(lines) == 1 and lines[0].startswith("sweep 1, passes 40-49: ")


def test_tail_windows_widen_from_the_start_and_each_bound_holds(bench, tmp_path):
    """``--tails``: window ``k`` starts where window ``k-1`` ended, never loses, frees more passes than
    the one before, and its own bound lies between the row's and what it found (equal where proven)."""
    pipe, tasks, bound = bench._row(str(tmp_path), 4)  # the p=4, m=8 row and its proven bound
    problem = tasks.problem
    torch = time_orders(problem, complete_orders(tasks, template_orders("interleaved-zb", pipe)))
    heard = []
    rows = bench.tail_windows(tasks, torch, bound, time_limit=1.0, windows=3, log=heard.append)
    assert heard == rows and [r["k"] for r in rows] == [0, 1, 2]
    assert rows[0]["start"] == torch.objective(problem, "span")
    for before, after in zip(rows, rows[1:], strict=False):
        assert after["start"] == before["found"] and after["free"] > before["free"]
    for r in rows:
        assert bound <= r["bound"] <= r["found"] <= r["start"]
        assert not r["proven"] or r["bound"] == r["found"]


def test_the_uneven_rows_differ_from_their_even_recuts_only_at_their_ends(bench, tmp_path):
    """multichunk.py's ``--rows uneven``: five rows under names of their own, each its even re-cut
    (same ranks, micro-batches, stages per rank, limit and links) with only the first and the last
    stage's F, I and W scaled by ``UNEVEN``."""
    import multichunk

    paths = multichunk.uneven_rows(tmp_path)
    assert len({p.stem for p in paths}) == len(paths) == 5 and all(p.stem.endswith("-uneven") for p in paths)
    (tmp_path / "even").mkdir()
    for path in paths:
        uneven = pipeline_from_spec(load_problem(path))
        held = int(uneven.capacity // uneven.mem_forward[0])  # stage activations per rank
        p, m, v = uneven.num_ranks, uneven.num_microbatches, uneven.stages_per_rank
        even = multichunk.recut(tmp_path / "even", "zb-interleaved-1.5b", p, m, held, stages_per_rank=v)
        _assert_scaled_at_the_ends(multichunk.UNEVEN, uneven, pipeline_from_spec(load_problem(even)))


def _assert_scaled_at_the_ends(factors_of: dict, uneven, even) -> None:
    """``uneven`` is ``even`` with the F, I and W times of the stages ``factors_of`` names scaled by
    their factors, and nothing else changed."""
    assert uneven.capacity == even.capacity and (uneven.transfer == even.transfer).all()
    for k, times in enumerate(("forward", "backward_input", "backward_weight")):
        got, base = getattr(uneven, times), getattr(even, times)
        expected = base.copy()
        for stage, factors in factors_of.items():
            expected[stage] = int(base[stage] * factors[k])
        assert got.tolist() == expected.tolist(), times
        assert (got[1:-1] == base[1:-1]).all()
    assert uneven.forward[0] > even.forward[0] and uneven.backward_input[-1] > even.backward_input[-1]


def test_best_template_is_the_least_span_of_the_templates_that_fit(bench, tmp_path):
    """On a row no torch order fits (m=9 is no multiple of 4, and 9 activations are 3/4 of 1F1B's), it
    returns a valid schedule at most every other template's that is valid there."""
    pipe = pipeline_from_spec(load_problem(bench.recut(tmp_path, "zb-interleaved-1.5b", 4, 9, 9)))
    tasks = task_graph(pipe, True, pipe.stage_to_rank())
    problem = tasks.problem
    name, found = bench.best_template(pipe, tasks)
    assert not violations(problem, found, limit=1)
    spans = {}
    for other in bench.template_names():
        try:
            timed = time_orders(problem, complete_orders(tasks, template_orders(other, pipe)))
        except (ValueError, KeyError):
            continue
        if not violations(problem, timed, limit=1):
            spans[other] = int(timed.objective(problem, "span"))
    assert "interleaved-zb" not in spans and len(spans) >= 2  # the row is one where the choice matters
    assert spans[name] == found.objective(problem, "span") == min(spans.values())
    tight = dataclasses.replace(pipe, capacity=int(pipe.mem_forward[0]))  # one activation: nothing fits
    with pytest.raises(ValueError, match="no template fits"):
        bench.best_template(tight, task_graph(tight, True, tight.stage_to_rank()))


def test_a_row_file_that_is_missing_or_bad_is_one_line(bench, tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: {stages: 0}\n")
    for path, says in ((tmp_path / "none.yaml", "no such file"), (bad, "bad.yaml")):
        monkeypatch.setattr("sys.argv", ["rank_relaxation.py", "--row", str(path)])
        with pytest.raises(SystemExit, match=says) as e:
            bench.main()
        assert "\n" not in str(e.value)
