"""The memory-bubble frontier: each point is a valid schedule under its limit with a bound below it;
the least limit is exact; more memory never costs time."""

import csv
from dataclasses import replace

import pytest

from layersched.cli.main import main
from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.schedule.frontier import frontier
from layersched.schedule.solve import NoScheduleError, solve_pipeline
from tests.paths import DATA

pytest.importorskip("ortools")


def small(**fields):
    spec = {"stages": 3, "microbatches": 4, "forward": 2, "backward_input": 2, "backward_weight": 1}
    spec |= {"transfer": 1, "memory_forward": 4, "memory_freed_by_weight": 1, **fields}
    return pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": spec}))


@pytest.mark.parametrize("fields", [{}, {"stages": 4, "stages_per_rank": 2, "placement": "v"}])
def test_points_are_valid_bounded_and_never_slower_with_more_memory(fields):
    pipe = small(**fields)
    # the V row is not proven at any point, so each search runs out its time: 2 s there is enough
    f = frontier(pipe, points=4, time_limit=2 if fields else 5)
    limits = [p.limit for p in f.points]
    assert limits == sorted(set(limits)) and limits[0] == pipe.least_memory()
    for p in f.points:
        assert p.peak_memory <= p.limit and p.lower_bound <= p.value
    # a schedule that fits a limit fits every larger one: no bound at more memory exceeds it
    for i, p in enumerate(f.points):
        assert all(q.lower_bound <= p.value for q in f.points[i + 1 :]), (p, f.points[i + 1 :])
    if not fields:  # small enough to prove every point
        assert all(p.status == "optimal" for p in f.points)
    # more memory never costs time, proven or not: each point starts from the schedule of the one before
    values = [p.value for p in f.points]
    assert values == sorted(values, reverse=True)
    assert all(f.floor <= p.value for p in f.points)
    # every template without a limit is no faster than the frontier at its own peak memory
    for t in f.templates:
        at = [p.value for p in f.points if p.limit <= t.peak_memory]
        assert not at or min(at) <= t.value, t


def test_each_point_starts_from_the_one_before_so_a_weaker_search_never_rises(monkeypatch):
    """Every point after the first gets only GPipe's pattern and no time to search: it still returns at
    most the point before, whose schedule it starts from (it fits the larger limit too)."""
    import layersched.schedule.solve as S

    real, starts = S.solve_best, []

    def weak(pipe, **options):
        starts.append(options.get("start"))
        if len(starts) > 1:
            options.update(templates=["gpipe"], time_limit=0.0)
        return real(pipe, **options)

    monkeypatch.setattr(S, "solve_best", weak)
    f = frontier(small(), points=4, time_limit=5)
    assert starts[0] is None and all(s is not None for s in starts[1:]) and len(starts) == len(f.points) > 2
    values = [p.value for p in f.points]
    assert values == sorted(values, reverse=True)
    for p in f.points:
        assert p.peak_memory <= p.limit and p.lower_bound <= p.value


def test_least_memory_is_exact():
    """At the least limit a schedule exists; one unit less, none does (every solver fails there)."""
    pipe = small()
    least = pipe.least_memory()
    assert solve_pipeline(replace(pipe, capacity=least), solver="best", time_limit=5).metrics["value"] > 0
    with pytest.raises(NoScheduleError, match=f"below the least any schedule needs, {least} unit"):
        solve_pipeline(replace(pipe, capacity=least - 1), solver="best", time_limit=5)


def test_frontier_command_writes_table_csv_and_plot(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["frontier", str(DATA / "zb-1.5b.yaml"), "--points", "2", "--time-limit", "2", "--microbatches", "4"]
    assert main([*args, "--out-dir", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "memory-bubble frontier" in text and "zb-h1 (no limit)" in text
    rows = list(csv.DictReader((out / "zb-1.5b-frontier.csv").open()))
    best = [r for r in rows if r["label"] == "best"]
    assert len(best) >= 2 and all(int(r["peak_memory"]) <= int(r["limit"]) for r in best)
    assert (out / "zb-1.5b-frontier.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["frontier", str(DATA / "zb-1.5b.yaml"), "--points", "0"]) == 2


def test_frontier_of_a_model_says_which_cuts_it_sweeps(tmp_path, capsys):
    """On a model-level problem with ``cuts: best`` the sweep is of the whole-layer partition, while
    `solve` also schedules the cuts inside layers and keeps the faster. The frontier said "no schedule
    at any memory limit is faster than" its whole-layer bound, which `solve` beat (617.9 ms against
    667.4 ms on the bundled GPT-3 problem). It now names its cuts, points to the others, and sweeps
    them with ``--cuts sublayer``, into files of their own."""
    from tests.paths import PROBLEMS

    problem = str(PROBLEMS / "gpt3-1.3b-a100.yaml")
    args = ["frontier", problem, "--points", "2", "--time-limit", "1", "--out-dir", str(tmp_path)]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("gpt3-1.3b-a100 cut between whole layers: sweeping 2 memory limits")
    assert (
        "no schedule with these cuts at any memory limit is faster than 667.364 ms (the bound without a limit); "
        "--cuts sublayer sweeps the cuts inside layers, which 'solve' also tries"
    ) in out
    assert main([*args, "--cuts", "sublayer"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("gpt3-1.3b-a100 cut inside layers:")
    assert "faster than 617.917 ms (the bound without a limit)" in out and "--cuts sublayer sweeps" not in out
    assert (tmp_path / "gpt3-1.3b-a100-frontier.csv").exists()
    assert (tmp_path / "gpt3-1.3b-a100-sublayer-frontier.csv").exists()
    assert main(["frontier", str(DATA / "zb-1.5b.yaml"), "--cuts", "layer"]) == 2
    assert "only a model-level problem can be cut" in capsys.readouterr().err


def test_frontier_says_up_front_how_long_the_sweep_may_take(tmp_path, capsys, monkeypatch):
    """100,000 points of 10 s each would run for 11.6 days: the first line says so before any work."""
    import layersched.schedule.frontier
    from layersched.describe.config import SpecError

    def stop(*args, **kwargs):
        raise SpecError("stopped before the sweep")

    monkeypatch.setattr(layersched.schedule.frontier, "frontier", stop)
    args = ["frontier", str(DATA / "zb-1.5b.yaml"), "--out-dir", str(tmp_path)]
    assert main([*args, "--points", "100000"]) == 2
    assert "at most 10 s each (11.6 days for the 100000 limits)" in capsys.readouterr().out
    assert main([*args, "--points", "8", "--time-limit", "10"]) == 2
    assert "(80 s for the 8 limits)" in capsys.readouterr().out
    assert main([*args, "--points", "8", "--time-limit", "100"]) == 2
    assert "(13 min for the 8 limits)" in capsys.readouterr().out
