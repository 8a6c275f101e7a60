"""benchmarks/compiled_probe.py: its loops, run as plain Python, make `_insert`'s and `_fcp_place`'s
schedules task by task."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers.listsched
from solvers import Problem
from solvers.heuristics import _fcp_place, fcp, fcp_ends, fcp_priority
from solvers.listsched import _insert, effective_allowed, heft, infeasible_reason, upward_rank
from tests.paths import benchmark
from tests.solvers.strategies import heterogeneous, problems


def _module(name: str):
    with benchmark(name) as module:
        return module


PROBE = _module("compiled_probe")


def _same(problem: Problem, keys, pinned=None, extra=None, ties=None, max_gaps: int = 512) -> None:
    expected = _insert(problem, effective_allowed(problem), keys, pinned=pinned, extra=extra, ties=ties)[0]
    options = PROBE.loop_options(problem, pinned, extra, ties)
    proc, start = PROBE.insert_loop(*PROBE.loop_inputs(problem), keys.astype(np.float64), *options, max_gaps)
    assert proc.tolist() == expected.processor.tolist()
    assert start.tolist() == expected.start.tolist()


@pytest.mark.parametrize("max_gaps", [512, 2])
@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("kind", ["layered", "erdos"])
def test_loop_equals_insert_on_the_benchmark(kind, hetero, max_gaps, monkeypatch):
    # with few gaps kept, the oldest are dropped as `_occupy` drops them; a high ratio of transfers
    # to computation leaves many gaps, and tasks inserted into them split or fill them
    bench = _module("solvers_bench")
    monkeypatch.setattr(solvers.listsched, "MAX_GAPS", max_gaps)
    for seed in range(4):
        for processors in (2, 3, 5):
            problem, _ = bench.instance(kind, 80, processors, seed, ccr=3.0, hetero=hetero)
            _same(problem, upward_rank(problem), max_gaps=max_gaps)


@st.composite
def _cases(draw):
    """A problem without memory limits (groups, allowed sets, zero durations; per-processor
    durations and links or not) with `_insert`'s options: pinned processors, extra costs, a tie order."""
    problem = draw(st.one_of(problems(memory=False), heterogeneous(memory=False)))
    n, P = problem.num_tasks, problem.num_processors
    allowed = effective_allowed(problem)
    pinned = extra = ties = None
    if draw(st.booleans()):  # CPoP: some tasks pinned to one of their processors
        pinned = np.array([draw(st.sampled_from([-1, *np.flatnonzero(allowed[t]).tolist()])) for t in range(n)])
    if draw(st.booleans()):  # PEFT: a cost per task and processor
        extra = np.array(draw(st.lists(st.integers(0, 9), min_size=n * P, max_size=n * P))).reshape(n, P)
    if draw(st.booleans()):
        ties = np.array(draw(st.permutations(range(P))))
    return problem, pinned, extra, ties


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_loop_equals_insert_with_every_option(case):
    problem, pinned, extra, ties = case
    if infeasible_reason(problem, effective_allowed(problem)):
        return  # `_insert` is not run there
    _same(problem, upward_rank(problem), pinned, extra, ties)


def test_gaps_are_used():
    # the benchmark case above must exercise insertion: some task starts before an earlier-placed one
    # on its processor
    bench = _module("solvers_bench")
    problem, _ = bench.instance("layered", 80, 3, 0, ccr=3.0)
    keys = upward_rank(problem)
    proc, start = PROBE.insert_loop(
        *PROBE.loop_inputs(problem), keys.astype(np.float64), *PROBE.loop_options(problem), 512
    )
    # the placement order: the upward rank falls along every edge, so the ready task of highest rank
    # is the unplaced one of highest rank (ties: lower index)
    order = np.argsort(-keys, kind="stable")
    assert any(start[t] < start[u] and proc[t] == proc[u] for i, t in enumerate(order) for u in order[:i])


def test_inputs_refuse_memory_limits():
    with pytest.raises(ValueError, match="without memory limits"):
        PROBE.loop_inputs(Problem(duration=[1, 1], edges=[[0, 1]], mem_delta=[4, -4], capacity=[5]))


def _same_fcp(problem: Problem, ends: bool, transfer_weight: float = 1.0) -> None:
    allowed = effective_allowed(problem)
    keys = fcp_priority(problem, allowed, transfer_weight)
    expected = _fcp_place(problem, allowed, keys, float("inf"), ends)
    proc, start = PROBE.fcp_loop(*PROBE.loop_inputs(problem), keys.astype(np.float64), ends)
    assert proc.tolist() == expected.processor.tolist()
    assert start.tolist() == expected.start.tolist()


@pytest.mark.parametrize("ends", [False, True])
@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("kind", ["layered", "erdos"])
def test_fcp_loop_equals_fcp_place_on_the_benchmark(kind, hetero, ends):
    bench = _module("solvers_bench")
    for seed in range(4):
        for processors in (2, 3, 5):
            problem, _ = bench.instance(kind, 80, processors, seed, ccr=3.0, hetero=hetero)
            _same_fcp(problem, ends, transfer_weight=(0.0, 1.0, 2.0)[seed % 3])


@settings(max_examples=300, deadline=None)
@given(st.one_of(problems(memory=False), heterogeneous(memory=False)), st.booleans())
def test_fcp_loop_equals_fcp_place_on_random_problems(problem, ends):
    """Groups, allowed sets, zero durations, unequal processors and links, both of FCP's rules."""
    if infeasible_reason(problem, effective_allowed(problem)):
        return  # `_fcp_place` is not run there
    _same_fcp(problem, ends)


@settings(max_examples=200, deadline=None)
@given(st.one_of(problems(memory=False), heterogeneous(memory=False)), st.sampled_from([1.0, 0.0, 0.25, 2 / 3, 2.0]))
def test_rank_loop_equals_upward_rank_and_heft_call_equals_heft(problem, weight):
    """Groups, allowed sets, unequal processors and links, HEFT's and `best`'s transfer weights."""
    if infeasible_reason(problem, effective_allowed(problem)):
        return  # `heft` places nothing there
    _, _, _, _, _, sptr, stgt, indeg, *_ = PROBE.loop_inputs(problem)
    edges = PROBE.successor_edges(problem)
    rank = PROBE.rank_loop(*PROBE.rank_inputs(problem), weight, sptr, stgt, edges, indeg, False)
    assert rank.tolist() == upward_rank(problem, transfer_weight=weight).tolist()
    full = PROBE.rank_loop(*PROBE.rank_inputs(problem), weight, sptr, stgt, edges, indeg, True)
    assert full.tolist() == fcp_priority(problem, effective_allowed(problem), weight).tolist()
    proc, start = PROBE.heft_call(*PROBE.call_inputs(problem, weight))
    expected = heft(problem, priority=upward_rank(problem, transfer_weight=weight)).schedule
    assert proc.tolist() == expected.processor.tolist()
    assert start.tolist() == expected.start.tolist()


@settings(max_examples=200, deadline=None)
@given(st.one_of(problems(memory=False), heterogeneous(memory=False)), st.sampled_from([1.0, 0.0, 2.0]), st.booleans())
def test_fcp_call_equals_fcp_and_fcp_ends(problem, weight, ends):
    if infeasible_reason(problem, effective_allowed(problem)):
        return  # FCP places nothing there
    proc, start = PROBE.fcp_call(*PROBE.fcp_call_inputs(problem, weight, ends))
    expected = (fcp_ends(problem) if ends else fcp(problem, transfer_weight=weight)).schedule
    if ends and weight != 1.0:  # `fcp_ends` has weight 1 only
        allowed = effective_allowed(problem)
        expected = _fcp_place(problem, allowed, fcp_priority(problem, allowed, weight), float("inf"), True)
    assert proc.tolist() == expected.processor.tolist()
    assert start.tolist() == expected.start.tolist()
