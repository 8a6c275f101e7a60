"""The bottleneck partitioner: the dynamic program against exhaustive search and against CP-SAT."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layersched.describe.partition import (
    PartitionInput,
    contiguous_partition,
    cpsat_partition_items,
    optimal_contiguous,
)


def exhaustive(work, processors, **options) -> float:
    """The best contiguous bottleneck by trying every set of cut positions (inf when none fits)."""
    inp = PartitionInput.make(work, processors, **options)
    best = np.inf
    for cuts in itertools.combinations(range(1, inp.n), processors - 1):
        assignment = np.repeat(np.arange(processors), np.diff([0, *cuts, inp.n]))
        part = inp.evaluate(assignment, "exhaustive")
        if (part.stage_memory <= inp.capacity).all():
            best = min(best, part.bottleneck)
    return best


@st.composite
def cases(draw, max_items: int = 8, integer: bool = False):
    n = draw(st.integers(1, max_items))
    P = draw(st.integers(1, n))
    num = st.integers(0, 9) if integer else st.floats(0, 10, allow_nan=False)
    opts = {
        "cut": draw(st.lists(num, min_size=n - 1, max_size=n - 1)),
        "comm": draw(st.sampled_from(["overlap", "serial"])),
    }
    if draw(st.booleans()):
        opts["fixed"] = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
        opts["scaled"] = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
        opts["scale"] = list(range(P, 0, -1))
        opts["capacity"] = draw(st.integers(5, 60))
    if not integer and draw(st.booleans()):
        opts["speed"] = draw(st.lists(st.floats(0.5, 2), min_size=P, max_size=P))
    return draw(st.lists(num, min_size=n, max_size=n)), P, opts


@settings(max_examples=300, deadline=None)
@given(cases())
def test_dp_matches_exhaustive_search(case):
    work, P, opts = case
    expected = exhaustive(work, P, **opts)
    if not np.isfinite(expected):
        with pytest.raises(ValueError, match="fits in memory"):
            optimal_contiguous(work, P, **opts)
        return
    part = optimal_contiguous(work, P, **opts)
    assert part.bottleneck == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert part.lower_bound == part.bottleneck
    assert [i for p in part.parts for i in p] == list(range(len(work)))
    assert all(part.parts)
    if "capacity" in opts:
        assert (part.stage_memory <= opts["capacity"]).all()


@settings(max_examples=25, deadline=None)
@given(cases(max_items=7, integer=True))
def test_cpsat_matches_dp_on_contiguous_cases(case):
    work, P, opts = case
    try:
        dp = optimal_contiguous(work, P, **opts)
    except ValueError:
        with pytest.raises(ValueError):
            cpsat_partition_items(work, P, contiguous=True, resolution=1, time_limit=10, **opts)
        return
    cp = cpsat_partition_items(work, P, contiguous=True, resolution=1, time_limit=10, **opts)
    assert cp.status == "optimal"
    assert cp.bottleneck == dp.bottleneck
    assert cp.lower_bound == dp.bottleneck


@settings(max_examples=25, deadline=None)
@given(cases(max_items=6))
def test_cpsat_bound_holds_for_the_exact_times_it_rounds(case):
    """CP-SAT sees times rounded to the resolution; its bound scaled back could pass the exact optimum
    (three items of 1.6 on two processors, rounded to 2: bound 4, optimum 3.2). Less the rounding that
    a processor's time can have gained, it holds."""
    work, P, opts = case
    try:
        dp = optimal_contiguous(work, P, **opts)
    except ValueError:
        return
    cp = cpsat_partition_items(work, P, contiguous=True, resolution=1, time_limit=10, **opts)
    assert cp.lower_bound <= dp.bottleneck * (1 + 1e-9) + 1e-9
    assert cp.bottleneck >= dp.bottleneck * (1 - 1e-9)
    assert cp.status == "feasible" or cp.lower_bound >= cp.bottleneck


def test_cpsat_bound_on_rounded_times_example():
    cp = cpsat_partition_items([1.6, 1.6, 1.6], 2, resolution=1, time_limit=10)
    assert cp.bottleneck == pytest.approx(3.2) and cp.lower_bound == pytest.approx(2.8)
    assert cp.status == "feasible"


def test_cpsat_general_case_beats_contiguous_and_respects_memory():
    # two heavy items first: only a non-contiguous split pairs each with a light one
    work = [5, 5, 1, 1]
    dp = optimal_contiguous(work, 2)
    cp = cpsat_partition_items(work, 2, resolution=1, time_limit=10)
    assert (dp.bottleneck, cp.bottleneck, cp.lower_bound, cp.status) == (7.0, 6.0, 6, "optimal")
    # heterogeneous devices: a twice-as-fast processor takes twice the work, memory caps the other
    cp = cpsat_partition_items(
        [2, 2, 2], 2, speed=[2, 1], fixed=[1, 1, 1], capacity=[3, 1], resolution=0.5, time_limit=10
    )
    assert cp.bottleneck == 2.0 and sorted(map(len, cp.parts)) == [1, 2]
    assert (cp.stage_memory <= [3, 1]).all()


def least_overflow_exhaustive(work, processors, **options) -> float:
    """The least, over every contiguous split, of its largest memory minus capacity."""
    inp = PartitionInput.make(work, processors, **options)
    best = np.inf
    for cuts in itertools.combinations(range(1, inp.n), processors - 1):
        assignment = np.repeat(np.arange(processors), np.diff([0, *cuts, inp.n]))
        best = min(best, float((inp.evaluate(assignment, "exhaustive").stage_memory - inp.capacity).max()))
    return best


@settings(max_examples=300, deadline=None)
@given(cases())
def test_an_infeasible_split_names_a_true_lower_bound_on_its_overflow(case):
    """Without a split that fits, the message gives at least how far the best one overflows: never more
    than it (found by bisection with a greedy, which lets processors go empty)."""
    work, P, opts = case
    exact = least_overflow_exhaustive(work, P, **opts)
    if exact <= 0:
        return
    with pytest.raises(ValueError, match="fits in memory: the best one needs") as info:
        optimal_contiguous(work, P, **opts)
    said = float(str(info.value).split("needs ")[1].split(" more")[0].removeprefix("at least "))
    assert 0 < said <= exact * (1 + 1e-3)  # printed to 4 significant digits


@settings(max_examples=150, deadline=None)
@given(cases())
def test_the_table_worked_through_in_small_blocks_gives_the_same_split(case):
    """`_dp_table` goes through the ends in blocks to keep its memory bounded; blocks of one or two
    ends give the split of the whole table."""
    import layersched.describe.partition as partition

    work, P, opts = case
    try:
        whole = optimal_contiguous(work, P, **opts)
    except ValueError:
        return
    saved = partition.DP_BLOCK_ELEMENTS
    try:
        partition.DP_BLOCK_ELEMENTS = 3
        blocks = optimal_contiguous(work, P, **opts)
    finally:
        partition.DP_BLOCK_ELEMENTS = saved
    assert blocks.parts == whole.parts and blocks.bottleneck == whole.bottleneck


def test_a_long_model_that_fits_nowhere_is_said_in_little_memory():
    """5,000 items that fit on no split of 4 processors: the overflow came from a table over all
    splits, 8 (n + 1)^2 bytes an array (a model of 20,000 layers passed 24 GB); now a bisection."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="needs at least"):
            optimal_contiguous(np.ones(5000), 4, fixed=np.ones(5000), capacity=100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, peak


def test_infeasible_memory_says_by_how_much():
    with pytest.raises(ValueError, match=r"needs at least 2 more"):
        optimal_contiguous([1, 1, 1], 2, fixed=[3, 3, 3], capacity=4)


def test_contiguous_partition_unchanged():
    assert contiguous_partition([4, 1, 1, 2, 2], 2) == [[0, 1], [2, 3, 4]]


def test_thousand_items_on_64_processors_is_exact_on_a_known_case():
    # 1000 equal items with small cuts: the optimum puts 15 or 16 items on each processor
    part = optimal_contiguous(np.ones(1000), 64, cut=np.full(999, 0.5), comm="serial")
    assert part.bottleneck == 17.0  # ceil(1000 / 64) = 16 items + a cut on one side; both sides cost 17 too
    assert sum(map(len, part.parts)) == 1000


@pytest.mark.slow
def test_thousand_items_on_64_processors_timing_is_reported():
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    optimal_contiguous(rng.random(1000), 64, cut=rng.random(999) * 0.01, fixed=rng.random(1000), capacity=40)
    assert time.perf_counter() - t0 < 10  # the 1 s claim is measured by `layersched bench layerpipe`
