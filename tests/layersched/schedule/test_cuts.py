"""Cuts chosen with the schedule: sub-layer partitions in the main path, never worse than whole layers."""

import pytest

from layersched.cli.main import main
from layersched.describe.config import SpecError, load_problem
from layersched.describe.stages import model_units, pipeline_from_spec
from layersched.schedule.cuts import choose_cuts
from layersched.schedule.solve import solve_pipeline
from tests.paths import PROBLEMS

MAIN = ["gpt3-1.3b-a100", "bert-large-v100", "resnet50-v100", "vgg16-v100", "mobilenetv2-v100"]


@pytest.mark.parametrize("name", MAIN)
def test_choosing_cuts_is_never_worse_than_whole_layers(name):
    path = PROBLEMS / f"{name}.yaml"
    spec = load_problem(path)
    sol, tried = choose_cuts(spec, str(path), lambda p: solve_pipeline(p, schedule="1f1b"), budget=5)
    whole = next(c for c in tried if c.granularity == "layer")
    assert whole.value is not None and sol.metrics["value"] <= whole.value
    assert sol.metrics["value"] == min(c.value for c in tried if c.value is not None)
    flat = [n for stage in sol.pipe.stage_layers for n in stage]
    assert flat in ([u.name for u in model_units(spec, g)] for g in ("layer", "sublayer"))  # each unit once, in order


def test_gpt3_sublayer_cuts_beat_whole_layers_and_fit_in_memory():
    path = PROBLEMS / "gpt3-1.3b-a100.yaml"
    spec = load_problem(path)
    whole = solve_pipeline(pipeline_from_spec(spec, str(path)), schedule="zb-greedy")
    sub = solve_pipeline(pipeline_from_spec(spec, str(path), granularity="sublayer"), schedule="zb-greedy")
    assert sub.metrics["value"] < 0.95 * whole.metrics["value"]  # 619.4 ms against 667.4 ms
    assert max(sub.metrics["peak_memory"]) <= sub.pipe.capacity  # solve validated memory too
    assert any("." in n for stage in sub.pipe.stage_layers for n in stage)  # cut inside a layer


def test_explicit_parts_are_checked():
    path = PROBLEMS / "gpt3-1.3b-a100.yaml"
    spec = load_problem(path)
    n = len(model_units(spec, "layer"))
    pipe = pipeline_from_spec(spec, str(path), parts=[[0], [1, 2], list(range(3, n - 1)), [n - 1]])
    assert pipe.stage_layers[0] == ["embedding"] and pipe.stage_layers[3] == ["head"]
    with pytest.raises(ValueError, match="non-empty runs covering units"):
        pipeline_from_spec(spec, str(path), parts=[[0], [1], [2]])
    with pytest.raises(ValueError, match="granularity"):
        model_units(spec, "kernel")


def test_solve_reports_the_partitions_and_writes_sublayer_stages(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["solve", str(PROBLEMS / "gpt3-1.3b-a100.yaml"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    # whole layers: 768.6 ms on Python 3.11, 769.0 ms on 3.12 (the partition breaks a tie differently)
    assert "cuts: whole layers: 76" in text and "less than whole layers) <- chosen" in text
    assert main(["validate", str(out)]) == 0
    import json

    layers = json.loads(out.read_text())["pipeline"]["stage_layers"]
    assert any("." in n for stage in layers for n in stage)
    assert main(["solve", str(PROBLEMS / "gpt3-1.3b-a100.yaml"), "--cuts", "layer", "--out", str(out)]) == 0
    assert "cuts:" not in capsys.readouterr().out
    layers = json.loads(out.read_text())["pipeline"]["stage_layers"]
    assert not any("." in n for stage in layers for n in stage)


def test_more_stages_than_whole_layers_are_cut_inside_layers_under_best(tmp_path, capsys):
    """GPT-3 cut to 4 blocks (6 layers with embedding and head) on 4 ranks x 2 stages: whole layers cannot
    make 8 stages. Under ``cuts: best`` (the default) ``solve`` and ``frontier`` refused it before trying
    sub-layer cuts; now ``solve`` schedules them and says why whole layers were not, ``--cuts layer``
    names the way out, and ``frontier`` sweeps the sub-layer partition."""
    import yaml

    data = yaml.safe_load((PROBLEMS / "gpt3-1.3b-a100.yaml").read_text())
    data["cluster"] = str(PROBLEMS / data["cluster"])
    data["model"]["architecture"]["num_layers"] = 4
    data["training"].update(pipeline=4, stages_per_rank=2)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "s.json"
    assert main(["solve", str(path), "--solver", "list", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cuts: whole layers: none (" in text and "8 stages need at least 8 layers, the model has 6" in text
    assert "cuts: sub-layers: " in text and main(["validate", str(out)]) == 0
    assert main(["solve", str(path), "--solver", "list", "--cuts", "layer", "--out", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert "the model has 6; lower pipeline or stages_per_rank, or cut inside layers (cuts: sublayer or best)" in err
    # frontier starts from the same partition (it used whole layers whatever the file's cuts)
    args = ["frontier", str(path), "--points", "2", "--time-limit", "1", "--out-dir", str(tmp_path), "--quiet"]
    assert main(args) == 0 and (tmp_path / "gpt3-1.3b-a100-frontier.csv").exists()


def test_cuts_on_a_stage_level_problem_is_one_line(capsys):
    assert main(["solve", str(PROBLEMS / "zb-1.5b.yaml"), "--cuts", "sublayer", "--out", "/tmp/never.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only a model-level problem can be cut" in err[0]
    with pytest.raises(SpecError, match="--cuts"):
        choose_cuts(load_problem(PROBLEMS / "gpt3-1.3b-a100.yaml"), "x", lambda p: None, cuts="kernel")


def test_an_interrupted_search_ends_the_comparison():
    path = PROBLEMS / "gpt3-1.3b-a100.yaml"
    calls = []

    def evaluate(p):
        sol = solve_pipeline(p, schedule="1f1b")
        calls.append(p)
        sol.info["interrupted"] = True  # as solve_best marks a search cut by Ctrl-C
        return sol

    sol, tried = choose_cuts(load_problem(path), str(path), evaluate)
    assert len(calls) == 1 and sol.info["interrupted"] and tried[0].granularity == "layer"


def test_a_partition_met_twice_is_scheduled_once_and_each_hears_its_place():
    """resnet50's memory-aware sub-layer partition is its sub-layer one: scheduled once, one row, and
    ``starting`` hears each distinct partition with its place among them (the CLI shares its time
    limit that way)."""
    path = PROBLEMS / "resnet50-v100.yaml"
    calls, heard = [], []

    def evaluate(p):
        calls.append(p)
        return solve_pipeline(p, schedule="1f1b")

    sol, tried = choose_cuts(load_problem(path), str(path), evaluate, climb=False, starting=lambda *a: heard.append(a))
    assert [c.label for c in tried] == ["whole layers", "sub-layers"]
    assert len(calls) == 2 and heard == [("whole layers", 0, 2), ("sub-layers", 1, 2)]


def test_solve_shares_its_time_limit_among_the_partitions(tmp_path, monkeypatch):
    """``solve --solver best --time-limit 2`` on a model-level problem: each partition's search is
    given at most its share of what is left, so the last one ends by the 2 s deadline (before, each of
    three got half of it: 3 s in all)."""
    import time

    import layersched.schedule.solve as solve

    real, given = solve.solve_pipeline, []

    def recorded(pipe, **kw):
        if kw.get("solver") == "best":  # the CLI's call per partition (best's templates call it too)
            given.append((time.perf_counter(), kw["time_limit"]))
        return real(pipe, **kw)

    monkeypatch.setattr(solve, "solve_pipeline", recorded)
    path = PROBLEMS / "bert-large-v100.yaml"
    t0 = time.perf_counter()
    assert main(["solve", str(path), "--solver", "best", "--time-limit", "2", "--out", str(tmp_path / "s.json")]) == 0
    assert len(given) == 2  # whole layers and sub-layers (its memory-aware partition is the same)
    assert given[0][1] <= 1.0  # half, the other half for the second
    # the limit counts from when the problem has been read, just before the first partition
    assert all(at + limit <= given[0][0] + 2.0 for at, limit in given)
    assert time.perf_counter() - t0 < 2.0 + 2  # the allowance for reading and writing (budget.SETUP_SECONDS)
