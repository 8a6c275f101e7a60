"""benchmarks/compiled_probe.py: its loop, run as plain Python, makes `heft`'s schedules task by task."""

from __future__ import annotations

import numpy as np
import pytest

import solvers.listsched
from solvers import Problem
from solvers.listsched import _insert, effective_allowed, upward_rank
from tests.paths import benchmark


def _module(name: str):
    with benchmark(name) as module:
        return module


@pytest.mark.parametrize("max_gaps", [512, 2])
@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("kind", ["layered", "erdos"])
def test_loop_equals_insert(kind, hetero, max_gaps, monkeypatch):
    # with few gaps kept, the oldest are dropped as `_occupy` drops them; a high ratio of transfers
    # to computation leaves many gaps, and tasks inserted into them split or fill them
    probe, bench = _module("compiled_probe"), _module("solvers_bench")
    monkeypatch.setattr(solvers.listsched, "MAX_GAPS", max_gaps)
    for seed in range(4):
        for processors in (2, 3, 5):
            problem, _ = bench.instance(kind, 80, processors, seed, ccr=3.0, hetero=hetero)
            allowed = effective_allowed(problem)
            keys = upward_rank(problem, allowed)
            expected = _insert(problem, allowed, keys)[0]
            proc, start = probe.insert_loop(*probe.loop_inputs(problem), keys.astype(np.float64), max_gaps)
            assert proc.tolist() == expected.processor.tolist()
            assert start.tolist() == expected.start.tolist()


def test_gaps_are_used():
    # the case above must exercise insertion: some task starts before an earlier-placed one on its processor
    probe, bench = _module("compiled_probe"), _module("solvers_bench")
    problem, _ = bench.instance("layered", 80, 3, 0, ccr=3.0)
    keys = upward_rank(problem).astype(np.float64)
    proc, start = probe.insert_loop(*probe.loop_inputs(problem), keys, 512)
    # the placement order: the upward rank falls along every edge, so the ready task of highest rank
    # is the unplaced one of highest rank (ties: lower index)
    order = np.argsort(-keys, kind="stable")
    inserted = any(start[t] < start[u] and proc[t] == proc[u] for i, t in enumerate(order) for u in order[:i])
    assert inserted


@pytest.mark.parametrize(
    "problem",
    [
        Problem(duration=[1, 1], edges=[[0, 1]], mem_delta=[4, -4], capacity=[5]),
        Problem(duration=[1, 1], num_processors=2, group=[0, 0]),
        Problem(duration=[1, 1], allowed=[[1, 0], [1, 1]]),
    ],
)
def test_inputs_refuse_what_the_loop_does_not_cover(problem):
    with pytest.raises(ValueError, match="covers problems without"):
        _module("compiled_probe").loop_inputs(problem)
