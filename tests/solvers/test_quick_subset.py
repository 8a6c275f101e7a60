"""benchmarks/quick_subset.py, whether fewer of `best`'s candidates match saga: its reading of the
stored saga figures, its rule for a subset matching a class, and its runs."""

import pytest

from solvers.heuristics import candidates
from tests.paths import benchmark


def test_reads_saga_best_of_all_52_classes_from_the_stored_table():
    with benchmark("quick_subset") as module:
        saga = module.stored_saga_best()
    assert len(saga) == 52 and sum(k[1] in module.ISSUE_SIZES for k in saga) == 36
    assert saga[("layered", 100, 4)] == 289 and saga[("erdos-het", 2000, 16)] == 2361


def test_a_subset_matches_where_the_median_of_its_least_makespan_is_at_most_saga_best():
    runs = {"a": [3, 5, 4], "b": [4, 2, 9]}  # least per seed: 3, 2, 4; median 3
    with benchmark("quick_subset") as module:
        assert module.matches(["a", "b"], runs, 3)
        assert not module.matches(["a", "b"], runs, 2)
        assert module.matches(["a"], runs, 4) and not module.matches(["a"], runs, 3)  # median of a alone: 4
        assert not module.matches(["c"], runs, 100)  # a candidate not run there matches nothing


def test_makespans_runs_every_candidate_of_best_on_each_seed():
    with benchmark("quick_subset") as module:
        runs = module.makespans("layered-het", 30, 3, range(2))
        problem, _ = module.instance("layered", 30, 3, 1, hetero=True)
    assert list(runs) == [name for name, _ in candidates(problem)] and set(module.SUBSET) <= set(runs)
    assert all(len(v) == 2 for v in runs.values())
    assert runs["heft"][1] == dict(candidates(problem))["heft"](problem).objective


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--subset", "heft,hefty", "--subset: unknown candidate 'hefty'; valid: heft, list, "),
        ("--kinds", "erdos-het,grid", "--kinds: unknown kind 'grid'; valid: layered, erdos, layered-het, erdos-het"),
        ("--seeds", "6,x", "expected seeds like 6,7,8 (whole numbers, at least 0), got '6,x'"),
        ("--seeds", "6,-1", "expected seeds like 6,7,8"),
        ("--seeds", "6,6", "a seed is given twice in '6,6'"),
    ],
)
def test_an_unknown_candidate_kind_or_seed_is_one_line(monkeypatch, capsys, option, value, message):
    with benchmark("quick_subset") as module:
        monkeypatch.setattr("sys.argv", ["quick_subset.py", "--new-seeds", f"{option}={value}"])
        monkeypatch.setattr(module, "new_seeds", lambda *args: pytest.fail(f"ran with {args}"))
        with pytest.raises(SystemExit):
            module.main()
    err = capsys.readouterr().err
    assert message in err and (option != "--subset" or "heft-pairs-ties2" in err)


def test_new_seeds_runs_on_the_seeds_given(monkeypatch):
    ran = []
    with benchmark("quick_subset") as module:
        monkeypatch.setattr("sys.argv", ["quick_subset.py", "--new-seeds", "--kinds", "erdos", "--seeds", "6,7,8"])
        monkeypatch.setattr(module, "new_seeds", lambda names, kinds, seeds: ran.append((names, kinds, seeds)))
        module.main()
        assert ran == [(list(module.SUBSET), ["erdos"], (6, 7, 8))]
        ran.clear()
        monkeypatch.setattr("sys.argv", ["quick_subset.py", "--new-seeds", "--kinds", "erdos"])
        module.main()
        assert ran == [(list(module.SUBSET), ["erdos"], (3, 4, 5))]


def test_new_seeds_compares_the_medians_over_the_seeds_given_with_saga(monkeypatch, capsys):
    asked = []

    def saga(problem, arrays, algorithm, limit):  # saga's three heuristics, stood in for: 1,000 each
        asked.append(algorithm)
        return 0.0, 1000

    with benchmark("quick_subset") as module:
        monkeypatch.setattr(module, "NEW_SIZES", ((12, (2, 3)),))
        monkeypatch.setattr(module, "run_saga", saga)
        module.new_seeds(["heft"], ["erdos"], (6, 7))
        runs = module.makespans("erdos", 12, 2, (6, 7))
    out = capsys.readouterr().out
    assert "(medians of seeds 6,7)" in out and asked == ["HEFT", "CPoP", "FCP"] * 4
    least = sorted(min(v[s] for v in runs.values()) for s in range(2))
    assert f"{sum(least) / 2:7g}" in out.splitlines()[1]  # all of best's candidates: the median of two seeds
    assert out.rstrip().endswith("all of best's candidates on 2, best on 2")  # every makespan of 12 tasks < 1,000
