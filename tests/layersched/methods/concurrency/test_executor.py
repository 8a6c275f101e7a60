"""The CPU executor: every strategy's plan, run on worker threads with their own thread counts, gives
the gradients and parameters of the serial autograd reference; the trace matches the plan's tasks."""

import json

import pytest

torch = pytest.importorskip("torch")

from layersched.methods.concurrency.executor import (  # noqa: E402
    ExplicitMLP,
    batches,
    check_openmp,
    execute,
    mlp_graph,
    profile,
    reference_step,
    write_trace,
)
from layersched.methods.concurrency.perfmodel import ThreadModel  # noqa: E402
from layersched.methods.concurrency.strategies import compare  # noqa: E402

WIDTHS = [16, 24, 24, 8]


def _graph(net, cores=4, microbatches=3):
    model = ThreadModel(a=5e-6, b=60e-6, c=2e-6)
    models = {(k, l): model for k in "FIWU" for l in range(net.num_layers)}
    return mlp_graph(net, models, microbatches, cores)


def test_every_strategy_runs_and_equals_the_serial_reference(tmp_path):
    check_openmp()
    net = ExplicitMLP.random(WIDTHS, seed=3)
    data = batches(WIDTHS, 3, size=5, seed=4)
    ref, gw, gb = reference_step(net, data, lr=0.1)
    g = _graph(net)
    for plan in compare(g, time_limit=2):
        run = execute(g, plan.schedule, net, data, lr=0.1)
        for got, want in zip([*run.grad_w, *run.grad_b], [*gw, *gb], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-12)
        for got, want in zip([*run.net.weights, *run.net.biases], [*ref.weights, *ref.biases], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-12)
        assert sorted(r[0] for r in run.records) == list(range(g.problem.num_tasks))
        assert {r[2] for r in run.records} == set(plan.schedule.cores(g.problem).tolist())
    summary = write_trace(tmp_path / "trace.json", g, plan.schedule, run)
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert len(trace["traceEvents"]) == g.problem.num_tasks and trace["otherData"] == summary
    assert summary["measured_makespan_s"] > 0 and set(summary["measured_over_planned"]) == {"F", "I", "W", "U"}


def test_the_reference_differs_when_a_dependency_is_broken():
    """The comparison can fail: updating a layer's weights before its input gradients are computed
    (an order the validator forbids, forced here by running the tasks by hand) changes the result."""
    from layersched.methods.concurrency.executor import _Step

    net = ExplicitMLP.random(WIDTHS, seed=3)
    data = batches(WIDTHS, 1, size=5, seed=4)
    ref, _, _ = reference_step(net, data, lr=0.1)
    step = _Step(net.copy(), data, lr=0.1)
    L = net.num_layers
    for l in range(L):
        step.forward(l, 0)
    for l in reversed(range(L)):
        step.backward_weight(l, 0)
        step.update(l)  # too early: layer l's input gradient below still needs the old weights
        if l:
            step.backward_input(l, 0)
    assert not torch.allclose(step.net.weights[0], ref.weights[0], rtol=1e-5)


def test_a_plan_for_another_graph_is_refused():
    net = ExplicitMLP.random(WIDTHS)
    g = _graph(net, microbatches=2)
    plan = compare(g, time_limit=1)[0]
    with pytest.raises(ValueError, match="micro-batches"):
        execute(g, plan.schedule, net, batches(WIDTHS, 3, size=4))


def test_profiling_fits_a_model_per_pass_with_its_error():
    net = ExplicitMLP.random([64, 64, 64])
    models = profile(net, batches([64, 64, 64], 1, size=32), threads=(1, 2, 3), repeats=3)
    assert set(models) == {("F", 0), ("F", 1), ("I", 1), ("W", 0), ("W", 1), ("U", 0), ("U", 1)}
    for m in models.values():
        assert m.time(1) > 0 and set(m.loo_errors) == {1, 2, 3}


@pytest.mark.parametrize("cores, most", [(None, {1: 1, 2: 1, 4: 1}), (4, {1: 4, 2: 2, 4: 1})])
def test_a_co_running_profile_keeps_cores_over_k_passes_running(monkeypatch, cores, most):
    """With ``cores``, a pass timed on k threads runs beside ``cores // k - 1`` others of k threads
    (alone without it); the other threads have stopped when `profile` returns."""
    import threading
    import time

    import layersched.methods.concurrency.executor as ex

    lock, running, seen = threading.Lock(), [0], {}
    original = ex._Step.run

    def run(self, kind, l, b):
        k = torch.get_num_threads()
        with lock:
            running[0] += 1
            seen[k] = max(seen.get(k, 0), running[0])
        try:
            time.sleep(0.002)  # long enough for the others to be inside a pass too
            original(self, kind, l, b)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(ex._Step, "run", run)
    before = threading.active_count()
    net = ExplicitMLP.random([32, 32, 32])
    models = profile(net, batches([32, 32, 32], 1, size=8), threads=(1, 2, 4), repeats=3, cores=cores)
    assert seen == most
    assert threading.active_count() == before
    assert all(m.time(1) > 0 for m in models.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_streams_co_run_a_plan_and_equal_the_reference():
    net = ExplicitMLP.random(WIDTHS, seed=3)
    data = batches(WIDTHS, 3, size=5, seed=4)
    ref, gw, _ = reference_step(net, data, lr=0.1)
    g = _graph(net)
    plan = compare(g, time_limit=2)[-1]
    run = execute(g, plan.schedule, net, data, lr=0.1, device="cuda")
    for got, want in zip([*run.net.weights, *run.grad_w], [*ref.weights, *gw], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-12)


def test_cuda_without_a_device_is_one_line():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    net = ExplicitMLP.random(WIDTHS)
    g = _graph(net)
    with pytest.raises(RuntimeError, match="torch sees no CUDA device"):
        execute(g, compare(g, time_limit=1)[0].schedule, net, batches(WIDTHS, 3, size=4), device="cuda")
