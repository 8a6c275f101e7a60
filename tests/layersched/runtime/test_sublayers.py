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


def test_tied_weights_across_stages_are_refused_by_torchs_runtime():
    from dataclasses import replace

    from tests.layersched.runtime.test_runner import BROKEN, stage_pipe

    tied = f"{BROKEN}:tied_gpt"
    apart = [["embed", "block0", "block1"], ["block2", "block3", "head"]]
    doc = schedule_file(solve_pipeline(replace(stage_pipe(2, 4), stage_layers=apart), schedule="1f1b"))
    with pytest.raises(PlanError, match=r"parameter embed.tokens.weight of stage 0 is shared with head.out.weight "
                                        r"of stage 1 \(tied weights\); torch's runtime"):  # fmt: skip
        prepare(RunConfig(doc, tied, runtime="torch"), 2)
    assert len(prepare(RunConfig(doc, tied), 2).tied) == 1  # ours keeps the copies in step (next test)


@pytest.mark.parametrize(
    "ranks,replicas,placement,clip",
    [
        pytest.param(2, 1, None, None, marks=pytest.mark.slow),
        (2, 2, None, 0.5),
        (2, 1, "v", 0.5),
        pytest.param(3, 1, None, 0.5, marks=pytest.mark.slow),
    ],
)
def test_weights_tied_across_stages_train_as_the_reference(ranks, replicas, placement, clip):
    """GPT-2's tie (token embedding = output projection) split over stages: every rank holding a copy
    sums its gradient with the others' before the step (Megatron's rule), also over replicas, with the
    gradients' norm counting it once; with a V the tied stages share one rank and one tensor."""
    from dataclasses import replace

    from layersched.runtime.launch import launch_jobs
    from layersched.runtime.runner import train_reference
    from tests.layersched.runtime.test_runner import BROKEN, stage_pipe

    tied = f"{BROKEN}:tied_gpt"
    names = ["embed", "block0", "block1", "block2", "block3", "head"]
    per = {2: [names[:2], names[2:3], names[3:4], names[4:]], 3: [names[:2], names[2:4], names[4:]]}
    layers = per[3] if ranks == 3 else (per[2] if placement == "v" else [names[:3], names[3:]])
    pipe = stage_pipe(ranks, 4, stages_per_rank=len(layers) // ranks, data_parallel=replicas)
    template = "zb-v" if placement == "v" else "1f1b"  # zb-v: stages 0 and 3 (embed, head) on rank 0
    doc = schedule_file(solve_pipeline(replace(pipe, stage_layers=layers), schedule=template))
    cfg = RunConfig(doc, tied, steps=2, lr=0.05, momentum=0.9, trace=False, clip_grad_norm=clip)
    [results] = launch_jobs([cfg], timeout=300)
    ref, _ = train_reference(tied, 4 * replicas, steps=2, lr=0.05, momentum=0.9, clip_grad_norm=clip)
    for r in results:
        for name, value in r.params.items():
            torch.testing.assert_close(value, ref[name], rtol=1e-5, atol=1e-10, msg=name)
    copies = [r.params[k] for r in results for k in ("embed.tokens.weight", "head.out.weight") if k in r.params]
    assert len(copies) >= 2 and all(torch.equal(c, copies[0]) for c in copies)  # the copies stayed one


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
