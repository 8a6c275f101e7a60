"""Asynchronous pipeline training in real processes (`layersched.methods.spectrain.asyncrun`).

One launch of 4 ranks runs every mode in turn; each must reproduce the single-process emulation
`asyncpipe.train`, whose weight versions are computed by index, from versions that arise from the
order of the real run. A second, 2-rank launch runs the command line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from layersched.cli import asyncrun as cli_asyncrun  # noqa: E402
from layersched.methods.spectrain import asyncpipe, asyncrun  # noqa: E402
from layersched.methods.spectrain.asyncpipe import MODES, teacher_student, version_lags, weight_memory  # noqa: E402
from layersched.methods.spectrain.asyncrun import rank_orders, train_async, train_async_modes  # noqa: E402
from layersched.schedule.graph import parse_action  # noqa: E402
from tests.layersched.methods.spectrain.test_spectrain import plain_sgd  # noqa: E402

STAGES, STEPS, LR, MOMENTUM = 4, 10, 0.05, 0.9
OPTIONS = {"seed": 2, "batch_size": 8, "test_size": 64}
RTOL = 1e-10


@pytest.fixture(scope="module")
def runs():
    return train_async_modes(MODES, STEPS, num_stages=STAGES, lr=LR, momentum=MOMENTUM, task_options=OPTIONS)


def emulated(mode: str) -> tuple[asyncpipe.History, list[dict]]:
    """`asyncpipe.train`'s history and final weights (seen by its last `evaluate`)."""
    seen, orig = {}, asyncpipe.evaluate

    def spy(stages, task):
        seen["weights"] = [w for _, w in stages]
        return orig(stages, task)

    asyncpipe.evaluate = spy
    try:
        hist = asyncpipe.train(teacher_student(**OPTIONS), mode, STEPS, lr=LR, momentum=MOMENTUM, eval_every=STEPS)
    finally:
        asyncpipe.evaluate = orig
    return hist, seen["weights"]


def assert_weights_close(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)
        for k in w:
            torch.testing.assert_close(g[k], w[k], rtol=RTOL, atol=0)


def max_diff(a: list[dict], b: list[dict]) -> float:
    return max(float((x[k] - y[k]).abs().max()) for x, y in zip(a, b, strict=True) for k in x)


@pytest.mark.parametrize("mode", MODES)
def test_the_real_run_reproduces_the_emulation(runs, mode):
    run = runs[mode]
    hist, weights = emulated(mode)
    assert run.losses == pytest.approx(hist.loss, rel=RTOL, abs=0)
    assert_weights_close(run.weights, weights)
    test_loss, accuracy = run.evaluate()
    assert test_loss == pytest.approx(hist.test_loss[-1], rel=RTOL)
    assert accuracy == hist.test_accuracy[-1]


@pytest.mark.parametrize("mode", MODES)
def test_versions_arise_from_the_schedule(runs, mode):
    # the most mini-batches in flight at a forward, counted during the run, is the emulation's lag
    want = [0] * STAGES if mode == "sync" else version_lags(STAGES)
    assert [r.lag for r in runs[mode].ranks] == want


def test_sync_is_plain_sequential_sgd(runs):
    net, losses = plain_sgd(teacher_student(**OPTIONS), STEPS, LR, MOMENTUM)
    assert runs["sync"].losses == pytest.approx(losses, rel=RTOL, abs=0)
    want = [
        {k.split(".", 1)[1]: v.detach() for k, v in net.named_parameters() if k.startswith(f"{s}.")} for s in range(4)
    ]
    assert_weights_close(runs["sync"].weights, want)


def test_the_asynchronous_modes_differ(runs):
    # mini-batch 0 runs on the initial weights in every mode; from there on the versions differ
    sync, stale, stash, spec = (runs[m] for m in MODES)
    assert stale.losses[0] == spec.losses[0] == stash.losses[0] == pytest.approx(sync.losses[0], rel=RTOL)
    for a, b in ((stale, sync), (stash, stale), (spec, stale), (spec, stash)):
        assert max(abs(x - y) for x, y in zip(a.losses, b.losses, strict=True)) > 1e-6
        assert max_diff(a.weights, b.weights) > 1e-6


def test_weight_memory_of_stashing_and_prediction(runs):
    mem = weight_memory(teacher_student(**OPTIONS))
    for mode, result in runs.items():
        got = result.memory()
        assert [r["weights"] for r in got] == [r["weights"] for r in mem]
        extra = [0] * STAGES if mode == "sync" else [r[f"{mode}_extra"] for r in mem]
        assert [r["extra_weight_bytes"] for r in got] == extra, mode
        copies = [r["lag"] for r in mem] if mode == "stash" else [0] * STAGES
        assert [r["stash_copies"] for r in got] == copies, mode


def test_rank_reports(runs):
    for result in runs.values():
        assert [r.rank for r in result.ranks] == list(range(STAGES))
        assert all(r.losses is None for r in result.ranks[:-1])
        assert len(result.losses) == STEPS
        for r in result.ranks:
            assert len(r.step_times) == STEPS and all(t > 0 for t in r.step_times)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_rank_orders(p):
    steps = 7
    for mode in MODES:
        orders = rank_orders(mode, p, steps)
        assert len(orders) == p
        for s, order in enumerate(orders):
            acts = [parse_action(a) for a in order]
            assert {st for st, _, _ in acts} == {s}
            for kind in "FB":
                assert [i for _, k, i in acts if k == kind] == list(range(steps))
            warm = next(j for j, (_, k, _) in enumerate(acts) if k == "B") - 1
            assert warm == (0 if mode == "sync" else p - 1 - s)
            if mode == "sync":
                assert [k for _, k, _ in acts] == ["F", "B"] * steps


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "pipedream"}, "unknown mode 'pipedream'; valid: sync, stale, stash, spectrain"),
        ({"steps": 0}, "steps must be a positive integer, got 0"),
        ({"steps": 2.5}, "steps must be a positive integer"),
        ({"num_stages": 0}, "num_stages must be a positive integer"),
        ({"lr": 0.0}, "lr must be positive"),
        ({"momentum": -0.1}, "momentum must be >= 0"),
        ({"device": "tpu"}, "device 'tpu'"),
        ({"task_options": {"depth": 3}}, "task_options: unknown depth"),
        ({"task_options": {"num_stages": 3}}, "task_options num_stages=3 but num_stages=4"),
        ({"task_options": {"batch_size": -1}}, "task_options"),
    ],
)
def test_bad_arguments_fail_before_any_process_starts(monkeypatch, kwargs, message):
    def no_launch(*args, **kw):
        raise AssertionError("processes were started")

    monkeypatch.setattr(asyncrun, "run_processes", no_launch)
    args = {"mode": "stash", "steps": 3, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        train_async(args.pop("mode"), args.pop("steps"), **args)


def test_command_line(capsys):
    assert cli_asyncrun.main(["--mode", "stash", "--mode", "spectrain", "--stages", "2", "--steps", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    columns = [c.strip() for c in next(li for li in lines if li.count("┃") > 5).split("┃")[1:-1]]
    cells = [[c.strip() for c in li.split("│")[1:-1]] for li in lines if li.count("│") > 5]
    rows = {row[0]: dict(zip(columns, row, strict=True)) for row in cells}
    assert list(rows) == ["stash", "spectrain"]
    stage0 = weight_memory(teacher_student(num_stages=2))[0]["weights"]
    # stage 0 runs one version behind: it stashes one version, or predicts one copy
    assert rows["stash"]["stash copies per stage"] == "1/0"
    assert rows["stash"]["extra weight bytes per stage"] == rows["spectrain"]["extra weight bytes per stage"]
    assert rows["spectrain"]["extra weight bytes per stage"] == f"{stage0}/0"
    assert 0 <= float(rows["spectrain"]["test accuracy"]) <= 1


def test_command_line_bad_input(capsys, monkeypatch):
    monkeypatch.setattr(asyncrun, "run_processes", lambda *a, **k: pytest.fail("processes were started"))
    # checked when parsed (layersched.cli.options): argparse's one-line error, exit 2
    with pytest.raises(SystemExit) as exit_:
        cli_asyncrun.main(["--steps", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("error: argument --steps: must be at least 1, got 0")


def test_more_stages_than_the_memory_holds_are_one_line(capsys, monkeypatch):
    """--stages 5000 was pydantic's four-line report on a problem built inside; now the stages'
    processes are weighed against the memory available (`asyncrun.STAGE_BYTES` each) before any starts."""
    import layersched.schedule.budget as budget

    monkeypatch.setattr(asyncrun, "run_processes", lambda *a, **k: pytest.fail("processes were started"))
    monkeypatch.setattr(budget, "available_memory", lambda: 64 * 2**30)  # any machine short of 469 GiB
    assert cli_asyncrun.main(["--stages", "5000", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("asyncrun: error: 5,000 processes need about 468.75 GiB"), err
