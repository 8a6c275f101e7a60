"""CP-SAT bottleneck partitioning of a chain: optimal against brute force over every assignment."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.cpsat_partition import cpsat_partition


def bottleneck(work, cut, a, serial):
    P = work.shape[1]
    load = np.array([work[a == p, p].sum() for p in range(P)], dtype=float)
    crossing = np.flatnonzero(a[:-1] != a[1:])
    if serial:
        for i in crossing:
            load[a[i]] += cut[i]
            load[a[i + 1]] += cut[i]
        return load.max()
    return max(load.max(), max((cut[i] for i in crossing), default=0))


def brute_force(work, cut, memory, capacity, serial, contiguous):
    n, P = work.shape
    best = np.inf
    for a in itertools.product(range(P), repeat=n):
        a = np.array(a)
        if contiguous and (a[0] != 0 or a[-1] != P - 1 or (np.diff(a) < 0).any() or (np.diff(a) > 1).any()):
            continue
        if any(memory[a == p, p].sum() > capacity[p] for p in range(P)):
            continue
        best = min(best, bottleneck(work, cut, a, serial))
    return best


@st.composite
def chains(draw):
    n = draw(st.integers(1, 6))
    P = draw(st.integers(1, 3))
    ints = st.integers(0, 9)
    work = np.array(draw(st.lists(st.lists(ints, min_size=P, max_size=P), min_size=n, max_size=n)))
    cut = np.array(draw(st.lists(ints, min_size=n - 1, max_size=n - 1)), dtype=np.int64)
    memory = np.array(draw(st.lists(st.lists(ints, min_size=P, max_size=P), min_size=n, max_size=n)), dtype=float)
    capacity = np.array(draw(st.lists(st.integers(0, 30), min_size=P, max_size=P)), dtype=float)
    return work, cut, memory, capacity, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(chains())
def test_cpsat_partition_is_optimal(case):
    work, cut, memory, capacity, serial, contiguous = case
    n, P = work.shape
    if contiguous and n < P:
        return
    expected = brute_force(work, cut, memory, capacity, serial, contiguous)
    r = cpsat_partition(
        work, cut=cut, memory=memory, capacity=capacity, serial=serial, contiguous=contiguous, time_limit=10
    )
    if not np.isfinite(expected):
        assert r.status == "infeasible" and r.assignment is None
        return
    assert r.status == "optimal"
    assert r.objective == r.lower_bound == expected
    assert bottleneck(work, cut, r.assignment, serial) == expected
    assert all(memory[r.assignment == p, p].sum() <= capacity[p] for p in range(P))
    if contiguous:
        assert r.assignment[0] == 0 and r.assignment[-1] == P - 1 and set(np.diff(r.assignment)) <= {0, 1}
