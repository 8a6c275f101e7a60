"""Ada-Grouper: kFkB memory, largest feasible k, the adaptive controller and the bench."""

from pathlib import Path

import pytest

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.methods.adagrouper.adagrouper import (
    AdaptiveController,
    GroupedWorkload,
    StepTimeController,
    TransferTimeController,
    kfkb_memory,
    largest_feasible_k,
    largest_k_per_stage,
    make_plans,
    simulate,
    total_time,
)
from layersched.methods.adagrouper.network import constant, on_off
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import TemplateError
from solvers import InvalidSchedule, validate
from tests.paths import EXAMPLES


def _pipe(m=12, limit=None, p=4):
    spec = {
        "stages": p,
        "microbatches": m,
        "forward": 2,
        "backward_input": 2,
        "backward_weight": 2,
        "transfer": 1,
        "memory_forward": 5,
    }
    if limit is not None:
        spec["memory_limit"] = limit
    return pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": spec}))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6, 12])
def test_kfkb_memory_is_the_validated_schedules_peak(k):
    pipe = _pipe()
    sol = solve_pipeline(pipe, schedule=f"kfkb-{k}")
    assert kfkb_memory(pipe, k).tolist() == sol.metrics["peak_memory"][: pipe.num_ranks]


def test_largest_k_fits_and_the_next_does_not():
    pipe = _pipe(limit=40)  # rank 0 holds 4k micro-batches of 5: k <= 2
    assert largest_k_per_stage(pipe) == [2, 2, 4, 8]
    k = largest_feasible_k(pipe)
    assert k == 2
    sol = solve_pipeline(pipe, schedule=f"kfkb-{k}")  # validated, memory included
    assert max(sol.metrics["peak_memory"]) <= 40
    with pytest.raises(InvalidSchedule, match="memory"):
        solve_pipeline(pipe, schedule="kfkb-3")
    assert largest_feasible_k(_pipe(m=24, limit=99)) == 4  # rank 0 needs 20k <= 99; 4 divides 24
    assert largest_feasible_k(_pipe(m=10, limit=35, p=2)) == 2  # k = 3 fits (30 <= 35) but does not divide 10
    assert largest_feasible_k(_pipe(limit=4)) == 0
    with pytest.raises(TemplateError, match="multiple"):
        solve_pipeline(_pipe(m=10), schedule="kfkb-3")


def test_plans_use_the_largest_microbatch_that_fits():
    wl = GroupedWorkload(num_stages=4, global_batch=64, capacity=32)
    plans = make_plans(wl, [1, 2, 4, 16])
    assert [(p.k, p.microbatch_size) for p in plans] == [(1, 8), (2, 4), (4, 2)]  # k = 16 fits no micro-batch
    for p in plans:
        assert max(p.solution.metrics["peak_memory"]) <= wl.capacity
        bigger = [b for b in range(p.microbatch_size + 1, 65) if 64 % b == 0 and (64 // b) % p.k == 0]
        if bigger:
            assert (kfkb_memory(wl.pipeline(bigger[0]), p.k) > wl.capacity).any()
        validate(p.solution.tasks.problem, p.solution.schedule)


def test_controller_picks_the_fastest_plan_for_the_estimated_bandwidth():
    plans = make_plans(GroupedWorkload(), [1, 2, 4, 8])
    ctl = AdaptiveController(plans, interval=2)
    for b in (1.0, 0.5, 0.25, 0.1, 0.05):
        best = min(plans, key=lambda p: p.predict(b))
        assert ctl.choose(b).predict(b) == best.predict(b)
    assert ctl.choose(1.0).k == 1 and ctl.choose(0.05).k > 1
    # it re-chooses only at the end of a window, from the measured transfer times
    slow = plans[0].run(constant(0.05))
    assert ctl.observe(slow).k == 1 and ctl.estimate == 1.0
    assert ctl.observe(slow).k == ctl.choose(0.05).k and ctl.estimate == pytest.approx(0.05, rel=1e-3)


def test_adaptive_tracks_slow_preemption_and_beats_1f1b():
    plans = make_plans(GroupedWorkload(), [1, 2, 4])
    it = plans[0].predict(1.0)
    tr = on_off(20 * it, 0.5, 0.05)
    runs = {k: total_time(simulate(plans, tr, 100, k=k)) for k in (1, 2, 4)}
    recs = simulate(plans, tr, 100, interval=1)
    adaptive = total_time(recs)
    assert adaptive < min(runs.values())  # switching beats every fixed k on this trace
    assert {r["k"] for r in recs} >= {1, 4}
    # no preemption: the adaptive run is exactly 1F1B
    assert total_time(simulate(plans, constant(1.0), 10)) == total_time(simulate(plans, constant(1.0), 10, k=1))


def test_bench_adagrouper_quick(tmp_path: Path):
    from layersched.cli.bench import run_bench

    res = run_bench("adagrouper", tmp_path, quick=True)
    rows = {(r["trace"], r["method"]): r for r in res.rows}
    assert rows[("no preemption", "adaptive")]["speedup"] == 0.0
    assert all(r["speedup"] == 0.0 for r in res.rows if r["method"] == "1f1b")
    assert rows[("on/off slow, 50% at 5%", "adaptive")]["speedup"] > 0.04
    assert (tmp_path / "adagrouper.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "adagrouper.csv").exists()


@pytest.mark.parametrize("controller", [StepTimeController, TransferTimeController])
def test_real_run_controllers_track_the_bandwidth(controller):
    """Fed what a run measures (step times; messages' bytes and time in flight), each controller
    switches k under on/off preemption about as well as the simulation's controller."""
    plans = make_plans(GroupedWorkload(), [1, 2, 4])
    it = plans[0].predict(1.0)
    tr = on_off(20 * it, 0.5, 0.05)
    ctl = controller(plans, interval=1)
    history, t = [], 0
    for step in range(100):
        j = ctl(step, history)
        run = plans[j].run(tr, t)
        dt = run.schedule.makespan(plans[j].solution.tasks.problem)
        # a run measures seconds (here 1 tick = 1 us) and bytes (a tick of nominal transfer time carries 1000)
        flights = [(int(n) * 1000, float(a) * 1e-6) for n, a in zip(run.nominal, run.actual, strict=True) if n]
        history.append((j, dt * 1e-6, flights))
        t += dt
    assert {h[0] for h in history} >= {0, 2}
    assert t < total_time(simulate(plans, tr, 100, k=1)) / 1.15  # over 15% faster than 1F1B
    assert t == pytest.approx(total_time(simulate(plans, tr, 100, interval=1)), rel=0.02)


def test_transfer_time_controller_keeps_the_plan_on_a_constant_link():
    plans = make_plans(GroupedWorkload(), [1, 2, 4])
    steady = TransferTimeController(plans, interval=2)
    hist = [(0, 1.0, [(4096, 1e-4), (8192, 2e-4)])] * 6
    assert [steady(k, hist[:k]) for k in range(7)] == [0] * 7 and steady.estimate == 1.0


MLP = str(EXAMPLES / "models.py") + ":mlp"


def _kfkb_runs(ks, steps: int) -> list:
    """Run configurations of the 8-layer MLP on kFkB-``k`` schedules (2 ranks, 4 micro-batches)."""
    from layersched.formats.export import schedule_file
    from layersched.runtime.runner import RunConfig

    pipe = _pipe(m=4, p=2)
    return [
        RunConfig(schedule_file(solve_pipeline(pipe, schedule=f"kfkb-{k}")), MLP, steps=steps, lr=0.05, momentum=0.9)
        for k in ks
    ]


def test_runner_feeds_transfer_timings_to_the_controller():
    torch = pytest.importorskip("torch")
    from layersched.methods.adagrouper.switching import launch_switching
    from layersched.runtime.runner import train_reference

    cfgs = _kfkb_runs((1, 2), steps=3)
    ctl = TransferTimeController(make_plans(GroupedWorkload(num_stages=2, global_batch=32, capacity=16), [1, 2]))
    res = launch_switching(cfgs, ctl)
    # rank 0 saw, every step, the flights of messages its peers waited for (2 ranks: 8 per step at most)
    assert res[0].flights is not None and all(0 < n <= 8 for n in res[0].flights)
    assert all(r.choices == res[0].choices for r in res) and set(res[0].choices) <= {0, 1}
    ref, ref_losses = train_reference(MLP, num_microbatches=4, steps=3, lr=0.05, momentum=0.9)
    got = {k: v for r in res for k, v in r.params.items()}
    assert all(torch.allclose(got[k], ref[k], atol=1e-12) for k in ref)


@pytest.mark.slow
def test_runner_switches_plans_between_iterations_and_matches_the_reference():
    torch = pytest.importorskip("torch")
    from layersched.methods.adagrouper.switching import FixedSequence, launch_switching
    from layersched.runtime.runner import train_reference

    cfgs = _kfkb_runs((1, 2, 4), steps=4)
    res = launch_switching(cfgs, FixedSequence([0, 1, 2, 0]))
    ref, ref_losses = train_reference(MLP, num_microbatches=4, steps=4, lr=0.05, momentum=0.9)
    assert all(r.choices == [0, 1, 2, 0] for r in res)
    assert res[-1].losses == pytest.approx(ref_losses, abs=1e-12)
    got = {k: v for r in res for k, v in r.params.items()}
    assert set(got) == set(ref)
    assert all(torch.allclose(got[k], ref[k], atol=1e-12) for k in ref)
