"""Any torch.optim optimizer with its options, and learning-rate schedules, in a run: the parameters
equal the single-process reference trained with the same optimizer and schedule."""

import pytest

torch = pytest.importorskip("torch")

from layersched.formats.export import save_json, schedule_file  # noqa: E402
from layersched.runtime.launch import launch_jobs  # noqa: E402
from layersched.runtime.plan import PlanError  # noqa: E402
from layersched.runtime.runner import RunConfig, prepare, train_reference  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from tests.layersched.runtime.test_runner_plan import stage_pipe  # noqa: E402
from tests.paths import EXAMPLES  # noqa: E402

MLP = f"{EXAMPLES / 'models.py'}:mlp"
STEPS, LR = 3, 0.01
TRAINING = {
    "optimizer": "AdamW",
    "optimizer_args": {"weight_decay": 0.1, "betas": (0.9, 0.95)},
    "lr_schedule": "steplr",
    "lr_schedule_args": {"step_size": 1, "gamma": 0.5},
}


@pytest.mark.parametrize("runtime", ["layersched", "torch"])
def test_adamw_with_weight_decay_and_a_schedule_equals_the_reference(runtime):
    pipelined = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))  # 2 ranks x 1 replica
    replicated = schedule_file(solve_pipeline(stage_pipe(1, 2, data_parallel=2), schedule="1f1b"))  # 1 x 2
    jobs = [RunConfig(doc, MLP, steps=STEPS, lr=LR, runtime=runtime, **TRAINING) for doc in (pipelined, replicated)]
    for job, results in zip(jobs, launch_jobs(jobs, timeout=300), strict=True):
        p = job.schedule.pipeline
        ref, _ = train_reference(MLP, p.num_microbatches * p.data_parallel, steps=STEPS, lr=LR, **TRAINING)
        for r in results:
            for name, value in r.params.items():
                torch.testing.assert_close(value, ref[name], rtol=1e-5, atol=1e-10, msg=name)
    sgd, _ = train_reference(MLP, p.num_microbatches * p.data_parallel, steps=STEPS, lr=LR)
    assert not torch.allclose(sgd["fc0.0.weight"], ref["fc0.0.weight"])  # the optimizer made a difference


def test_bad_optimizer_names_and_arguments_are_one_line_before_any_process():
    doc = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))
    with pytest.raises(PlanError, match=r"--optimizer 'adamx': not a torch.optim optimizer; valid: .*AdamW"):
        prepare(RunConfig(doc, MLP, optimizer="adamx"), 2)
    with pytest.raises(PlanError, match="--optimizer adamw: .*weight_decai"):
        prepare(RunConfig(doc, MLP, optimizer="adamw", optimizer_args={"weight_decai": 0.1}), 2)
    with pytest.raises(PlanError, match="--lr-schedule 'cosine': not a learning-rate schedule") as err:
        prepare(RunConfig(doc, MLP, lr_schedule="cosine"), 2)
    assert "StepLR" in str(err.value) and "_LRScheduler" not in str(err.value)  # no private alias offered


def test_the_run_command_takes_optimizer_options(tmp_path, capsys):
    from layersched.cli.run import main as run_main

    path = tmp_path / "s.json"
    save_json(schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b")), path)
    args = [str(path), "--model", MLP, "--steps", "2", "--no-trace", "--optimizer", "adamw"]
    assert run_main([*args, "--optimizer-arg", "weight_decay=0.1", "--lr-schedule", "StepLR",
                     "--lr-schedule-arg", "step_size=1"]) == 0  # fmt: skip
    assert run_main([*args, "--optimizer-arg", "weight_decay"]) == 2
    assert "expected KEY=VALUE, e.g. weight_decay=0.1" in capsys.readouterr().err


def test_check_compares_the_run_with_one_process(tmp_path, capsys, monkeypatch):
    from layersched.cli.run import main as run_main
    from layersched.runtime import runner

    path = tmp_path / "s.json"
    save_json(schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="zb-h1")), path)
    args = [str(path), "--model", MLP, "--steps", "2", "--no-trace", "--check", "--optimizer", "adam"]
    assert run_main(args) == 0
    assert "check against one process: largest parameter difference" in capsys.readouterr().out
    real = runner.train_reference

    def off(*a, **k):  # a reference that disagrees: the check must say so
        params, losses = real(*a, **k)
        return {n: v + 1e-3 if n == "fc7.weight" else v for n, v in params.items()}, losses

    monkeypatch.setattr(runner, "train_reference", off)
    assert run_main(args) == 1
    out = capsys.readouterr().out
    assert "(fc7.weight); rtol 1e-5: FAIL" in out


@pytest.mark.parametrize("runtime", ["layersched", "torch"])
def test_gradient_clipping_over_all_stages_equals_the_reference(runtime):
    """The norm is taken over every stage (all-reduced over the pipeline ranks), as clip_grad_norm_
    on the whole model: 4 pipeline ranks, and 2 ranks x 2 replicas."""
    clip = {"clip_grad_norm": 0.05}
    jobs = [
        RunConfig(schedule_file(solve_pipeline(stage_pipe(r, 2 * r, data_parallel=d), schedule="1f1b")), MLP,
                  steps=STEPS, lr=0.1, runtime=runtime, **clip)
        for r, d in ((4, 1), (2, 2))
    ]  # fmt: skip
    for job, results in zip(jobs, launch_jobs(jobs, timeout=300), strict=True):
        p = job.schedule.pipeline
        ref, _ = train_reference(MLP, p.num_microbatches * p.data_parallel, steps=STEPS, lr=0.1, **clip)
        for r in results:
            for name, value in r.params.items():
                torch.testing.assert_close(value, ref[name], rtol=1e-5, atol=1e-10, msg=name)
    free, _ = train_reference(MLP, p.num_microbatches * p.data_parallel, steps=STEPS, lr=0.1)
    assert not torch.allclose(free["fc0.0.weight"], ref["fc0.0.weight"])  # 0.05 did clip


def test_a_misspelt_model_arg_is_refused_naming_what_the_builder_takes(tmp_path, capsys, monkeypatch):
    """`load_workload` passes a builder only the options it takes, so `--model-arg widht=64` used to run
    the default width without a word. Now the run is refused before any rank starts, with the likely
    name; a builder with ``**kwargs`` takes any key."""
    import layersched.runtime.launch as launch
    from layersched.cli.run import main as run_main
    from layersched.runtime.workload import check_options

    started = []
    monkeypatch.setattr(launch, "launch_jobs", lambda *a, **k: started.append(1))
    path = tmp_path / "s.json"
    save_json(schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b")), path)
    assert run_main([str(path), "--model", MLP, "--steps", "1", "--no-trace", "--model-arg", "widht=64"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"layersched.run: error: model {MLP}: the builder takes no option 'widht'; did you mean 'width'? it takes "
        "microbatch_size, width, depth, dtype, seed, dropout"
    )
    assert not started
    with pytest.raises(PlanError, match="takes no option 'nope'; it takes microbatch_size, width"):
        check_options(MLP, ["depth", "nope"])
    check_options(MLP, ["width", "depth", "dropout"])  # every key it takes passes
    check_options(lambda microbatch_size=1, **rest: None, ["anything"])  # **kwargs takes any key


def test_model_args_name_torch_dtypes_and_the_trace_has_the_losses(tmp_path, capsys):
    import json

    from layersched.cli.options import keywords
    from layersched.cli.run import main as run_main
    from layersched.runtime.workload import _dtype

    options = keywords(["dtype=torch.bfloat16", "name=torch.nothing", "depth=4"], "--model-arg", "depth=4")
    assert {k: _dtype(v) for k, v in options.items()} == {"dtype": torch.bfloat16, "name": "torch.nothing", "depth": 4}
    path, trace = tmp_path / "s.json", tmp_path / "t.json"
    save_json(schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b")), path)
    args = [str(path), "--model", MLP, "--steps", "2", "--trace", str(trace), "--model-arg", "dtype=torch.float32"]
    assert run_main(args) == 0
    ranks = json.loads(trace.read_text())["ranks"]
    last = next(r for r in ranks if r["pipeline_rank"] == 1)
    assert len(last["losses"]) == 2 and all(x > 0 for x in last["losses"])
    assert next(r for r in ranks if r["pipeline_rank"] == 0)["losses"] is None
