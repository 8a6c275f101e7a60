"""Asynchronous pipeline training (single-process emulation): stale, stashed, SpecTrain."""

import copy

import pytest

torch = pytest.importorskip("torch")

from layersched.methods.spectrain.asyncpipe import (  # noqa: E402
    MODES,
    Task,
    teacher_student,
    train,
    version_lags,
    weight_memory,
)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_version_lags_follow_the_1f1b_schedule(p):
    # rank s runs p - s warm-up forwards: forward i follows the backwards of 0 .. i - (p - s)
    assert version_lags(p) == [p - 1 - s for s in range(p)]


def plain_sgd(task: Task, steps: int, lr: float, momentum: float) -> tuple[torch.nn.Sequential, list[float]]:
    """``task``'s stages trained as one network with ``torch.optim.SGD``, one mini-batch per step:
    the trained network and the per-step losses."""
    net = torch.nn.Sequential(*(copy.deepcopy(m) for m in task.stages))
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    losses = []
    for i in range(steps):
        x, y = task.batch(i)
        opt.zero_grad()
        loss = task.loss_fn(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return net, losses


def _final_weights(task, mode, steps, **kw):
    """Train and return the final weights (by re-running evaluate's view of the stages)."""
    import layersched.methods.spectrain.asyncpipe as ap

    seen = {}
    orig = ap.evaluate

    def spy(stages, t):
        seen["w"] = [w for _, st in stages for w in st.values()]
        return orig(stages, t)

    ap.evaluate = spy
    try:
        hist = train(task, mode, steps, eval_every=steps, **kw)
    finally:
        ap.evaluate = orig
    return seen["w"], hist


def test_sync_mode_equals_plain_training_exactly():
    task = teacher_student(seed=3, batch_size=16)
    net, ref_losses = plain_sgd(task, 12, 0.05, 0.9)
    ref = [p.detach() for p in net.parameters()]
    got, hist = _final_weights(task, "sync", 12, lr=0.05, momentum=0.9)
    assert hist.loss == ref_losses
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    # the task's own modules are left untouched
    assert torch.equal(task.stages[0][0].weight, teacher_student(seed=3).stages[0][0].weight)


@pytest.mark.parametrize("mode", MODES)
def test_without_staleness_every_mode_is_synchronous(mode):
    task = teacher_student(seed=1, batch_size=8)
    ref, _ = _final_weights(task, "sync", 8)
    got, _ = _final_weights(task, mode, 8, lags=[0, 0, 0, 0])
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))


def _one_linear(lag):
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(3, 2).double()
    xs = [torch.randn(4, 3, generator=g, dtype=torch.float64) for _ in range(3)]
    ys = [torch.randn(4, 2, generator=g, dtype=torch.float64) for _ in range(3)]
    task = Task([lin], torch.nn.functional.mse_loss, lambda i: (xs[i], ys[i]), (xs[0], ys[0]))
    return task, lin, xs, ys


def _grad(lin, w, x, y):
    w = {k: v.detach().requires_grad_() for k, v in w.items()}
    loss = torch.nn.functional.mse_loss(torch.func.functional_call(lin, w, (x,)), y)
    return dict(zip(w, torch.autograd.grad(loss, list(w.values())), strict=True))


def test_stash_computes_the_gradient_at_the_stashed_version_and_applies_it_to_the_current():
    task, lin, xs, ys = _one_linear(1)
    lr, mu = 0.1, 0.9
    w0 = {k: v.detach().clone() for k, v in lin.named_parameters()}
    g0 = _grad(lin, w0, xs[0], ys[0])
    w1 = {k: w0[k] - lr * g0[k] for k in w0}
    g1 = _grad(lin, w0, xs[1], ys[1])  # mini-batch 1 runs forward and backward on version 0
    v1 = {k: mu * g0[k] + g1[k] for k in w0}
    w2 = {k: w1[k] - lr * v1[k] for k in w0}
    got, _ = _final_weights(task, "stash", 2, lr=lr, momentum=mu, lags=[1])
    assert all(torch.allclose(a, w2[k], atol=1e-15) for a, k in zip(got, w0, strict=True))
    # with no stashing the backward uses the current weights: on a first stage (its input is the
    # data) that is exactly synchronous training, whatever the lag
    stale, _ = _final_weights(task, "stale", 3, lr=lr, momentum=mu, lags=[1])
    sync, _ = _final_weights(task, "sync", 3, lr=lr, momentum=mu)
    assert all(torch.equal(a, b) for a, b in zip(stale, sync, strict=True))


def test_spectrain_forward_uses_the_predicted_weights():
    task, lin, xs, ys = _one_linear(1)
    lr, mu = 0.1, 0.9
    hist = train(task, "spectrain", 3, lr=lr, momentum=mu, lags=[1], eval_every=3)
    w0 = {k: v.detach().clone() for k, v in lin.named_parameters()}

    def loss(w, i):
        return float(torch.nn.functional.mse_loss(torch.func.functional_call(lin, w, (xs[i],)), ys[i]))

    g0 = _grad(lin, w0, xs[0], ys[0])
    w1 = {k: w0[k] - lr * g0[k] for k in w0}  # version 1, momentum v1 = g0
    # step 1's forward sees version 0, which has no momentum yet: nothing to predict with
    assert hist.loss[1] == pytest.approx(loss(w0, 1), abs=1e-14)
    # step 2's forward sees version 1, predicted one version ahead: W1 - 1 * lr * v1
    assert hist.loss[2] == pytest.approx(loss({k: w1[k] - lr * g0[k] for k in w0}, 2), abs=1e-14)
    assert hist.loss[2] != pytest.approx(loss(w1, 2), abs=1e-6)


def test_weight_memory_per_stage():
    rows = weight_memory(teacher_student())
    assert [r["lag"] for r in rows] == [3, 2, 1, 0]
    sizes = [(32 * 64 + 64) * 8, (64 * 64 + 64) * 8, (64 * 64 + 64) * 8, (64 * 10 + 10) * 8]
    assert [r["weights"] for r in rows] == sizes
    assert [r["stash_extra"] for r in rows] == [3 * sizes[0], 2 * sizes[1], sizes[2], 0]
    assert [r["spectrain_extra"] for r in rows] == [sizes[0], sizes[1], sizes[2], 0]


def test_unknown_mode():
    with pytest.raises(ValueError, match="valid: sync, stale, stash, spectrain"):
        train(teacher_student(), "pipedream", 1)


@pytest.mark.slow
def test_bench_spectrain_closes_most_of_the_gap(tmp_path):
    from layersched.cli.bench import run_bench

    res = run_bench("spectrain", tmp_path, quick=False)
    rows = {r["mode"]: r for r in res.rows}
    assert rows["sync"]["test_loss"] < rows["stale"]["test_loss"]
    assert rows["spectrain"]["accuracy_gap_closed"] > 0.5 and rows["spectrain"]["loss_gap_closed"] > 0.5
    assert rows["spectrain"]["test_loss"] < rows["stash"]["test_loss"] < rows["stale"]["test_loss"]
    assert (tmp_path / "spectrain.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_spectrain_quick_writes_table_and_plot(tmp_path):
    from layersched.cli.bench import run_bench

    res = run_bench("spectrain", tmp_path, quick=True)
    assert [r["mode"] for r in res.rows] == list(MODES)
    assert res.rows[0]["loss_gap_closed"] == 1.0 and res.rows[1]["loss_gap_closed"] == 0.0
    assert (tmp_path / "spectrain.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "spectrain.csv").exists()
