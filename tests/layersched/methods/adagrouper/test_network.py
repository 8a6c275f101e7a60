"""Bandwidth traces and timing of schedule orders under them."""

import numpy as np
import pytest

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.methods.adagrouper.network import (
    BandwidthTrace,
    constant,
    from_samples,
    load_trace,
    markov_on_off,
    on_off,
    time_orders_under,
)
from layersched.schedule.solve import complete_orders, solve_pipeline
from solvers import time_orders, validate


def _pipe(transfer=300, m=8):
    return pipeline_from_spec(
        ProblemSpec.model_validate(
            {
                "name": "t",
                "pipeline": {
                    "stages": 4,
                    "microbatches": m,
                    "forward": 1000,
                    "backward_input": 1000,
                    "backward_weight": 1000,
                    "transfer": transfer,
                },
            }
        )
    )


def test_transfer_end_integrates_the_bandwidth():
    tr = on_off(period=100, duty=0.5, low=0.25)  # full on [0, 50), quarter on [50, 100)
    assert tr.transfer_end(0, 50) == 50
    assert tr.transfer_end(50, 25) == 113  # 50 ticks at 1/4 give 12.5, then 12.5 more at full (rounded up)
    assert tr.transfer_end(30, 0) == 30
    # the integral of the bandwidth over [t, end] equals the work
    for t, work in [(7, 13), (45, 80), (99, 300)]:
        end = tr.transfer_end(t, work)
        assert tr.mean(t, end) * (end - t) == pytest.approx(work, abs=1)
    assert tr.mean(0, 1000) == pytest.approx(0.625)


def test_on_off_duty_and_phase():
    tr = on_off(1000, 0.3, 0.1, phase=500)
    low = np.mean([tr.at(t) == 0.1 for t in range(0, 3000)])
    assert low == pytest.approx(0.3)
    assert tr.at(200) == 0.1 and tr.at(600) == 1.0  # preempted from 1200 mod 1000 = 200 to 500


def test_bad_traces_are_rejected():
    with pytest.raises(ValueError, match="bandwidth fractions"):
        BandwidthTrace(np.array([0]), np.array([1.5]))
    with pytest.raises(ValueError, match="start at 0"):
        BandwidthTrace(np.array([1, 2]), np.array([1.0, 0.5]))
    with pytest.raises(ValueError, match="duty"):
        on_off(10, 1.0, 0.1)


def test_measured_trace_from_csv(tmp_path):
    path = tmp_path / "link.csv"
    path.write_text("time,gbps\n0.0,100\n0.5,25\n1.0,100\n")
    tr = load_trace(path, time_scale=1000)
    assert tr.times.tolist() == [0, 500, 1000] and tr.bandwidth.tolist() == [1.0, 0.25, 1.0]
    assert tr.name == "link"
    assert from_samples([0, 1], [2.0, 1.0], nominal=4.0).bandwidth.tolist() == [0.5, 0.25]


def test_constant_full_bandwidth_equals_fixed_order_timing():
    sol = solve_pipeline(_pipe(), schedule="kfkb-2", objective="makespan")
    orders = complete_orders(sol.tasks, sol.actions())
    run = time_orders_under(sol.tasks.problem, orders, constant(1.0))
    assert run.schedule.start.tolist() == time_orders(sol.tasks.problem, orders).start.tolist()
    assert run.bandwidth_estimate() == 1.0 and (run.actual == run.nominal).all()


@pytest.mark.parametrize("name", ["1f1b", "kfkb-2", "kfkb-4"])
def test_traced_schedules_are_valid_for_the_nominal_problem(name):
    sol = solve_pipeline(_pipe(), schedule=name, objective="makespan")
    problem = sol.tasks.problem
    orders = complete_orders(sol.tasks, sol.actions())
    nominal = sol.metrics["makespan"]
    for tr in (on_off(5000, 0.5, 0.1), markov_on_off(3000, 2000, 0.05, 200_000, seed=3), constant(0.3)):
        for t0 in (0, 1234, 77_777):
            run = time_orders_under(problem, orders, tr, t0)
            validate(problem, run.schedule)  # slower transfers only delay: still a valid schedule
            assert run.schedule.makespan(problem) >= nominal
            assert (run.actual >= run.nominal).all()
    # constant bandwidth b: every transfer takes nominal / b, and the estimate recovers b
    run = time_orders_under(problem, orders, constant(0.25))
    assert run.bandwidth_estimate() == pytest.approx(0.25)
    assert run.schedule.makespan(problem) == time_orders(_replace_delay(problem, 4), orders).makespan(problem)


def _replace_delay(problem, factor):
    from dataclasses import replace

    return replace(problem, delay=problem.delay * factor)
