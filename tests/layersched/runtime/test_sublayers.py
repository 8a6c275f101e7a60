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


def test_tied_weights_across_stages_are_refused_with_the_parameter_and_the_stages():
    from dataclasses import replace

    from tests.layersched.runtime.test_runner import BROKEN, stage_pipe

    tied = f"{BROKEN}:tied_gpt"
    apart = [["embed", "block0", "block1"], ["block2", "block3", "head"]]
    doc = schedule_file(solve_pipeline(replace(stage_pipe(2, 4), stage_layers=apart), schedule="1f1b"))
    with pytest.raises(PlanError, match=r"parameter embed.tokens.weight of stage 0 is shared with head.out.weight "
                                        r"of stage 1 \(tied weights\)"):  # fmt: skip
        prepare(RunConfig(doc, tied), 2)
    together = [["embed", "block0", "block1", "block2", "block3", "head"]]
    doc = schedule_file(solve_pipeline(replace(stage_pipe(1, 2), stage_layers=together), schedule="1f1b"))
    prepare(RunConfig(doc, tied), 1)  # one stage holds both: nothing to keep in step


def test_weights_tied_within_one_stage_train_as_the_reference():
    """Both tied layers in one stage: the stage updates the shared parameter once per step, as the
    single-process reference does."""
    from dataclasses import replace

    from layersched.runtime.launch import launch_jobs
    from layersched.runtime.runner import train_reference
    from tests.layersched.runtime.test_runner import BROKEN, stage_pipe

    tied = f"{BROKEN}:tied_gpt"
    together = [["embed", "block0", "block1", "block2", "block3", "head"]]
    doc = schedule_file(solve_pipeline(replace(stage_pipe(1, 2), stage_layers=together), schedule="1f1b"))
    [results] = launch_jobs([RunConfig(doc, tied, steps=2, lr=0.05, momentum=0.9)], timeout=300)
    ref, _ = train_reference(tied, 2, steps=2, lr=0.05, momentum=0.9)
    got = results[0].params
    torch.testing.assert_close(got["embed.tokens.weight"], ref["embed.tokens.weight"], rtol=1e-5, atol=1e-12)
