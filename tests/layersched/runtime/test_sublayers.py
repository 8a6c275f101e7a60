"""Sub-layer stages: a workload's declared sub-layers, the profiler's names and a sub-layer partition's
stage_layers agree; a schedule naming a unit the model lacks fails before any process starts."""

import pytest

torch = pytest.importorskip("torch")

from layersched.describe.stages import pipeline_from_spec  # noqa: E402
from layersched.formats.export import schedule_file  # noqa: E402
from layersched.runtime.plan import PlanError  # noqa: E402
from layersched.runtime.profiler import problem_from_profile, profile  # noqa: E402
from layersched.runtime.runner import RunConfig, prepare  # noqa: E402
from layersched.runtime.workload import load_workload  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from tests.paths import EXAMPLES  # noqa: E402

GPT = f"{EXAMPLES / 'models.py'}:gpt_small"


def test_a_block_declares_its_two_parts_and_they_compute_it():
    w = load_workload(GPT, microbatch_size=2)
    names = [n for n, _ in w.units(sublayers=True)]
    assert names[:3] == ["embed", "block0.attn", "block0.mlp"] and names[-1] == "head" and len(names) == 10
    block = dict(w.layers)["block1"]
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    torch.testing.assert_close(block(x), block.sublayers[1][1](block.sublayers[0][1](x)))
    whole, stages = w.stage_units([["embed", "block0", "block1.attn"], ["block1.mlp", "block2", "block3", "head"]])
    assert whole == names and stages[0] == ["embed", "block0.attn", "block0.mlp", "block1.attn"]


def test_profile_names_sublayers_as_the_workload_and_a_sublayer_partition_runs_them():
    prof = profile(GPT, microbatch=2, link=None, repeat=1, warmup=0)
    block = prof["layers"][1]
    assert block["name"] == "block0" and [s["name"] for s in block["sublayers"]] == ["block0.attn", "block0.mlp"]
    spec = problem_from_profile(prof, microbatches=4, pipeline=2)
    pipe = pipeline_from_spec(spec, "profiled", granularity="sublayer")
    doc = schedule_file(solve_pipeline(pipe, schedule="1f1b"))
    w = load_workload(GPT, microbatch_size=2)
    prep = prepare(RunConfig(doc, GPT, model_options={"microbatch_size": 2}), 2)
    assert [n for stage in prep.stage_layers for n in stage] == [n for n, _ in w.units(sublayers=True)]


def test_a_unit_the_model_lacks_is_one_line_before_any_process():
    from dataclasses import replace

    from tests.layersched.runtime.test_runner import stage_pipe

    layers = [["embed", "block0.qkv"], ["block0.mlp", "block1", "block2", "block3", "head"]]  # a cost-model leaf
    doc = schedule_file(solve_pipeline(replace(stage_pipe(2, 4), stage_layers=layers), schedule="1f1b"))
    with pytest.raises(PlanError, match=r"layer 'block0.qkv' of stage 0 is not in the model \(its layers: embed, "
                                        r"block0.attn, block0.mlp"):  # fmt: skip
        prepare(RunConfig(doc, GPT), 2)
