"""PipeDream and LayerPipe plans: PipeDream's partitioner, memory models, validated simulations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layersched.cli.main import main
from layersched.describe.config import LayerSpec, LinkSpec, load_problem
from layersched.describe.partition import optimal_contiguous
from layersched.methods.layerpipe.layerpipe import plan_layerpipe
from layersched.methods.layerpipe.pipedream import pipedream_partition, plan_pipedream
from layersched.methods.layerpipe.pipeplan import Setting, in_flight, simulate
from tests.paths import ROOT

FAST_LINK = LinkSpec(bandwidth=1e30)


def setting_of(name: str, link: LinkSpec | None = None) -> Setting:
    s = Setting.from_spec(load_problem(ROOT / "problems" / name))
    return Setting(**{**s.__dict__, "link": link or s.link})


@st.composite
def models(draw):
    """Layers of a matmul and a nonlinearity with random costs (ms) and sizes."""
    layers = []
    for i in range(draw(st.integers(2, 7))):
        t = [draw(st.floats(0.01, 5)) for _ in range(5)]
        mm = LayerSpec(
            name="mm",
            forward=t[0] * 1e-3,
            backward_input=t[1] * 1e-3,
            backward_weight=t[2] * 1e-3,
            activation_bytes=1000,
            kept_for_weight_grad=500,
            param_bytes=draw(st.integers(0, 4000)),
            output_bytes=draw(st.integers(0, 10**6)),
        )
        act = LayerSpec(
            name="act",
            forward=t[3] * 1e-3,
            backward_input=t[4] * 1e-3,
            activation_bytes=500,
            output_bytes=draw(st.integers(0, 10**6)),
        )
        layers.append(LayerSpec(name=f"l{i}", sublayers=[mm, act]))
    return Setting("random", layers, LinkSpec(bandwidth=1e9, latency=1e-6), 1e12, 12.0, 2, 4)


@settings(max_examples=60, deadline=None)
@given(models(), st.integers(1, 7), st.booleans())
def test_pipedream_without_replication_is_the_overlapped_contiguous_optimum(setting, P, replication):
    items = setting.items("layer")
    if P > len(items.names):
        return
    cut = items.cut_time(setting.link)
    off = pipedream_partition(items.work, P, cut=cut)
    assert off.time == pytest.approx(optimal_contiguous(items.work, P, cut=cut).bottleneck)
    assert off.replicas == [1] * P and [i for s in off.stages for i in s] == list(range(len(items.names)))
    # replication can only help, and with free weight sync one replicated stage is ideal
    on = pipedream_partition(items.work, P, cut=cut, param_bytes=items["param_bytes"], bandwidth=1e9, replication=True)
    assert on.time <= off.time + 1e-12 and sum(on.replicas) == P
    free = pipedream_partition(items.work, P, replication=True)
    assert free.time == pytest.approx(items.work.sum() / P)


@settings(max_examples=40, deadline=None)
@given(models(), st.integers(1, 7))
def test_sublayer_cuts_never_lose_and_memory_models_are_consistent(setting, P):
    if P > len(setting.layers):
        return
    pd = plan_pipedream(setting, P)
    whole = plan_layerpipe(setting, P, granularity="layer")
    fine = plan_layerpipe(setting, P)
    assert whole.time_per_microbatch == pytest.approx(pd.time_per_microbatch)
    assert fine.time_per_microbatch <= whole.time_per_microbatch * (1 + 1e-12)
    # PipeDream on the same stages needs LayerPipe's memory plus P - p - 1 stashed weight versions
    items, parts = pd.items, pd.partition.parts
    act, params = items.per_stage("activation_bytes", parts), items.per_stage("param_bytes", parts)
    static = setting.static(items)
    expected = np.array([static[p].sum() for p in parts]) + in_flight(P) * act + (in_flight(P) - 1) * params
    assert pd.memory == pytest.approx(expected)


@pytest.mark.parametrize(
    ("problem", "P"), [("resnet50-v100.yaml", 4), ("bert-large-v100.yaml", 3), ("mlp-deep-v100.yaml", 5)]
)
def test_validated_simulation_confirms_the_bottleneck(problem, P):
    # with instant links the steady state of a 1F1B schedule is the slowest stage's F + B
    setting = setting_of(problem, FAST_LINK)
    for plan in (plan_pipedream(setting, P), plan_layerpipe(setting, P)):
        sim = simulate(plan, 4 * P)  # both schedules pass solvers.validate inside
        assert sim["steady"] == pytest.approx(plan.time_per_microbatch, rel=1e-6)
        assert sim["flushed"] > sim["steady"]
        # the simulated activation peak of stage p is P - p micro-batches' activations
        act = plan.items.per_stage("activation_bytes", plan.partition.parts)
        assert sim["peak_activations"] == pytest.approx((in_flight(P) * act).tolist())


def test_sync_layerpipe_pays_for_the_flush_and_async_beats_pipedream_on_bert():
    setting = setting_of("bert-large-v100.yaml")
    pd, lp = plan_pipedream(setting, 8), plan_layerpipe(setting, 8)
    sync = plan_layerpipe(setting, 8, mode="sync")
    assert sync.time_per_microbatch > lp.time_per_microbatch
    assert pd.time_per_microbatch / lp.time_per_microbatch > 1.15
    assert lp.memory.max() < pd.memory.max() <= setting.capacity


def test_memory_limit_is_enforced_and_infeasibility_explained():
    setting = setting_of("gpt3-2.7b-a100.yaml")
    tight = Setting(**{**setting.__dict__, "capacity": 30 * 2**30})
    assert plan_layerpipe(tight, 4).memory.max() <= tight.capacity
    with pytest.raises(ValueError, match="fits in memory: the best one needs"):
        plan_layerpipe(tight, 2)


def test_cpsat_partition_of_a_model_is_no_worse_than_the_dp():
    setting = setting_of("resnet50-v100.yaml")
    dp = plan_layerpipe(setting, 3, granularity="layer")
    cp = plan_layerpipe(setting, 3, granularity="layer", solver="cpsat", time_limit=5)
    assert cp.time_per_microbatch <= dp.time_per_microbatch * (1 + 1e-6)
    assert cp.partition.lower_bound <= cp.time_per_microbatch * (1 + 1e-6)


def test_partition_command(capsys):
    assert main(["partition", str(ROOT / "problems/bert-large-v100.yaml"), "-P", "4"]) == 0
    out = capsys.readouterr().out
    assert "layerpipe-async on 4 processors" in out and "lower bound" in out
    assert main(["partition", str(ROOT / "problems/resnet50-v100.yaml"), "--method", "pipedream"]) == 0
    assert main(["partition", str(ROOT / "problems/zb-1.5b.yaml")]) == 2
    assert "needs a model-level problem" in capsys.readouterr().err
    assert main(["partition", str(ROOT / "problems/mlp-tiny.yaml"), "-P", "8"]) == 2  # 4 layers
    assert "cannot split 4 items onto 8 processors: each needs at least one; use at most 4" in capsys.readouterr().err


def test_experiment_quick(tmp_path):
    from layersched.cli.bench import run_bench

    result = run_bench("layerpipe", tmp_path, quick=True)
    rows = [r for r in result.rows if "pd_ms" in r]
    assert {r["model"] for r in rows} == {"VGG-16", "ResNet-50", "BERT-large", "GPT-3 2.7B", "deep MLP"}
    assert all(r["speedup"] >= 1 - 1e-9 for r in rows)
    assert all(p.exists() for p in result.files) and any(p.suffix == ".png" for p in result.files)
    assert result.rows[-1]["sublayers"] == 1000
    main = result.sections[0].rows  # the main path: whole-layer against sub-layer partitions
    assert [r["problem"] for r in main] == ["gpt3-1.3b-a100", "resnet50-v100", "vgg16-v100"]
    for r in main:
        assert r["chosen_ms"] <= r["whole_ms"] and r["chosen_ms"] >= r["bound_ms"] and r["peak_gib"] <= r["limit_gib"]
    assert main[0]["gain"] > 0.05  # GPT-3 1.3B: 617.9 ms against 667.4 ms
    assert (tmp_path / "layerpipe-main.csv").exists()
