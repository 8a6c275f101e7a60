"""Out-of-order backprop: data parallel, multi-stream and pipeline schedules, and the experiment."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layersched.describe.config import load_problem
from layersched.methods.ooo import dataparallel as dp
from layersched.methods.ooo import multistream as ms
from layersched.methods.ooo import pipeline as pp
from solvers import validate
from tests.paths import PROBLEMS


def uniform(L: int, t: int = 10, nbytes: int = 1000) -> dp.LayerCosts:
    return dp.LayerCosts(tuple(map(str, range(L))), *(np.full(L, t) for _ in range(4)), np.full(L, nbytes))


# -- data parallel -----------------------------------------------------------------------------------
def test_reverse_first_k_is_a_permutation_with_the_deferred_w_in_forward_order():
    for k in range(6):
        order = dp.reverse_first_k(5, k)
        assert sorted(order) == sorted((kind, x) for kind in "IW" for x in range(5))
        assert [x for kind, x in order if kind == "I"] == [4, 3, 2, 1, 0]
        assert [x for kind, x in order if kind == "W"] == [*range(4, k - 1, -1), *range(k)]
    with pytest.raises(ValueError, match="0..5"):
        dp.reverse_first_k(5, 6)


def test_closed_form_iteration_times():
    # two layers, every pass 10 ns, all-reduce 10 ns per layer: the usual order exposes layer 0's
    # all-reduce before the next forward (90 = 80 of GPU work + 10); k = 2 hides it behind W(1)
    costs, net = uniform(2), dp.Network(2, 1e11, 0.0)
    times = [dp.evaluate(costs, net, dp.reverse_first_k(2, k)).iteration_time for k in range(3)]
    assert times == [90.0, 90.0, 80.0]
    # one bucket for both layers: the exchange starts after W(0), 20 ns exposed
    assert (
        dp.evaluate(costs, dp.Network(2, 1e11, 0.0, bucket_bytes=2000), dp.reverse_first_k(2, 0)).iteration_time
        == 100.0
    )


def test_ring_allreduce_matches_the_formula():
    net = dp.Network(8, 2e9, 1e-5)
    assert net.allreduce_ns(4e9) == round((2 * 7 / 8 * 2 + 2 * 7 * 1e-5) * 1e9)
    assert dp.Network(1, 2e9, 1e-5).allreduce_ns(4e9) == 0


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(*(st.integers(0, 50) for _ in range(4)), st.integers(0, 5000)), min_size=1, max_size=6),
    st.integers(1, 8),
    st.integers(0, 6),
)
def test_every_k_is_valid_and_bounded_by_the_work(layers, replicas, k):
    costs = dp.LayerCosts(tuple(map(str, range(len(layers)))), *(np.array(c) for c in zip(*layers, strict=True)))
    net = dp.Network(replicas, 1e11, 1e-8)
    k = min(k, len(layers))
    ev = dp.evaluate(costs, net, dp.reverse_first_k(len(layers), k), iterations=2)
    validate(ev.graph.problem, ev.schedule)
    gpu = int(costs.forward.sum() + costs.backward_input.sum() + costs.backward_weight.sum() + costs.update.sum())
    comm = sum(net.allreduce_ns(b) for b in costs.grad_bytes)
    assert ev.iteration_time >= max(gpu, comm)
    if replicas == 1:  # nothing to exchange: the GPU never waits
        assert ev.iteration_time == gpu


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 50), st.integers(0, 50), st.integers(0, 5000)), min_size=1, max_size=6),
    st.integers(0, 6),
)
def test_deferring_w_costs_no_activation_memory(layers, k):
    """In every order, the peak is the sum of the layers' activations (see the module doc)."""
    act, kept_share, grads = (np.array(c) for c in zip(*layers, strict=True))
    L, ones = len(layers), np.full(len(layers), 10)
    costs = dp.LayerCosts(tuple(map(str, range(L))), ones, ones, ones, ones, grads, act, act * kept_share // 50)
    ev = dp.evaluate(costs, dp.Network(4, 1e9, 1e-6), dp.reverse_first_k(L, min(k, L)), iterations=2)
    assert ev.peak_memory == act.sum()


def test_cpsat_order_is_never_worse_than_the_best_k():
    costs = uniform(4, t=10, nbytes=3000)
    costs = dp.LayerCosts(
        costs.names,
        costs.forward,
        costs.backward_input * 2,
        costs.backward_weight,
        costs.update // 5,
        costs.grad_bytes,
        np.full(4, 100),
        np.full(4, 40),
    )
    net = dp.Network(4, 1e11, 0.0)
    k, best = dp.best_k(costs, net, iterations=2)
    found, result = dp.search_order(best, time_limit=5)
    validate(found.graph.problem, found.schedule)
    assert found.iteration_time <= best.iteration_time
    assert found.peak_memory == best.peak_memory == 400  # every order: all activations, after the forward
    assert result.objective <= best.schedule.makespan(best.graph.problem)


def test_resnet50_out_of_order_beats_the_bucketed_reverse_order():
    spec = load_problem(PROBLEMS / "resnet50-dp-v100.yaml")
    costs = dp.layer_costs(spec)
    assert costs.num_layers == 18 and costs.backward_input[0] == 0
    assert int(costs.grad_bytes.sum()) == 2 * 25557032  # fp16 gradients of ResNet-50's parameters
    L = costs.num_layers
    base = dp.evaluate(costs, dp.network_for(spec, 8, 25 * 2**20), dp.reverse_first_k(L, 0), 2)
    k, best = dp.best_k(costs, dp.network_for(spec, 8, 4 * 2**20), 2)
    assert 0 < k <= L and 1.1 < base.iteration_time / best.iteration_time < 1.4
    # and it holds no more activations: each layer's, 64 images' worth, at the end of the forward
    assert best.peak_memory == base.peak_memory == int(costs.activation.sum()) > 3 * 2**30
    # inside one node (NVLink) there is little to hide
    inside = dp.evaluate(costs, dp.network_for(spec, 4, 25 * 2**20), dp.reverse_first_k(L, 0), 2)
    assert inside.iteration_time < 1.02 * sum(
        int(getattr(costs, f).sum()) for f in ("forward", "backward_input", "backward_weight", "update")
    )


# -- single device, two streams -------------------------------------------------------------------------
def test_multistream_gains_shrink_to_none_as_co_running_slows_down():
    k = ms.kernels(load_problem(PROBLEMS / "mobilenetv3-v100.yaml"))
    assert k.ops is not None and sum(k.ops["F"]) > k.num_leaves  # several kernels per leaf
    serial = ms.evaluate(k, 5000, 1.0, multistream=False)
    assert serial.schedule.orders(serial.problem)[2] == []  # the sub stream is idle
    speedups = [serial.makespan / ms.evaluate(k, 5000, c, multistream=True).makespan for c in (1.0, 1.25, 1.5, 2.0)]
    assert speedups == sorted(speedups, reverse=True)
    assert speedups[0] > 1.05 and speedups[-1] <= 1.0


def test_multistream_is_launch_bound_when_launches_dominate():
    k = ms.Kernels(("a", "b", "c"), [1, 1, 1], [0, 1, 1], [1, 1, 1])
    for multistream in (False, True):
        ev = ms.evaluate(k, launch=100, corun=1.0, multistream=multistream)
        assert ev.makespan == 8 * 100 + 1  # 8 kernels launched in turn, the last one runs after
    with pytest.raises(ValueError, match="at least 1"):
        ms.evaluate(k, 1, 0.5, multistream=True)


# -- pipeline --------------------------------------------------------------------------------------------
def test_modulo_allocation_puts_block_i_on_rank_i_mod_g():
    spec = pp.with_shape(load_problem(PROBLEMS / "bert-ooo-v100.yaml"), layers=6, ranks=3, microbatches=3)
    pipe, ranks = pp.modulo_pipeline(spec)
    assert ranks == [0, 0, 1, 2, 0, 1, 2, 2] and pipe.num_stages == 8 and pipe.num_ranks == 3
    # transfers only between ranks
    assert all((pipe.transfer[s] > 0) == (ranks[s] != ranks[s + 1]) for s in range(7))
    sol = pp.solve_modulo(spec)
    validate(sol.tasks.problem, sol.schedule)
    assert sol.metrics["value"] >= max(sol.metrics["work"])


def test_bert_pipeline_out_of_order_beats_gpipe():
    spec = pp.with_shape(load_problem(PROBLEMS / "bert-ooo-v100.yaml"), layers=24, ranks=8, microbatches=8)
    sols = pp.compare(spec)
    for sol in sols.values():
        validate(sol.tasks.problem, sol.schedule)
    gpipe = sols["gpipe"].metrics["value"]
    assert gpipe / sols["fast-forward"].metrics["value"] > 1.15
    assert gpipe / sols["modulo"].metrics["value"] > 1.15


# -- the experiment ---------------------------------------------------------------------------------------
def test_bench_ooo_quick_writes_rows_and_plot(tmp_path):
    from layersched.cli.bench import run_bench

    result = run_bench("ooo", tmp_path, quick=True)
    parts = {r["part"] for r in result.rows}
    assert parts == {"data parallel", "single device", "pipeline"}
    assert (tmp_path / "ooo.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "ooo.csv").exists()
    by = {(r["model"], r["setting"], r["method"]): r for r in result.rows}
    for (model, setting, method), r in by.items():
        if method == "cpsat":
            assert r["ooo_ms"] <= by[(model, setting, "best-k")]["ooo_ms"]
        if method == "best-k":
            assert r["ooo_ms"] <= by[(model, setting, "reverse-tuned")]["ooo_ms"]
