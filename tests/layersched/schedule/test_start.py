"""`best` from a start: an earlier run's orders join the candidates and seed the search, so the result
is never slower than them; a start that does not fit the problem is refused, naming what (`best`
itself leaves it out and says why)."""

import json
from dataclasses import replace

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersched.cli.main import main
from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import load_schedule
from layersched.schedule.solve import Start, solve_best, solve_orders, start_of, start_solution
from layersched.schedule.templates import template_orders
from solvers import InvalidSchedule, validate
from tests.layersched.schedule.test_solve_best import pipeline
from tests.paths import DATA, PROBLEMS

pytest.importorskip("ortools")


def interleaved(ranks: int, microbatches: int, **changes):
    """The 1.5B interleaved row (three stages per rank, 1F1B's memory) re-cut to ``ranks``."""
    doc = yaml.safe_load((PROBLEMS / "zb-interleaved-1.5b.yaml").read_text())
    doc["pipeline"].update(
        stages=3 * ranks, microbatches=microbatches, memory_limit=3 * ranks * doc["pipeline"]["memory_forward"]
    )
    doc["pipeline"].update(changes)
    return pipeline_from_spec(ProblemSpec.model_validate(doc))


def near_bound_p6():
    """Orders that `best` found in 1,200 s for the row at p=6, m=12 (0.02% above the bound)."""
    return json.loads((DATA / "zb-interleaved-1.5b-p6-m12-near-bound.json").read_text())["actions"]


def test_best_from_a_start_returns_it_or_better_and_lists_it():
    """3 s of `best` from torch's order end far above the near-bound orders; from them, `best` keeps
    them (or finds better), lists them as its candidate ``start``, and its result is valid."""
    pipe = interleaved(6, 12)
    start = Start(near_bound_p6(), True, pipe.stage_to_rank())
    given_value = start_solution(pipe, start, "span").metrics["value"]
    assert given_value == 1784421
    alone = solve_best(pipe, time_limit=3)
    assert alone.metrics["value"] > given_value  # so the start is what the next figure comes from
    sol = solve_best(pipe, time_limit=3, start=start)
    validate(sol.tasks.problem, sol.schedule)
    assert sol.info["candidates"]["start"] == given_value
    assert sol.metrics["lower_bound"] <= sol.metrics["value"] <= given_value


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stages=st.integers(2, 3),
    m=st.integers(2, 4),
    costs=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(0, 9)), min_size=3, max_size=3),
    name=st.sampled_from(["gpipe", "1f1b", "1f1b-split", "zb-h1"]),
)
def test_best_is_never_slower_than_its_start(stages, m, costs, name):
    """On random stage costs, from a template's orders (fused or split backward): the start is listed
    at its own timing, and `best` returns at most that, and at most every other candidate."""
    F, I, W = (list(c) for c in zip(*costs[:stages], strict=True))
    pipe = pipeline(F, I, W, None, {}, m=m)
    split = name in ("1f1b-split", "zb-h1")
    start = Start(template_orders(name, pipe), split, pipe.stage_to_rank())
    timed = solve_orders(pipe, start.actions, split_backward=split, stage_to_rank=start.stage_to_rank, method="t")
    sol = solve_best(pipe, time_limit=1, start=start)
    validate(sol.tasks.problem, sol.schedule)
    listed = {k: v for k, v in sol.info["candidates"].items() if isinstance(v, int)}
    assert listed["start"] == timed.metrics["value"]
    assert sol.metrics["value"] <= min(listed.values())


def test_a_start_keeps_its_own_times_where_its_orders_at_their_earliest_are_slower():
    """Under ``span`` a rank that starts later can idle less. In this schedule (CP-SAT's optimum, 33, of
    three stages) rank 1 starts at 10, not at 6 when its first input arrives; the same orders timed at
    their earliest starts take 37. A start keeps its own times where they are a valid schedule here, so
    `best` from a file is never slower than that file."""
    pipe = pipeline([5, 3, 3], [1, 1, 1], [1, 7, 5], None, {}, m=3)
    actions = [
        ["0F0", "0F1", "0F2", "0I0", "0W0", "0I1", "0W1", "0I2", "0W2"],
        ["1F0", "1F1", "1F2", "1I0", "1W0", "1I1", "1I2", "1W1", "1W2"],
        ["2F0", "2I0", "2F1", "2F2", "2I1", "2I2", "2W0", "2W1", "2W2"],
    ]
    starts = [
        [0, 5, 10, 21, 22, 29, 30, 31, 32],
        [10, 13, 16, 19, 20, 27, 28, 29, 36],
        [14, 17, 18, 21, 24, 25, 26, 31, 36],
    ]
    times = {
        a: (r, t)
        for r, (acts, ts) in enumerate(zip(actions, starts, strict=True))
        for a, t in zip(acts, ts, strict=True)
    }
    orders_only = Start(actions, True, [0, 1, 2])
    assert start_solution(pipe, orders_only, "span").metrics["value"] == 37
    timed = start_solution(pipe, replace(orders_only, times=times), "span")
    assert timed.metrics["value"] == 33 and timed.actions() == actions
    sol = solve_best(pipe, time_limit=2, start=replace(orders_only, times=times))
    assert sol.info["candidates"]["start"] == 33 and sol.metrics["value"] <= 33
    # times that do not hold here (a pass moved onto another's time) are left out: the orders' own timing
    assert start_solution(pipe, replace(orders_only, times=times | {"2W2": (2, 0)}), "span").metrics["value"] == 37
    assert start_solution(pipe, start_of(timed), "span").metrics["value"] == 33  # a solution's own start


def test_a_start_that_does_not_fit_the_problem_is_refused_naming_what():
    pipe = interleaved(4, 8)
    acts = template_orders("interleaved-zb", pipe)
    s2r = pipe.stage_to_rank()

    def refused(actions, stage_to_rank=s2r, split=True, on=pipe) -> str:
        with pytest.raises(ValueError) as exc:
            start_solution(on, Start(actions, split, stage_to_rank), "span")
        return str(exc.value)

    assert start_solution(pipe, Start(acts, True, s2r), "span").metrics["value"] > 0  # as it is: fits
    assert "the start has 12 stages on 4 ranks; this problem has 18 stages on 6 ranks" in refused(
        acts, on=interleaved(6, 8)
    )
    assert "which is no compute pass here" in refused([acts[0] + ["0F8"], *acts[1:]])  # a 9th micro-batch
    assert "backward as I and W" in refused([[a.replace("I", "B") for a in acts[0]], *acts[1:]])
    assert "the start lists 1F0 on rank 0; its stage 1 is on rank 1" in refused([[*acts[0], "1F0"], *acts[1:]])
    twice = [[*acts[0], acts[0][0]], *acts[1:]]
    assert f"the start lists {acts[0][0]} more than once" in refused(twice)
    assert f"the start lacks 1 of this problem's passes, {acts[3][-1]} first" in refused([*acts[:3], acts[3][:-1]])
    other = list(np.roll(s2r, 1))  # a placement the problem does not have, where it names one
    placed = interleaved(4, 8, placement="loop")
    assert "this problem's placement 'loop'" in refused(acts, stage_to_rank=other, on=placed)
    tight = interleaved(4, 8, memory_limit=6 * 201216)  # half 1F1B's memory: torch's order breaks it
    with pytest.raises(InvalidSchedule):
        start_solution(tight, Start(acts, True, s2r), "span")
    # `best` leaves such a start out (with --cuts best, the other partition's memory may differ) and says why
    sol = solve_best(tight, time_limit=2, start=Start(acts, True, s2r))
    validate(sol.tasks.problem, sol.schedule)
    assert sol.info["candidates"]["start"].startswith("not used: ") and "memory" in sol.info["candidates"]["start"]


def test_solve_goes_on_from_a_schedule_file_in_place_and_refuses_a_start_it_cannot_use(tmp_path, capsys):
    out = tmp_path / "s.json"
    problem = str(DATA / "zb-1.5b.yaml")
    assert main(["solve", problem, "--schedule", "1f1b", "--out", str(out), "--quiet"]) == 0
    first = load_schedule(out).metrics["value"]
    again = ["solve", problem, "--solver", "best", "--time-limit", "5", "--start", str(out), "--out", str(out)]
    assert main(again) == 0  # in place: the file it starts from is the one it writes
    assert f"candidates: start {first} unit," in capsys.readouterr().out
    assert load_schedule(out).metrics["value"] <= first
    assert main(["solve", problem, "--schedule", "1f1b", "--start", str(out)]) == 2
    assert "--start: only --solver best goes on from a schedule file" in capsys.readouterr().err
    other = str(PROBLEMS / "zb-interleaved-1.5b.yaml")
    assert main(["solve", other, "--solver", "best", "--start", str(out), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert f"--start {out}: the start has 8 stages on 8 ranks; this problem has 24 stages" in err
    assert not (tmp_path / "o.json").exists()
