"""benchmarks/tail_replay.py: it replays `best`'s tail step from the step's own input."""

import argparse
import re
from collections import Counter

import numpy as np
import pytest

from solvers import Problem, Schedule
from solvers.validate import violations
from tests.paths import benchmark


@pytest.fixture(scope="module")
def bench():
    with benchmark("tail_replay") as module:
        yield module


@pytest.fixture(scope="module")
def kept(bench, tmp_path_factory):
    import multichunk  # beside tail_replay, on the path while ``bench`` lives

    from layersched.schedule import solve

    path = multichunk.recut(tmp_path_factory.mktemp("row"), "zb-interleaved-1.5b", 4, 8)
    # on a row this small `best` runs the coarse levels before the tail step (`COARSE_FIRST_TASKS`),
    # and they may reach the bound first; after it, as on larger rows, the step starts from CP-SAT's
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(solve, "COARSE_FIRST_TASKS", 0)
        return bench.capture(path, 8)


def test_the_captured_start_is_a_valid_schedule_above_its_bound(kept):
    import solvers.lns

    assert kept is not None  # on this row `best` reaches its tail step within 8 s
    problem, start = kept["problem"], kept["schedule"]
    assert not violations(problem, start, limit=1)
    assert kept["objective"] == "span" and 0 < kept["bound"] < start.objective(problem, "span")
    cut = kept["cuts"](start, 0)
    assert cut.shape == (problem.num_processors,)
    assert 0 < int((start.start >= cut[start.processor]).sum()) < problem.num_tasks
    assert solvers.lns.improve_tails.__name__ == "improve_tails"  # the step is put back


def test_windows_of_another_skew_come_from_the_captured_task_graph(bench, kept):
    """``--skews`` cuts each window with `widening_tails` on the task graph `best` used: skew 0 gives
    the windows `best` ran on this 4-rank row (fewer than `TAIL_SKEW_RANKS`), and skew 3 cuts rank
    ``q`` ``q`` forwards deeper (its last stage is ``q``'s distance from the pipeline's end)."""
    from layersched.schedule import solve

    problem, start, tasks = kept["problem"], kept["schedule"], kept["tasks"]
    assert tasks.problem is problem and solve.widening_tails.__name__ == "widening_tails"  # put back
    assert kept["skew"] == 0.0  # `best`'s own on 4 ranks, the default of ``--skews``
    for k in (0, 2):
        even = solve.widening_tails(tasks, solve.TAIL_FIRST_TASKS, 0)(start, k)
        assert list(even) == list(kept["cuts"](start, k))
    skewed = solve.widening_tails(tasks, solve.TAIL_FIRST_TASKS, 3)(start, 0)
    first = solve.widening_tails(tasks, solve.TAIL_FIRST_TASKS, 0)
    j = next(d for d in (1, 2, 3) if list(first(start, 0)) == list(solve.tail_cut(tasks, start, d)))
    assert list(skewed) == list(solve.tail_cut(tasks, start, np.array([j, j + 1, j + 2, j + 3])))


@pytest.mark.parametrize(
    ("setting", "hint", "parameters"),
    [("all", True, None), ("scheduling", True, None), ("all", False, None),
     ("all", True, {"use_dynamic_precedence_in_disjunctive": True})],
)  # fmt: skip
def test_a_replayed_window_is_valid_no_worse_and_names_who_found_it(bench, kept, setting, hint, parameters):
    problem, start = kept["problem"], kept["schedule"]
    cut = kept["cuts"](start, 0)
    r = bench.replay(problem, start, cut, 2, objective="span", bound=kept["bound"], seed=1,
                     ignore=bench.SUBSOLVERS[setting], hint=hint, parameters=parameters)  # fmt: skip
    assert not violations(problem, r["schedule"], limit=1)
    assert kept["bound"] <= r["bound"] <= r["found"] <= start.objective(problem, "span")
    assert r["found"] == r["schedule"].objective(problem, "span")
    assert r["free"] == int((start.start >= cut[start.processor]).sum())
    assert isinstance(r["solutions"], Counter)
    if r["found"] < start.objective(problem, "span"):  # what improved was found by some subsolver
        assert sum(r["solutions"].values()) >= 1
    if setting == "scheduling":
        assert not {f"{name}".removesuffix("_lns") for name in bench.GENERIC_SUBSOLVERS} & set(r["solutions"])


def test_the_log_names_who_found_each_solution(bench):
    """A replay's ``solutions`` come from CP-SAT's log (lines as ortools 9.15 writes them, from a
    2 s replay on the p=4 row): solution lines only, the name without "_lns" and its bracket. (A
    replay on a loaded machine may end before its first solution, so the live test above asserts this
    only where it improved: session 56's fresh clone saw such a run.)"""
    lines = [
        "#Bound   0.63s best:inf   next:[1183509,2860652] initial_domain",
        "#Model   0.64s var:3069/3069 constraints:9363/9363",
        "#1       0.65s best:1211216 next:[1183509,1211215] fj_restart(batch:1 lin{mvs:1 evals:5} #w_updates:0)",
        "#2       1.16s best:1207762 next:[1183509,1207761] scheduling_time_window_lns (d=5.00e-01 s=10 t=0.10)",
        "#3       1.55s best:1206355 next:[1183509,1206354] default_lp",
        "#4       1.57s best:1205486 next:[1183509,1205485] default_lp",
        "#Done    1.90s default_lp",
    ]
    assert bench.found_by(lines) == Counter({"default_lp": 2, "fj_restart": 1, "scheduling_time_window": 1})
    assert bench.found_by([]) == Counter()


def test_bad_arguments_are_one_line(bench):
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 0, got -1"):
        bench._windows("0,-1")
    with pytest.raises(argparse.ArgumentTypeError, match="must be at most 2,147,483,647"):
        bench._seeds("0,2147483648")  # CP-SAT's random_seed is 32-bit signed
    with pytest.raises(argparse.ArgumentTypeError, match="unknown setting 'fast'"):
        bench._settings("all,fast")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown hint setting 'maybe'; valid: on, off"):
        bench._hints("on,maybe")
    assert bench._hints("on,off") == [True, False] and bench._hints("off") == [False]
    for bad in ("2,-1", "x", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number of at least 0"):
            bench._skews(bad)
    assert bench._skews("0,2.5") == [0.0, 2.5]
    assert bench._windows("0,2") == [0, 2] and bench._seeds("0,2147483647") == [0, 2**31 - 1]
    assert np.array_equal(bench._settings("scheduling"), ["scheduling"])


def test_more_cp_sat_parameters_reach_cp_sat_and_bad_ones_are_one_line(bench, monkeypatch):
    """``--parameters`` is a JSON object of CP-SAT's parameters by name; each reaches `solve_tails`
    beside the seed and subsolvers the other options set, which it may not set itself."""
    given = bench._parameters('{"use_dynamic_precedence_in_disjunctive": true}')
    assert given == {"use_dynamic_precedence_in_disjunctive": True}
    assert bench._parameters('{"extra_subsolvers": ["fixed"], "max_presolve_iterations": 2}') == {
        "extra_subsolvers": ["fixed"],
        "max_presolve_iterations": 2,
    }
    bad = {
        "{": "not JSON",
        "[1]": "expected a JSON object of CP-SAT parameters by name",
        '{"no_such_thing": 1}': "no_such_thing: not one of CP-SAT's parameters",
        '{"random_seed": 3}': "random_seed: set by --seeds",
        '{"ignore_subsolvers": ["ls"]}': "ignore_subsolvers: set by --subsolvers",
        '{"num_workers": "two"}': "num_workers: 'two' is not a value it takes",
    }
    for text, says in bad.items():
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(says)) as e:
            bench._parameters(text)
        assert "\n" not in str(e.value)
    seen = {}

    def solve_tails(*args, parameters=None, stats=None, **kwargs):
        seen.update(parameters)
        stats.update(free=1, bound=4)
        return None, False

    monkeypatch.setattr(bench, "solve_tails", solve_tails)
    problem = Problem(duration=[2, 2], num_processors=1)
    start = Schedule(processor=[0, 0], start=[0, 2])
    r = bench.replay(problem, start, np.array([1]), 1, objective="span", bound=4, seed=7, ignore=["ls"],
                     parameters={"use_dynamic_precedence_in_disjunctive": True})  # fmt: skip
    assert seen == {"use_dynamic_precedence_in_disjunctive": True, "random_seed": 7, "ignore_subsolvers": ["ls"]}
    assert r["found"] == 4 and r["schedule"] is start  # CP-SAT found nothing: the start stands


def test_a_missing_or_bad_problem_file_is_one_line(bench, tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: {stages: 0}\n")
    for path, says in ((tmp_path / "none.yaml", "no such file"), (bad, "required field is missing")):
        monkeypatch.setattr("sys.argv", ["tail_replay.py", str(path)])
        with pytest.raises(SystemExit, match=says) as e:
            bench.main()
        assert str(path) in str(e.value) and "\n" not in str(e.value)
