"""Mixed precision: bf16 and fp16 autocast (fp16 with a dynamic loss scale agreed by every rank)
equal the single-process reference run with torch.autocast and torch.amp.GradScaler."""

import pytest

torch = pytest.importorskip("torch")

from layersched.formats.export import schedule_file  # noqa: E402
from layersched.runtime.launch import launch_jobs  # noqa: E402
from layersched.runtime.plan import PlanError  # noqa: E402
from layersched.runtime.runner import RunConfig, prepare, train_reference  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from tests.layersched.runtime.test_runner_plan import stage_pipe  # noqa: E402
from tests.paths import EXAMPLES  # noqa: E402

MLP = f"{EXAMPLES / 'models.py'}:mlp"
STEPS = 3
F32 = {"dtype": torch.float32}  # autocast lowers float32 operations (the example's default is float64)


def _docs():
    return [
        schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b-split")),  # 2 ranks x 1 replica
        schedule_file(solve_pipeline(stage_pipe(1, 2, data_parallel=2), schedule="1f1b")),  # 1 x 2
    ]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_runs_equal_the_reference(precision):
    docs = _docs()
    settings = {"model_options": F32, "trace": False, "precision": precision, "clip_grad_norm": 1.0}
    jobs = [RunConfig(doc, MLP, steps=STEPS, **settings) for doc in docs]
    for job, results in zip(jobs, launch_jobs(jobs, timeout=300), strict=True):
        p = job.schedule.pipeline
        ref, losses = train_reference(
            MLP, p.num_microbatches * p.data_parallel, STEPS, model_options=F32, precision=precision, clip_grad_norm=1.0
        )
        for r in results:
            for name, value in r.params.items():
                torch.testing.assert_close(value, ref[name], rtol=1e-5, atol=1e-7, msg=name)
            if r.losses is not None and p.data_parallel == 1:  # a replica's loss covers its own micro-batches
                assert r.losses == pytest.approx(losses, rel=1e-5)
    fp32, _ = train_reference(MLP, 4, steps=STEPS, model_options=F32, clip_grad_norm=1.0)
    assert not torch.allclose(fp32["fc0.0.weight"], ref["fc0.0.weight"], rtol=0, atol=0)  # autocast made a difference


def test_fp16_overflow_skips_the_step_on_every_rank():
    """A loss scale of 2^60 overflows fp16 gradients: every rank skips, as GradScaler does, and the
    scale backs off; the parameters stay where the reference's stay."""
    doc = _docs()[0]
    job = RunConfig(doc, MLP, steps=2, model_options=F32, trace=False, precision="fp16", loss_scale=2.0**60)
    (results,) = launch_jobs([job])
    ref, _ = train_reference(MLP, 4, steps=2, model_options=F32, precision="fp16", loss_scale=2.0**60)
    start, _ = train_reference(MLP, 4, steps=0, model_options=F32)
    for r in results:
        for name, value in r.params.items():
            torch.testing.assert_close(value, ref[name], rtol=0, atol=0, msg=name)
            torch.testing.assert_close(value, start[name], rtol=0, atol=0, msg=name)  # both steps skipped


def test_precision_options_are_checked():
    doc = _docs()[0]
    with pytest.raises(PlanError, match="--precision 'fp8': valid: fp32, bf16, fp16"):
        prepare(RunConfig(doc, MLP, precision="fp8"), 2)
    with pytest.raises(PlanError, match="--precision bf16 needs runtime 'layersched'"):
        prepare(RunConfig(doc, MLP, precision="bf16", runtime="torch"), 2)
