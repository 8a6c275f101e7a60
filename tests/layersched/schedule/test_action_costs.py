"""What a run costs beyond its layers: a fixed cost per action and a fused backward cheaper than
``I`` then ``W``, from the description to the task graph, the templates and the bounds."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")  # the profile format's reader lives beside the profiler

from layersched.describe.config import LayerSpec  # noqa: E402
from layersched.describe.stages import pipeline_from_spec  # noqa: E402
from layersched.runtime.profiler import problem_from_profile  # noqa: E402
from layersched.schedule.bounds import pipeline_bounds  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from layersched.schedule.templates import _Timeline  # noqa: E402

US = 1e-6


def _prof(overhead: float, fused: float | None, optimizer: float | None = None) -> dict:
    """A profile as `layersched.runtime.profiler.profile` writes it, of four equal layers."""
    layer = {
        "forward": 100 * US,
        "backward_input": 100 * US,
        "backward_weight": 100 * US,
        "activation_bytes": 1000,
        "kept_for_weight_grad": 500,
        "param_bytes": 4000,
        "output_bytes": 400,
    }
    if fused is not None:
        layer["backward"] = fused
    if optimizer is not None:
        layer["optimizer"] = optimizer
    return {
        "model": "toy",
        "builder": "toy",
        "microbatch_size": 1,
        "dtype": "float32",
        "dtype_bytes": 4,
        "threads": 1,
        "device": {
            "name": "cpu",
            "peak_flops": 1e10,
            "memory_bandwidth": 1e10,
            "memory_bytes": 2**30,
            "flops_efficiency": 1.0,
            "bandwidth_efficiency": 1.0,
            "action_overhead": overhead,
        },
        "link": {"bandwidth": 1e9, "latency": 10 * US},
        "layers": [{"name": f"l{i}", **layer} for i in range(4)],
    }


def _pipe(overhead: float, fused: float | None, optimizer: float | None = None):
    prof = _prof(overhead, fused, optimizer)
    return pipeline_from_spec(problem_from_profile(prof, microbatches=4, pipeline=2))


def test_every_action_pays_the_overhead_once_and_b_its_fused_time():
    pipe = _pipe(20 * US, 150 * US)
    assert pipe.action_overhead == 20_000 and pipe.backward.tolist() == [300_000, 300_000]
    split = solve_pipeline(pipe, schedule="1f1b-split")
    fused = solve_pipeline(pipe, schedule="1f1b")
    dur = {name: split.tasks.graph.nodes[name]["duration"] for name in ("0F0", "0I0", "0W0")}
    assert dur == {"0F0": 220_000, "0I0": 220_000, "0W0": 220_000}
    assert fused.tasks.graph.nodes["0B0"]["duration"] == 320_000  # 2 x 150 us fused + one overhead
    # without a fused figure, B is I + W plus one overhead (not two)
    plain = solve_pipeline(_pipe(20 * US, None), schedule="1f1b")
    assert plain.tasks.graph.nodes["0B0"]["duration"] == 420_000
    assert _pipe(0.0, None).action_overhead == 0 and _pipe(0.0, None).backward is None


@pytest.mark.parametrize("fused", [150 * US, 250 * US, None])
def test_bounds_stay_below_every_template_when_b_is_cheaper_than_i_plus_w(fused):
    pipe = _pipe(20 * US, fused)
    bounds = pipeline_bounds(pipe, [0, 1], "makespan")
    assert bounds
    for name in ("gpipe", "1f1b", "1f1b-split", "zb-h1", "zb-h2"):
        sol = solve_pipeline(pipe, schedule=name, objective="makespan")
        assert max(bounds.values()) <= sol.schedule.makespan(sol.tasks.problem), name


def test_a_fused_backward_is_its_own_figure_or_the_sum():
    assert LayerSpec(name="a", backward_input=1.0, backward_weight=2.0).total("backward") == 3.0
    assert LayerSpec(name="a", backward_input=1.0, backward_weight=2.0, backward=2.5).total("backward") == 2.5
    parent = LayerSpec(name="p", sublayers=[LayerSpec(name="a", backward=1.0), LayerSpec(name="b", forward=1.0)])
    assert parent.total("backward") == 1.0
    with pytest.raises(ValueError, match="either the layer's own figures or its sublayers"):
        LayerSpec(name="p", backward=1.0, sublayers=[LayerSpec(name="a")])


def test_the_optimizer_step_is_the_profiled_figure_or_the_estimate():
    # two layers per stage at 50 us each; the U task takes the stage's sum
    pipe = _pipe(20 * US, None, 50 * US)
    assert pipe.optimizer.tolist() == [100_000, 100_000]
    sol = solve_pipeline(pipe, schedule="1f1b")
    assert sol.tasks.graph.nodes["1U"]["duration"] == 100_000
    # left out: memory bound, weights, gradients and state (4 bytes a parameter for SGD's momentum)
    # read and written once: 4000 bytes x (2 + 4) x 2 / 4 bytes / 1e10 bytes/s = 1.2 us a layer
    assert _pipe(20 * US, None).optimizer.tolist() == [2400, 2400]
    # sub-layers: each its own figure or estimate (stage 0: "a" profiled, "b" and "l1" estimated)
    prof = _prof(20 * US, None)
    layer = dict(prof["layers"][0])
    subs = [{**layer, "name": "a", "optimizer": 50 * US}, {**layer, "name": "b"}]
    prof["layers"][0] = {"name": "p", "sublayers": subs}
    pipe = pipeline_from_spec(problem_from_profile(prof, microbatches=4, pipeline=2))
    each = {"p": 50_000 + 1200, "l1": 1200, "l2": 1200, "l3": 1200}
    assert pipe.optimizer.tolist() == [sum(each[n] for n in names) for names in pipe.stage_layers]
    assert pipe.stage_layers[0][0] == "p"
    with pytest.raises(ValueError, match="either the layer's own figures or its sublayers"):
        LayerSpec(name="p", optimizer=1.0, sublayers=[LayerSpec(name="a")])


def test_an_overhead_per_kind_goes_to_the_actions_of_that_kind():
    prof = _prof(0.0, 150 * US)
    prof["device"]["action_overhead"] = {"F": 10 * US, "I": 20 * US, "W": 30 * US, "B": 40 * US}
    pipe = pipeline_from_spec(problem_from_profile(prof, microbatches=4, pipeline=2))
    assert [pipe.overhead(k) for k in "FIWB"] == [10_000, 20_000, 30_000, 40_000]
    split = solve_pipeline(pipe, schedule="1f1b-split").tasks.graph.nodes
    assert [split[n]["duration"] for n in ("1F2", "1I2", "1W2")] == [210_000, 220_000, 230_000]
    fused = solve_pipeline(pipe, schedule="1f1b").tasks.graph.nodes
    assert fused["1B2"]["duration"] == 340_000
    # the Zero Bubble sweep times its passes with the same figures
    assert _Timeline(pipe).dur == {
        "F": (pipe.forward + 10_000).tolist(),
        "I": (pipe.backward_input + 20_000).tolist(),
        "W": (pipe.backward_weight + 30_000).tolist(),
    }
    # a kind left out costs nothing; an unknown kind is an error
    prof["device"]["action_overhead"] = {"B": 40 * US}
    assert pipeline_from_spec(problem_from_profile(prof, microbatches=4, pipeline=2)).overhead("F") == 0
    prof["device"]["action_overhead"] = {"X": 1.0}
    with pytest.raises(ValueError, match="action_overhead"):
        problem_from_profile(prof, microbatches=4, pipeline=2)
