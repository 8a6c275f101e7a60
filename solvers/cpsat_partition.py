"""CP-SAT for bottleneck partitioning: items in a chain onto processors, minimising the slowest one.

Generic: ``n`` items in a sequence (a chain), ``P`` processors. Item ``i`` costs ``work[i, p]`` time
and ``memory[i, p]`` memory on processor ``p``; cutting the chain between ``i`` and ``i + 1`` (the two
on different processors) costs ``cut[i]``. The model:

- ``x[i, p]``: item ``i`` on ``p``, exactly one per item; ``memory`` within ``capacity`` per processor;
- ``d[i, p] = |x[i, p] - x[i + 1, p]|`` (linearised; 1 when the cut touches ``p``);
- ``serial``: ``T >= sum_i work[i, p] x[i, p] + sum_i cut[i] d[i, p]``; otherwise the link is a stage
  of its own: ``T >= sum_i work[i, p] x[i, p]`` and ``T >= cut[i] * (cut i used)``;
- ``contiguous``: a stage index ``s[i]`` from 0 to ``P - 1`` rising by 0 or 1 per item;
- minimise ``T``.

CP-SAT comes in through `solvers.cpsat` (the one module that imports OR-Tools).

Example
-------
>>> import numpy as np
>>> r = cpsat_partition(np.array([[3, 3], [3, 3], [2, 2], [2, 2], [2, 2]]), time_limit=5)
>>> r.status, r.objective, sorted(np.bincount(r.assignment).tolist())
('optimal', 6, [2, 3])
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from solvers.cpsat import _STATUS, cp_model, solve_interruptibly


@dataclass(frozen=True)
class PartitionResult:
    """Processor of each item (None when none was found), the bottleneck, CP-SAT's bound and status."""

    assignment: np.ndarray | None
    objective: int | None
    lower_bound: int
    status: str
    runtime: float


def cpsat_partition(
    work: np.ndarray,
    *,
    cut: np.ndarray | None = None,
    memory: np.ndarray | None = None,
    capacity: np.ndarray | None = None,
    contiguous: bool = False,
    serial: bool = False,
    time_limit: float = 10.0,
    workers: int = 2,
    hint: np.ndarray | None = None,
) -> PartitionResult:
    """Minimise the bottleneck of a chain of items on processors (see the module docstring).

    Parameters
    ----------
    work : (n, P) int
        Time of each item on each processor.
    cut : (n - 1,) int, optional
        Transfer time of each cut of the chain.
    memory : (n, P) float, optional
        Memory of each item on each processor (any unit; scaled to integers here).
    capacity : (P,) float, optional
        Memory per processor (``inf`` for none).
    contiguous : bool
        Processor ``p`` takes the ``p``-th run of the chain (every processor at least one item).
    serial : bool
        Transfers add to both processors' time instead of running on a separate link.
    hint : (n,) int, optional
        A starting assignment.
    """
    t0 = time.perf_counter()
    work = np.asarray(work, dtype=np.int64)
    n, P = work.shape
    cut = np.zeros(max(n - 1, 0), np.int64) if cut is None else np.asarray(cut, dtype=np.int64)
    if len(cut) != max(n - 1, 0) or (cut < 0).any() or (work < 0).any():
        raise ValueError(f"cut: expected {max(n - 1, 0)} non-negative values; work must be non-negative")
    m = cp_model.CpModel()
    x = [[m.NewBoolVar(f"x{i}_{p}") for p in range(P)] for i in range(n)]
    for i in range(n):
        m.AddExactlyOne(x[i])
    if memory is not None and capacity is not None:
        memory, capacity = np.asarray(memory, dtype=float), np.asarray(capacity, dtype=float)
        # integers (bytes) are kept exact; other values are rounded to a billionth of the largest item
        exact = bool(np.all(memory == np.round(memory))) and float(memory.max(initial=0.0)) <= 2**40
        unit = 1.0 if exact else max(float(memory.max(initial=0.0)), 1e-300) / 1e9
        for p in range(P):
            if np.isfinite(capacity[p]):
                used = sum(int(round(memory[i, p] / unit)) * x[i][p] for i in range(n))
                m.Add(used <= int(np.floor(capacity[p] / unit + 1e-9)))
    horizon = int(work.max(axis=1).sum() + 2 * cut.sum()) + 1
    T = m.NewIntVar(0, horizon, "T")
    touch = [[m.NewBoolVar(f"d{i}_{p}") for p in range(P)] for i in range(n - 1)]
    for i in range(n - 1):
        for p in range(P):
            m.Add(touch[i][p] >= x[i][p] - x[i + 1][p])
            m.Add(touch[i][p] >= x[i + 1][p] - x[i][p])
    for p in range(P):
        load = sum(int(work[i, p]) * x[i][p] for i in range(n))
        if serial:
            load += sum(int(cut[i]) * touch[i][p] for i in range(n - 1))
        m.Add(T >= load)
    if not serial:
        for i in range(n - 1):
            if cut[i]:
                # the cut is used when the two items differ: then some processor is touched
                for p in range(P):
                    m.Add(T >= int(cut[i]) * (x[i][p] - x[i + 1][p]))
    if contiguous:
        if n < P:
            raise ValueError(f"a contiguous split of {n} items onto {P} processors is impossible")
        s = [m.NewIntVar(0, P - 1, f"s{i}") for i in range(n)]
        for i in range(n):
            m.Add(s[i] == sum(p * x[i][p] for p in range(P)))
        m.Add(s[0] == 0)
        m.Add(s[-1] == P - 1)
        for i in range(n - 1):
            m.Add(s[i + 1] - s[i] >= 0)
            m.Add(s[i + 1] - s[i] <= 1)
    if hint is not None:
        for i, q in enumerate(np.asarray(hint).tolist()):
            for p in range(P):
                m.AddHint(x[i][p], int(p == q))
    m.Minimize(T)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = workers
    code, interrupted = solve_interruptibly(solver, m, None)
    if interrupted:
        raise KeyboardInterrupt  # a partition is all or nothing
    status = _STATUS.get(code, "unknown")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return PartitionResult(None, None, 0, status, time.perf_counter() - t0)
    assignment = np.array([next(p for p in range(P) if solver.Value(x[i][p])) for i in range(n)], dtype=np.int64)
    value = int(solver.Value(T))
    bound = value if code == cp_model.OPTIMAL else int(np.ceil(solver.BestObjectiveBound()))
    return PartitionResult(assignment, value, bound, status, time.perf_counter() - t0)
