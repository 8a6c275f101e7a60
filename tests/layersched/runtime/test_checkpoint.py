"""Checkpoints with torch.distributed.checkpoint: a run resumed from one continues exactly as the
uninterrupted run (bit for bit), pipelined and data-parallel, with an optimizer and a schedule."""

import pytest

torch = pytest.importorskip("torch")

from layersched.formats.export import save_json, schedule_file  # noqa: E402
from layersched.runtime.launch import launch_jobs  # noqa: E402
from layersched.runtime.plan import PlanError  # noqa: E402
from layersched.runtime.runner import RunConfig, check_against_reference, prepare  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from tests.layersched.runtime.test_runner_plan import stage_pipe  # noqa: E402
from tests.paths import EXAMPLES  # noqa: E402

MLP = f"{EXAMPLES / 'models.py'}:mlp"
TRAINING = {
    "lr": 0.01,
    "optimizer": "AdamW",
    "optimizer_args": {"weight_decay": 0.1},
    "lr_schedule": "steplr",
    "lr_schedule_args": {"step_size": 1, "gamma": 0.5},
}


@pytest.mark.parametrize(
    "ranks,replicas,template", [pytest.param(2, 1, "1f1b-split", marks=pytest.mark.slow), (2, 2, "1f1b")]
)
def test_a_resumed_run_continues_exactly(tmp_path, ranks, replicas, template):
    doc = schedule_file(solve_pipeline(stage_pipe(ranks, 4, data_parallel=replicas), schedule=template))
    ckpt = tmp_path / "ckpt"
    whole = RunConfig(doc, MLP, steps=4, trace=False, **TRAINING)
    first = RunConfig(doc, MLP, steps=2, trace=False, checkpoint=str(ckpt), **TRAINING)
    straight, halfway = launch_jobs([whole, first], timeout=300)
    assert (ckpt / ".metadata").is_file() and not (tmp_path / "ckpt.partial").exists()
    second = RunConfig(doc, MLP, steps=2, trace=False, resume=str(ckpt), **TRAINING)
    (resumed,) = launch_jobs([second], timeout=300)
    by_rank = {r.rank: r for r in straight}
    for r in resumed:
        assert r.first_step == 2
        for name, value in r.params.items():
            assert torch.equal(value, by_rank[r.rank].params[name]), name  # bit for bit
        if r.losses is not None:
            assert r.losses == by_rank[r.rank].losses[2:]
    ok, worst, _ = check_against_reference(second, resumed)  # the reference trains all 4 steps
    assert ok, worst
    half = {r.rank: r for r in halfway}
    assert any(not torch.equal(v, half[r.rank].params[k]) for r in resumed for k, v in r.params.items())


def test_a_resumed_run_with_dropout_continues_exactly(tmp_path):
    """Dropout draws random numbers on every rank. Each rank's generator starts from the run's seed
    (``--seed``, default 0) plus its rank, so 4 steps straight and 2 + 2 from a checkpoint draw the
    same masks: they used to start from whatever torch's import gave the process (random in torch
    2.13), and a resumed run differed from the run never stopped. Another seed draws other masks."""
    doc = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))
    ckpt = tmp_path / "ckpt"
    opts = {"model_options": {"dropout": 0.5}, "trace": False}
    whole, other = (RunConfig(doc, MLP, steps=4, seed=s, **opts) for s in (0, 1))
    first = RunConfig(doc, MLP, steps=2, checkpoint=str(ckpt), **opts)
    straight, reseeded, _ = launch_jobs([whole, other, first], timeout=300)
    (resumed,) = launch_jobs([RunConfig(doc, MLP, steps=2, resume=str(ckpt), **opts)], timeout=300)
    by_rank = {r.rank: r for r in straight}
    for r in resumed:
        for name, value in r.params.items():
            assert torch.equal(value, by_rank[r.rank].params[name]), name
    assert not check_against_reference(whole, straight)[0]  # dropout's draws matter here
    other_rank = {r.rank: r for r in reseeded}
    assert any(not torch.equal(v, other_rank[r.rank].params[k]) for r in straight for k, v in r.params.items())


@pytest.mark.slow
def test_checkpoint_every_n_steps_keeps_the_last(tmp_path):
    doc = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))
    ckpt = tmp_path / "every"
    (results,) = launch_jobs(
        [RunConfig(doc, MLP, steps=3, trace=False, checkpoint=str(ckpt), checkpoint_every=2)], timeout=300
    )
    (resumed,) = launch_jobs([RunConfig(doc, MLP, steps=1, trace=False, resume=str(ckpt))], timeout=300)
    assert {r.first_step for r in resumed} == {3}  # the save at the end (step 3) replaced the one at step 2


def test_checkpoint_options_are_checked_before_any_process(tmp_path):
    doc = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))
    with pytest.raises(PlanError, match="need runtime 'layersched'"):
        prepare(RunConfig(doc, MLP, runtime="torch", checkpoint=str(tmp_path / "c")), 2)
    with pytest.raises(PlanError, match=r"--resume .*: not a checkpoint \(no .metadata\)"):
        prepare(RunConfig(doc, MLP, resume=str(tmp_path)), 2)
    with pytest.raises(PlanError, match="--checkpoint-every N"):
        prepare(RunConfig(doc, MLP, checkpoint_every=2), 2)
    (tmp_path / "file").write_text("x")
    with pytest.raises(PlanError, match="a file is in the way"):
        prepare(RunConfig(doc, MLP, checkpoint=str(tmp_path / "file")), 2)


def test_a_checkpoint_of_another_split_or_optimizer_is_refused(tmp_path):
    doc = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))
    ckpt = tmp_path / "c"
    launch_jobs([RunConfig(doc, MLP, steps=1, trace=False, checkpoint=str(ckpt))], timeout=300)
    with pytest.raises(PlanError, match="saved with optimizer 'sgd', this run has 'adamw'"):
        prepare(RunConfig(doc, MLP, resume=str(ckpt), optimizer="adamw"), 2)


def test_the_run_command_saves_and_resumes(tmp_path, capsys):
    from layersched.cli.run import main as run_main

    path = tmp_path / "s.json"
    save_json(schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b")), path)
    ckpt = str(tmp_path / "ck")
    args = [str(path), "--model", MLP, "--no-trace", "--steps", "1"]
    assert run_main([*args, "--checkpoint", ckpt]) == 0
    assert "wrote checkpoint" in capsys.readouterr().out
    assert run_main([*args, "--resume", ckpt, "--check"]) == 0
    out = capsys.readouterr().out
    assert "\n    1 " in out and "rtol 1e-5: pass" in out  # step 1 (the second), checked against 2 steps


@pytest.mark.slow
def test_fp16_resume_keeps_the_loss_scale(tmp_path):
    """The loss scale backs off on overflow; a resumed fp16 run starts from the saved scale, so it
    continues exactly (from 2^60 the first steps are skipped; the scale then halves)."""
    doc = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))
    amp = {"trace": False, "precision": "fp16", "loss_scale": 2.0**20, "model_options": {"dtype": torch.float32}}
    ckpt = tmp_path / "c"
    straight, _ = launch_jobs(
        [RunConfig(doc, MLP, steps=3, **amp), RunConfig(doc, MLP, steps=1, checkpoint=str(ckpt), **amp)], timeout=300
    )
    (resumed,) = launch_jobs([RunConfig(doc, MLP, steps=2, resume=str(ckpt), **amp)], timeout=300)
    by_rank = {r.rank: r for r in straight}
    for r in resumed:
        for name, value in r.params.items():
            assert torch.equal(value, by_rank[r.rank].params[name]), name


def test_a_gpu_rank_saves_and_restores_its_gpu_generator(tmp_path, monkeypatch):
    """On a GPU, dropout draws from the GPU's generator, so a checkpoint keeps its state too
    (``cuda_rng.rank{r}``) and a resumed rank sets it back; a checkpoint written on the CPU resumes on
    a GPU without it (the generator keeps the run's seed). The GPU's generator is stood in for here,
    on a machine without one, by a byte tensor; on a GPU, benchmarks/gpu_cli_check.sh resumes a run."""
    import warnings
    from types import SimpleNamespace

    from layersched.runtime import checkpoint

    doc = schedule_file(solve_pipeline(stage_pipe(2, 4), schedule="1f1b"))
    gpu = {"state": torch.arange(16, dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: gpu["state"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: gpu.update(state=state.clone()))

    def rank(device: str):
        cfg = RunConfig(doc, MLP)
        return SimpleNamespace(cfg=cfg, stage_layers=[["fc0"], ["fc1"]], rank=0, scaler=None, stages={},
                               optimizers={}, schedules={}, device=torch.device(device))  # fmt: skip

    def save(ex, path):
        with warnings.catch_warnings():  # one process, no group: DCP says it assumes that
            warnings.simplefilter("ignore", UserWarning)
            torch.distributed.checkpoint.save(checkpoint._state(ex, 3), checkpoint_id=str(path))

    def load(ex, path):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return checkpoint.load(ex, path)

    save(rank("cuda"), tmp_path / "gpu")
    gpu["state"] = torch.zeros(16, dtype=torch.uint8)  # the generator moved on
    assert load(rank("cuda"), tmp_path / "gpu") == 3
    assert torch.equal(gpu["state"], torch.arange(16, dtype=torch.uint8))  # set back
    save(rank("cpu"), tmp_path / "cpu")
    gpu["state"] = torch.ones(16, dtype=torch.uint8)
    assert load(rank("cuda"), tmp_path / "cpu") == 3
    assert torch.equal(gpu["state"], torch.ones(16, dtype=torch.uint8))  # left as the seed made it
