"""Concurrency control: the performance models, the operation graph, the five strategies and the
simulated benchmark (the torch executor is tested in test_executor.py)."""

import numpy as np
import pytest

from layersched.methods.concurrency import experiment
from layersched.methods.concurrency.opgraph import LayerOps, op_graph, thread_grid
from layersched.methods.concurrency.perfmodel import GRAIN, AnalyticModel, CpuSpec, ThreadModel, fit
from layersched.methods.concurrency.strategies import STRATEGIES, bound, compare
from solvers import validate


def test_fit_recovers_an_exact_model_and_reports_leave_one_out_error():
    true = ThreadModel(a=2e-5, b=1e-3, c=3e-6)
    samples = {k: true.time(k) for k in (1, 2, 3, 4, 8)}
    m = fit(samples)
    assert m.a == pytest.approx(true.a, rel=1e-6) and m.b == pytest.approx(true.b, rel=1e-6)
    assert m.c == pytest.approx(true.c, rel=1e-6) and m.loo_error < 1e-6
    noisy = fit({k: t * (1.1 if k == 3 else 1.0) for k, t in samples.items()})
    assert noisy.loo_errors[3] > 0.05 and set(noisy.loo_errors) == set(samples)
    assert fit({1: 1.0, 2: 0.6}).loo_errors == {}  # too few counts to leave one out
    with pytest.raises(ValueError, match="at least 1"):
        fit({0: 1.0})


def test_analytic_model_scales_until_bandwidth_and_overhead_bind():
    cpu = CpuSpec("t", 16, core_flops=1e9, core_bandwidth=1e9, memory_bandwidth=4e9, launch=0.0, fork_join=1e-6)
    compute = AnalyticModel(flops=1e9, moved=0.0, cpu=cpu)
    assert compute.time(1) == pytest.approx(1.0) and compute.time(4) == pytest.approx(0.25 + 3e-6)
    memory = AnalyticModel(flops=0.0, moved=4e9, cpu=cpu)
    assert memory.time(4) == pytest.approx(1.0 + 3e-6) and memory.time(8) > memory.time(4)  # the socket binds
    assert memory.best_threads(16) == 4
    small = AnalyticModel(flops=1e6, moved=1e3, cpu=cpu, values=GRAIN - 1)
    assert small.time(16) == small.time(1)  # PyTorch runs it on one thread


def _graph(microbatches=3, cores=8):
    m = ThreadModel(a=2e-6, b=40e-6, c=1e-6)
    layers = [LayerOps("l0", m, None, m, m), LayerOps("l1", m, m, m, m), LayerOps("act", m, m, None, None)]
    return op_graph(layers, microbatches=microbatches, cores=cores)


def test_the_operation_graph_has_the_edges_that_constrain_execution():
    g = _graph()
    idx = {n: i for i, n in enumerate(g.names)}
    edges = {(g.names[u], g.names[v]) for u, v in g.problem.edges.tolist()}
    assert g.threads == thread_grid(8) == (1, 2, 4, 8)
    assert "l0.I0" not in idx and "act.W0" not in idx and "act.U" not in idx  # no input grad, no weights
    assert ("l0.F1", "l1.F1") in edges and ("act.F2", "act.I2") in edges  # forward chain, loss
    assert ("act.I0", "l1.I0") in edges and ("act.I0", "l1.W0") in edges  # output gradient feeds I and W
    assert ("l1.I0", "l0.W0") in edges
    assert ("l1.W0", "l1.W1") in edges and ("l1.W1", "l1.W2") in edges  # one gradient buffer
    assert ("l1.W2", "l1.U") in edges and all((f"l1.I{b}", "l1.U") in edges for b in range(3))
    assert g.problem.num_tasks == 3 * (3 + 2 + 2) + 2
    m = ThreadModel(a=2e-6, b=40e-6, c=1e-6)
    assert g.problem.mode_duration[idx["l1.F0"]].tolist() == [round(m.time(k) * 1e9) for k in g.threads]
    with pytest.raises(ValueError, match="only the first may lack it"):
        op_graph([LayerOps("a", m, None, m, m), LayerOps("b", m, None, m, m)], microbatches=1, cores=2)


def test_every_strategy_is_valid_and_cp_sat_is_the_best_and_above_the_bound():
    g = _graph()
    plans = compare(g, time_limit=5)
    assert [p.name for p in plans] == list(STRATEGIES)
    for p in plans:
        validate(g.problem, p.schedule)
        assert p.makespan == p.schedule.makespan(g.problem) >= bound(g)
    assert plans[-1].makespan <= min(p.makespan for p in plans[:-1])
    # the default runs one operation at a time on all cores: the sum of those durations
    all_cores = g.problem.mode_duration[:, g.mode_of(8)]
    assert plans[0].makespan == int(all_cores.sum())
    assert set(np.asarray(plans[0].schedule.cores(g.problem)).tolist()) == {8}


def test_the_simulated_benchmark_table(monkeypatch, tmp_path):
    monkeypatch.setattr(experiment, "CPUS", {2: experiment.CPUS[2], 16: experiment.CPUS[16]})
    full = experiment.models()
    monkeypatch.setattr(experiment, "models", lambda: {"mlp (examples)": full["mlp (examples)"]})
    result = experiment.run(tmp_path, quick=True)
    assert result.title.endswith("concurrency") and len(result.rows) == 2
    for row in result.rows:
        values = [row[f"{s}_ms"] for s in STRATEGIES]
        assert min(values) >= row["bound_ms"] and row["cpsat_ms"] == min(values) and 0 <= row["gap"] < 1
