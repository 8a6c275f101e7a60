"""torchtitan export and `layersched preflight`: torch's offline checks pass for every template,
placement and solver output (where torch is installed); what torchtitan cannot run is refused."""

import sys
import tomllib

import pytest

from layersched.cli.main import main
from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import save_json, schedule_file
from layersched.runtime.preflight import placement_check
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import get_template, template_names
from tests.paths import DATA


def pipeline(p, v, m, where=None):
    spec = {"stages": p * v, "stages_per_rank": v, "microbatches": m, "forward": 3, "backward_input": 2}
    spec |= {"backward_weight": 2, "transfer": 1, "memory_forward": 1, "memory_freed_by_weight": 0}
    if where is not None:
        spec["placement"] = where
    return pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": spec}))


def _export_and_check(tmp_path, capsys, sol, name):
    path = tmp_path / f"{name}.json"
    save_json(schedule_file(sol), path)
    toml = tmp_path / f"{name}.toml"
    assert main(["export", str(path), "--format", "torchtitan", "--out", str(toml), "--microbatch-size", "2"]) == 0
    config = tomllib.loads(toml.read_text())
    pp = config["parallelism"]
    assert pp["pipeline_parallel_degree"] == sol.pipe.num_ranks
    assert pp["pipeline_parallel_microbatch_size"] == 2
    assert config["training"]["local_batch_size"] == 2 * sol.pipe.num_microbatches
    csv_rows = open(pp["pipeline_parallel_schedule_csv"]).read().splitlines()
    assert [row.split(",") for row in csv_rows] == sol.actions()
    capsys.readouterr()
    code = main(["preflight", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("pass  ") == 4 and "FAIL" not in out
    return pp


def _stage_counts(name):
    t = get_template(name)
    return [v for v in (1, 2, 3) if v >= t.min_stages_per_rank and (t.max_stages_per_rank or 3) >= v]


CASES = [(name, v) for name in [*template_names(), "kfkb-3"] for v in _stage_counts(name)]


@pytest.mark.parametrize("name,v", CASES)
def test_every_template_exports_for_torchtitan_and_passes_preflight(tmp_path, capsys, name, v):
    pytest.importorskip("torch")
    sol = solve_pipeline(pipeline(4, v, 12), schedule=name)  # 12: a multiple of every template's need
    pp = _export_and_check(tmp_path, capsys, sol, name)
    loop = "1F1B" if v == 1 else "Interleaved1F1B"
    want = "ZBVZeroBubble" if sol.stage_to_rank == [0, 1, 2, 3, 3, 2, 1, 0] else loop
    assert pp["pipeline_parallel_schedule"] == want


SOLVERS = [("list", 1, None), ("list", 2, "v"), ("cpsat", 2, "loop"), ("best", 2, "v")]


@pytest.mark.parametrize("solver,v,where", SOLVERS)
def test_solver_outputs_export_for_torchtitan_and_pass_preflight(tmp_path, capsys, solver, v, where):
    pytest.importorskip("torch")
    pytest.importorskip("ortools")
    sol = solve_pipeline(pipeline(2, v, 4, where), solver=solver, time_limit=5)
    _export_and_check(tmp_path, capsys, sol, solver)


def test_model_level_layers_become_module_fqns(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "tiny.json"
    assert main(["solve", str(DATA / "tiny-model.yaml"), "--schedule", "1f1b", "--out", str(out), "--quiet"]) == 0
    toml = tmp_path / "tiny.toml"
    assert main(["export", str(out), "--format", "torchtitan", "--out", str(toml)]) == 0
    pp = tomllib.loads(toml.read_text())["parallelism"]
    assert pp["module_fqns_per_model_part"] == [["l0", "l1"], ["l2", "l3"]]
    assert pp["data_parallel_replicate_degree"] == 2


def test_a_placement_torchtitan_cannot_express_is_refused(tmp_path, capsys):
    sol = solve_pipeline(pipeline(2, 2, 4, [0, 0, 1, 1]), schedule="chunk-greedy")
    path = tmp_path / "odd.json"
    save_json(schedule_file(sol), path)
    assert main(["export", str(path), "--format", "torchtitan", "--out", str(tmp_path / "odd.toml")]) == 2
    err = capsys.readouterr().err
    assert "torchtitan places stages in a loop" in err and "[0, 0, 1, 1]" in err
    assert not (tmp_path / "odd.toml").exists() and not (tmp_path / "odd.csv").exists()


def test_placement_rule_names_the_first_stage_out_of_place():
    assert placement_check([0, 1, 1, 0]).ok  # V: ZBVZeroBubble
    assert placement_check([0, 1, 0, 1], "InterleavedZeroBubble").ok
    bad = placement_check([0, 1, 1, 0], "Interleaved1F1B")
    assert not bad.ok and "stage 2 is on rank 1 here" in bad.detail
    assert "puts it on rank 0 (loop placement)" in bad.detail
    three = placement_check([0, 1, 0, 1, 0, 1], "DualPipeV")
    assert not three.ok and "two stages per rank in a V; this has 6 on 2" in three.detail


def test_preflight_without_torch_is_one_line(tmp_path, capsys, monkeypatch):
    sol = solve_pipeline(pipeline(2, 1, 4), schedule="1f1b")
    path = tmp_path / "s.json"
    save_json(schedule_file(sol), path)
    monkeypatch.setitem(sys.modules, "torch.distributed.pipelining.schedules", None)
    assert main(["preflight", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs torch: pip install 'layersched[torch]'" in err[0]
