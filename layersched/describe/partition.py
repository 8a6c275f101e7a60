"""Contiguous partition of a layer sequence into stages, balancing the slowest stage.

Example
-------
>>> contiguous_partition([4, 1, 1, 2, 2], 2)
[[0, 1], [2, 3, 4]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np


def contiguous_partition(costs: Sequence[float], parts: int) -> list[list[int]]:
    """Split ``costs`` into ``parts`` non-empty contiguous runs minimising the largest run's sum.

    Exact: binary search over the candidate bottleneck values (the sums of contiguous runs), each
    tested greedily, O(n log n) after the prefix sums. Ties keep earlier stages as full as possible.
    """
    n = len(costs)
    if parts < 1:
        raise ValueError("parts must be at least 1")
    if n < parts:
        raise ValueError(f"cannot split {n} layers into {parts} stages: at least {parts} layers are needed")
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(costs, dtype=float))])

    def cuts_for(limit: float) -> list[int] | None:
        # greedy: extend each stage while it stays under the limit and enough layers remain
        cuts, lo = [], 0
        for stage in range(parts - 1):
            hi = int(np.searchsorted(prefix, prefix[lo] + limit, side="right")) - 1
            hi = min(hi, n - (parts - 1 - stage))
            if hi <= lo:
                return None
            cuts.append(hi)
            lo = hi
        return cuts if prefix[n] - prefix[lo] <= limit + 1e-12 * max(1.0, limit) else None

    candidates = np.unique((prefix[None, :] - prefix[:, None])[np.triu_indices(n + 1, 1)])
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cuts_for(float(candidates[mid])) is None:
            lo = mid + 1
        else:
            hi = mid
    cuts = cuts_for(float(candidates[lo]))
    assert cuts is not None
    bounds = [0, *cuts, n]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(parts)]


# -- bottleneck partitioning with transfers, memory and devices -------------------------------------
COMM_MODES = ("overlap", "serial")
"""``overlap``: a cut's transfer runs on its own link, in parallel with compute (PipeDream's
assumption), so it is a pipeline stage of its own: the bottleneck is ``max(stage compute, cut)``.
``serial``: a stage also spends the transfer time of the cuts on both of its sides."""


@dataclass(frozen=True)
class Partition:
    """An assignment of items (layers or sub-layers) to processors and what it costs.

    ``parts[p]`` lists processor ``p``'s items; ``stage_time[p]`` its time per micro-batch (compute,
    plus its cuts under ``serial``); ``bottleneck`` the slowest processor (or link, under
    ``overlap``); ``lower_bound`` a proven bound on the optimum (equal to it when ``status`` is
    ``optimal``); ``stage_memory[p]`` its memory in the units of the inputs.
    """

    parts: list[list[int]]
    bottleneck: float
    lower_bound: float
    stage_time: np.ndarray
    stage_memory: np.ndarray
    method: str
    status: str = "optimal"
    runtime: float = 0.0


def _vector(value, length: int, name: str, default: float) -> np.ndarray:
    arr = np.full(length, default, dtype=float) if value is None else np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(length, float(arr))
    if arr.shape != (length,):
        raise ValueError(f"{name}: expected {length} values, got shape {arr.shape}")
    if (arr < 0).any():
        raise ValueError(f"{name}: values must be non-negative")
    return arr


@dataclass(frozen=True)
class PartitionInput:
    """The checked inputs of a partitioning problem with ``n`` items and ``P`` processors.

    Stage ``p`` holding items ``S`` needs ``sum(fixed[S]) + scale[p] * sum(scaled[S])`` memory (say
    weights and optimizer state, plus the activations of ``scale[p]`` micro-batches in flight) and
    takes ``sum(work[S]) / speed[p]`` compute. ``cut[i]`` is the transfer time when items ``i`` and
    ``i + 1`` sit on different processors (both directions).
    """

    work: np.ndarray
    processors: int
    cut: np.ndarray
    fixed: np.ndarray
    scaled: np.ndarray
    scale: np.ndarray
    capacity: np.ndarray
    speed: np.ndarray
    comm: str

    @classmethod
    def make(
        cls,
        work: Sequence[float],
        processors: int,
        *,
        cut: Sequence[float] | None = None,
        fixed: Sequence[float] | None = None,
        scaled: Sequence[float] | None = None,
        scale: Sequence[float] | float | None = None,
        capacity: Sequence[float] | float | None = None,
        speed: Sequence[float] | float | None = None,
        comm: str = "overlap",
    ) -> PartitionInput:
        n = len(work)
        if processors < 1:
            raise ValueError("processors must be at least 1")
        if n < processors:
            raise ValueError(
                f"cannot split {n} items onto {processors} processors: each needs at least one; use at most {n}"
            )
        if comm not in COMM_MODES:
            raise ValueError(f"unknown comm mode {comm!r}; valid: {', '.join(COMM_MODES)}")
        speed_arr = _vector(speed, processors, "speed", 1.0)
        if (speed_arr <= 0).any():
            raise ValueError("speed: values must be positive")
        return cls(
            work=_vector(work, n, "work", 0.0),
            processors=processors,
            cut=_vector(cut, n - 1, "cut", 0.0),
            fixed=_vector(fixed, n, "fixed", 0.0),
            scaled=_vector(scaled, n, "scaled", 0.0),
            scale=_vector(scale, processors, "scale", 1.0),
            capacity=_vector(capacity, processors, "capacity", np.inf),
            speed=speed_arr,
            comm=comm,
        )

    @property
    def n(self) -> int:
        return len(self.work)

    def evaluate(self, assignment: Sequence[int], method: str, **extra) -> Partition:
        """The `Partition` of ``assignment`` (processor of each item), with its costs recomputed."""
        a = np.asarray(assignment, dtype=np.int64)
        P = self.processors
        compute = np.bincount(a, weights=self.work, minlength=P) / self.speed
        memory = np.bincount(a, weights=self.fixed, minlength=P) + self.scale * np.bincount(
            a, weights=self.scaled, minlength=P
        )
        crossing = a[:-1] != a[1:]
        cut_used = np.where(crossing, self.cut, 0.0)
        if self.comm == "serial":
            stage = compute + np.bincount(a[:-1], weights=cut_used, minlength=P)
            stage += np.bincount(a[1:], weights=cut_used, minlength=P)
            bottleneck = float(stage.max())
        else:
            stage = compute
            bottleneck = float(max(stage.max(), cut_used.max(initial=0.0)))
        parts = [np.flatnonzero(a == p).tolist() for p in range(P)]
        extra.setdefault("lower_bound", bottleneck)
        return Partition(parts, bottleneck, stage_time=stage, stage_memory=memory, method=method, **extra)


DP_BLOCK_ELEMENTS = 2**22
"""`_dp_table` works through the ends ``J`` in blocks of about this many (first item, end) pairs, so
that its arrays stay near 32 MB each: all at once they took ``8 (width + 1) (n + 1)`` bytes apiece,
and a model of 20,000 layers passed 24 GB before any message."""


def _dp_table(inp: PartitionInput, cost_of, width: int) -> tuple[float, list[np.ndarray]]:
    """Min over contiguous splits of the max over stages of ``cost_of(p, C, M, I, J)``: the cost of
    stage ``p`` holding items ``I..J-1``, given its compute ``C`` and memory ``M`` (arrays of shape
    ``(width + 1, k)`` for a block of ``k`` ends: row ``r`` is the stage of the ``r`` items before
    ``J``, so stages of more than ``width`` items are not considered). The optimum and, per stage, its
    first item for each end ``J``."""
    n, P = inp.n, inp.processors
    pre = np.concatenate([[0.0], np.cumsum(inp.work)])
    fixed = np.concatenate([[0.0], np.cumsum(inp.fixed)])
    scaled = np.concatenate([[0.0], np.cumsum(inp.scaled)])
    rows = np.arange(width + 1)[:, None]
    block = max(1, DP_BLOCK_ELEMENTS // (width + 1))
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    back = []
    for p in range(P):
        new, first = np.full(n + 1, np.inf), np.zeros(n + 1, dtype=np.int64)
        for lo in range(0, n + 1, block):
            J = np.arange(lo, min(n + 1, lo + block))[None, :]
            I = J - rows
            valid = I >= 0
            I = np.where(valid, I, 0)
            empty = ~valid | (I >= J)
            memory = fixed[J] - fixed[I] + inp.scale[p] * (scaled[J] - scaled[I])
            cost = cost_of(p, pre[J] - pre[I], memory, I, J)
            total = np.where(empty, np.inf, np.maximum(best[I], cost))
            arg = np.argmin(total, axis=0)
            cols = np.arange(J.shape[1])
            new[J[0]] = total[arg, cols]
            first[J[0]] = J[0] - arg
        best = new
        back.append(first)
    return float(best[n]), back


def _least_overflow(inp: PartitionInput) -> float:
    """A lower bound on how far the best contiguous split overflows memory (the least, over splits, of
    the largest memory minus capacity of a processor). Bisection on the overflow ``e``: a split within
    ``e`` exists, empty stages allowed, when giving each processor in turn the longest run of items
    that fits in its capacity plus ``e`` covers them all, for a run's memory only grows with its
    length. With the empty stages allowed it is a lower bound; it takes ``O(P log n)`` steps each
    time, where a table over all splits holds ``n^2`` numbers."""
    n, P = inp.n, inp.processors
    fixed = np.concatenate([[0.0], np.cumsum(inp.fixed)]).tolist()
    scaled = np.concatenate([[0.0], np.cumsum(inp.scaled)]).tolist()
    scale, cap = [float(x) for x in inp.scale], [float(x) for x in inp.capacity]

    def covers(e: float) -> bool:
        j = 0
        for p in range(P):
            most = fixed[j] + scale[p] * scaled[j] + cap[p] * (1 + 1e-12) + e  # the DP's tolerance
            lo, hi = j, n  # the last end k whose run j..k-1 fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if fixed[mid] + scale[p] * scaled[mid] <= most else (lo, mid - 1)
            j = lo
            if j >= n:
                return True
        return False

    if covers(0.0):
        return 0.0
    lo, hi = 0.0, fixed[n] + max(scale) * scaled[n]  # one processor holding everything fits within hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi) or hi - lo <= 1e-9 * hi:
            break
        lo, hi = (lo, mid) if covers(mid) else (mid, hi)
    return lo  # no split fits within lo even with empty processors: a lower bound


def _no_split(processors: int, overflow: str) -> ValueError:
    """The error for memory that no contiguous split onto ``processors`` fits, by ``overflow``."""
    return ValueError(
        f"no contiguous split onto {processors} processors fits in memory: the best one needs {overflow} more "
        "on its fullest processor; add processors, memory, or a schedule with fewer micro-batches in flight"
    )


def optimal_contiguous(work: Sequence[float], processors: int, **options) -> Partition:
    """Exact contiguous partition: processor ``p`` takes the ``p``-th run of items, minimising the
    bottleneck under memory limits, with transfers at the cuts and per-processor speeds.

    A dynamic program over (processor, last item), vectorised over the first item: ``O(P n^2)``.
    ``options`` are those of `PartitionInput.make` (``cut``, ``fixed``, ``scaled``, ``scale``,
    ``capacity``, ``speed``, ``comm``). Raises ``ValueError`` when no split fits in memory, saying by
    how much the tightest split overflows.

    Example
    -------
    >>> part = optimal_contiguous([4, 1, 1, 2, 2], 2, cut=[0, 0, 5, 0])
    >>> part.parts, part.bottleneck
    ([[0, 1], [2, 3, 4]], 5.0)
    """
    import time

    t0 = time.perf_counter()
    inp = PartitionInput.make(work, processors, **options)
    cutb = np.concatenate([[0.0], inp.cut, [0.0]])
    P = inp.processors

    def stage_cost(p: int, compute: np.ndarray, memory: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        t = compute / inp.speed[p]
        if inp.comm == "serial":
            t = t + cutb[i] + cutb[j]
        else:
            t = np.maximum(t, cutb[j])
        return np.where(memory > inp.capacity[p] * (1 + 1e-12), np.inf, t)

    # Stages slower than a known bound cannot be in a solution that beats it: only stages of at
    # most `width` items need be tried, and the bound doubles until a solution is found under it.
    overflow = _least_overflow(inp)  # no split fits: said at once, without the table over all splits
    if overflow > 0:
        raise _no_split(P, f"at least {overflow:.4g}")
    n, pre = inp.n, np.concatenate([[0.0], np.cumsum(inp.work)])
    limit = max(pre[n] / inp.speed.sum(), float(inp.work.max(initial=0.0)) / inp.speed.max(), 1e-300) * 2
    while True:
        start = np.searchsorted(pre, pre[1:] - limit * inp.speed.max() * (1 + 1e-9), side="left")
        width = min(n, int((np.arange(1, n + 1) - start).max(initial=1)) + 1)
        value, back = _dp_table(inp, stage_cost, width)
        if value <= limit or width >= n:
            break
        limit *= 2
    if not np.isfinite(value):  # only where every split that fits leaves a processor empty
        excess, _ = _dp_table(inp, lambda p, compute, memory, i, j: memory - inp.capacity[p], n)
        raise _no_split(P, f"{excess:.4g}")
    bounds, j = [n], n
    for p in range(P - 1, 0, -1):
        j = int(back[p][j])
        bounds.append(j)
    bounds.reverse()
    assignment = np.repeat(np.arange(P), np.diff([0, *bounds]))
    return inp.evaluate(assignment, "dp", runtime=time.perf_counter() - t0)


def cpsat_partition_items(
    work: Sequence[float],
    processors: int,
    *,
    contiguous: bool = False,
    resolution: float = 1e-9,
    time_limit: float = 10.0,
    workers: int = 2,
    **options,
) -> Partition:
    """The general case by CP-SAT: any item on any processor (or contiguous runs when
    ``contiguous``), heterogeneous speeds and memories, transfers at every cut between processors.

    Times are rounded to integer multiples of ``resolution`` for the solver and the result is
    re-priced exactly. ``lower_bound`` is CP-SAT's proven bound scaled back, less what the rounding
    can have added to a processor's time (every item's rounding up, and two cuts'), so it holds for
    the exact times; ``status`` is ``optimal`` only where that bound meets the result. A contiguous
    DP solution is given as a hint.

    Example
    -------
    >>> part = cpsat_partition_items([3, 3, 2, 2, 2], 2, resolution=1, time_limit=5)
    >>> part.bottleneck, part.status
    (6.0, 'optimal')
    """
    from solvers.cpsat_partition import cpsat_partition

    inp = PartitionInput.make(work, processors, **options)
    P, n = inp.processors, inp.n
    exact = inp.work[:, None] / inp.speed[None, :] / resolution
    ticks = np.rint(exact).astype(np.int64)
    cut_ticks = np.rint(inp.cut / resolution).astype(np.int64)
    # a processor's rounded time exceeds its exact one by at most its items' and two cuts' rounding up
    slack = resolution * (
        float(np.clip(ticks - exact, 0, None).max(axis=1, initial=0).sum())
        + 2 * float(np.clip(cut_ticks - inp.cut / resolution, 0, None).max(initial=0))
    )
    mem = inp.fixed[:, None] + inp.scaled[:, None] * inp.scale[None, :]
    hint = None
    try:
        dp = optimal_contiguous(work, processors, **options)
        hint = np.repeat(np.arange(P), [len(x) for x in dp.parts])
    except ValueError:
        pass
    res = cpsat_partition(
        ticks,
        cut=cut_ticks,
        memory=mem,
        capacity=np.where(np.isfinite(inp.capacity), inp.capacity, np.inf),
        contiguous=contiguous,
        serial=inp.comm == "serial",
        time_limit=time_limit,
        workers=workers,
        hint=hint,
    )
    if res.assignment is None:
        raise ValueError(f"CP-SAT found no partition onto {P} processors ({res.status}); {n} items")
    part = inp.evaluate(res.assignment, "cpsat", runtime=res.runtime)
    bound = min(max(0.0, res.lower_bound * resolution - slack), part.bottleneck)
    status = "optimal" if res.status == "optimal" and bound >= part.bottleneck else "feasible"
    return replace(part, lower_bound=bound, status=status)
