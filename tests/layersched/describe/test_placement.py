"""Placement in the problem (loop, v or a list) and per-stage cost lists: every solver and template
honours the placement; a template that cannot says so."""

import numpy as np
import pytest

from layersched.cli.main import main
from layersched.describe.config import ProblemSpec, SpecError, load_problem
from layersched.describe.stages import pipeline_from_spec
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import TemplateError
from solvers import validate

BASE = {"stages": 4, "stages_per_rank": 2, "microbatches": 4, "forward": 2, "backward_input": 2, "backward_weight": 1}


def pipe(**fields):
    return pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {**BASE, **fields}}))


@pytest.mark.parametrize("place, ranks", [("loop", [0, 1, 0, 1]), ("v", [0, 1, 1, 0]), ([1, 0, 0, 1], [1, 0, 0, 1])])
def test_every_generic_solver_keeps_the_problems_placement(place, ranks):
    p = pipe(placement=place)
    assert p.stage_to_rank() == ranks
    for solver, options in (("list", {}), ("cpsat", {"time_limit": 2}), ("best", {"time_limit": 2})):
        sol = solve_pipeline(p, solver=solver, **options)
        validate(sol.tasks.problem, sol.schedule)
        assert sol.stage_to_rank == ranks, solver
        # every task runs on the rank that holds its stage
        g = sol.tasks.graph
        for name in sol.tasks.names:
            assert g.nodes[name]["rank"] == ranks[g.nodes[name]["stage"]]


def test_a_template_of_another_placement_says_so():
    with pytest.raises(TemplateError, match=r"template 'interleaved' places stages loop .*placement is 'v'"):
        solve_pipeline(pipe(placement="v"), schedule="interleaved")
    sol = solve_pipeline(pipe(placement="v"), solver="best", time_limit=2)
    tried = sol.info["candidates"]
    assert isinstance(tried["zb-v"], int) and tried["interleaved"].startswith("not applicable: template 'interleaved'")
    assert sol.metrics["value"] <= tried["zb-v"]


def test_without_a_placement_templates_keep_their_own():
    p = pipe()
    assert p.placement is None
    assert solve_pipeline(p, schedule="zb-v").stage_to_rank == [0, 1, 1, 0]
    assert solve_pipeline(p, schedule="interleaved").stage_to_rank == [0, 1, 0, 1]


def test_per_stage_costs_as_lists():
    p = pipe(forward=[1, 2, 3, 4], transfer=[5, 6, 7], memory_forward=[4, 4, 2, 2], memory_freed_by_weight=1)
    assert p.forward.tolist() == [1, 2, 3, 4] and p.transfer.tolist() == [5, 6, 7]
    assert p.backward_input.tolist() == [2, 2, 2, 2] and p.mem_forward.tolist() == [4, 4, 2, 2]
    sol = solve_pipeline(p, solver="list")
    durations = {n: int(d) for n, d in zip(sol.tasks.names, sol.tasks.problem.duration, strict=True)}
    assert [durations[f"{s}F0"] for s in range(4)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"forward": [1, 2, 3]}, "forward: 3 values for 4; give one per stage, or one number"),
        ({"transfer": [1, 2, 3, 4]}, "transfer: 4 values for 3; give one per stage boundary"),
        ({"placement": [0, 1, 1]}, "placement lists 3 ranks for 4 stages"),
        ({"placement": [0, 2, 1, 0]}, "placement names rank 2; ranks are 0 to 1"),
        ({"placement": [0, 0, 0, 1]}, "placement puts 3 stages on rank 0 but 1 on rank 1"),
        ({"placement": "w"}, "placement"),
        ({"memory_forward": [2, 2, 2, 2], "memory_freed_by_weight": [1, 3, 1, 1]}, "cannot exceed memory_forward"),
    ],
)
def test_bad_placement_or_cost_list_is_one_line_naming_the_field(tmp_path, capsys, fields, message):
    import yaml

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "pipeline": {**BASE, **fields}}))
    with pytest.raises(SpecError, match="p.yaml") as err:
        load_problem(path)
    assert message in str(err.value)
    assert main(["solve", str(path), "--out", str(tmp_path / "s.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_model_level_training_placement(tmp_path):
    spec = load_problem("problems/gpt3-1.3b-a100.yaml")
    training = spec.training.model_copy(update={"stages_per_rank": 2, "placement": "v"})
    p = pipeline_from_spec(spec.model_copy(update={"training": training}))
    assert p.stage_to_rank() == [0, 1, 2, 3, 3, 2, 1, 0]
    sol = solve_pipeline(p, solver="list")
    assert sol.stage_to_rank == p.stage_to_rank()
    bad = spec.training.model_copy(update={"stages_per_rank": 2, "placement": [0, 1, 2, 3, 0, 1, 2, 2]})
    with pytest.raises(SpecError, match="training.placement: placement puts 3 stages on rank 2"):
        pipeline_from_spec(spec.model_copy(update={"training": bad}), "x.yaml")
    # static memory (weights, optimizer state) counts per rank under the placement: the limit left for
    # activations is the device's memory less the fullest rank's static memory
    per_rank = np.bincount(p.stage_to_rank(), weights=p.static_memory)
    assert p.capacity == int(spec.cluster.device.memory_bytes - per_rank.max())
    loop = pipeline_from_spec(spec.model_copy(update={"training": training.model_copy(update={"placement": "loop"})}))
    assert p.capacity != loop.capacity  # the v placement pairs stages differently
