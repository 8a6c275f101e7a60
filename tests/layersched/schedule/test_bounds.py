"""Memory-aware pipeline lower bounds: never above any valid schedule, tight where proven."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersched.schedule.bounds import pipeline_bounds
from layersched.schedule.graph import build_graph, to_problem
from layersched.schedule.solve import solve_pipeline, symmetry_chains
from layersched.schedule.templates import TemplateError, template_names
from solvers import Deadlock, InvalidSchedule, validate
from tests.layersched.schedule.test_core_path import ZB_SETTINGS, stage_pipeline, zb_pipeline

# published ZB-1p bubble rates (Zero Bubble pipeline parallelism, table 4)
ZB_1P = [0.1585, 0.1323, 0.1397]


@pytest.mark.parametrize("setting,published", list(zip(ZB_SETTINGS, ZB_1P, strict=True)), ids=["1.5B", "6.2B", "14.6B"])
def test_bound_under_1p_equals_published_zb_1p(setting, published):
    pipe = zb_pipeline(*setting[:8])
    bound = pipeline_bounds(pipe, list(range(pipe.num_stages)), "span")["pipeline_idle"]
    work = pipe.num_microbatches * int(pipe.forward[0] + pipe.backward_input[0] + pipe.backward_weight[0])
    assert round(1 - work / bound, 4) == published


def test_bound_does_not_apply_to_other_placements():
    pipe = zb_pipeline(4, 8, 1, 1, 1, 0, 1, 1, stages_per_rank=2)
    assert pipeline_bounds(pipe, [0, 1, 2, 3, 3, 2, 1, 0], "span") == {}


def small_pipelines():
    return st.builds(
        lambda p, m, F, I, W, c, mf, mw, k: stage_pipeline(
            stages=p,
            microbatches=m,
            forward=F,
            backward_input=I,
            backward_weight=W,
            transfer=c,
            memory_forward=mf,
            memory_freed_by_weight=min(mw, mf),
            memory_limit=k * mf,
        ),
        st.integers(2, 3),
        st.integers(2, 5),
        st.integers(1, 5),
        st.integers(1, 5),
        st.integers(0, 4),
        st.integers(0, 3),
        st.integers(1, 6),
        st.integers(0, 6),
        st.integers(1, 6),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipe=small_pipelines(), objective=st.sampled_from(["span", "makespan"]))
def test_bound_never_exceeds_a_valid_schedule(pipe, objective):
    """Every template that fits and CP-SAT's best schedule (which explores far more orders) stay at or
    above the bound."""
    from solvers.cpsat import cpsat

    bound = pipeline_bounds(pipe, list(range(pipe.num_stages)), objective).get("pipeline_idle", 0)
    for name in template_names():
        try:
            sol = solve_pipeline(pipe, schedule=name, objective=objective)
        except (TemplateError, InvalidSchedule, Deadlock):
            continue
        if sol.stage_to_rank == list(range(pipe.num_stages)):
            assert sol.metrics["value"] >= bound, name
    tasks = to_problem(build_graph(pipe, split_backward=True), pipe.capacity)
    res = cpsat(tasks.problem, objective=objective, time_limit=1.0, symmetry=symmetry_chains(tasks))
    if res.schedule is not None:
        validate(tasks.problem, res.schedule)
        assert res.objective >= bound
    if res.status == "optimal":
        # the in-order restriction loses nothing: the unrestricted optimum is the same
        free = cpsat(tasks.problem, objective=objective, time_limit=3.0, hint=res.schedule)
        if free.status == "optimal":
            assert free.objective == res.objective
