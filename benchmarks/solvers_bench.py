"""Time the solvers on large generated graphs and print a table.

(a) a split-backward pipeline: ``p`` stages, ``m`` micro-batches, tasks F/I/W per stage and
    micro-batch, stage ``s`` fixed to processor ``s``, activation memory held from F until I and W;
(b) a random layered DAG on 8 processors that every task may use.

Optionally (``--cpsat SECONDS``) CP-SAT (with and without the micro-batch symmetry chain) and
CP-SAT LNS on a p=4, m=16 pipeline, with the list schedule as hint.

Usage::

    python benchmarks/solvers_bench.py                # p=32 m=1024 pipeline, 1M-task random DAG
    python benchmarks/solvers_bench.py --quick        # 10x smaller
    python benchmarks/solvers_bench.py --cpsat 20     # add CP-SAT rows on p=4, m=16
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import numpy as np

from solvers import Problem, validate
from solvers.listsched import list_schedule


def pipeline_problem(
    p: int, m: int, *, forward: int = 2, inputs: int = 2, weights: int = 1, delay: int = 1, memory: bool = True
) -> Problem:
    """Split-backward pipeline: task ids ``kind * p * m + s * m + i`` for kind F=0, I=1, W=2.

    F(s,i) -> F(s+1,i), F(p-1,i) -> I(p-1,i), I(s+1,i) -> I(s,i), I(s,i) -> W(s,i). With
    ``memory``, F allocates 2, I and W release 1 each, and stage ``s`` holds ``p - s``
    micro-batches (the 1F1B limit).
    """
    s, i = np.meshgrid(np.arange(p), np.arange(m), indexing="ij")
    F, I, W = (k * p * m + s * m + i for k in range(3))
    edges = np.concatenate(
        [
            np.stack([F[:-1].ravel(), F[1:].ravel()], axis=1),
            np.stack([F[-1], I[-1]], axis=1),
            np.stack([I[1:].ravel(), I[:-1].ravel()], axis=1),
            np.stack([I.ravel(), W.ravel()], axis=1),
        ]
    )
    n = 3 * p * m
    stage = np.tile(np.repeat(np.arange(p), m), 3)
    allowed = np.zeros((n, p), dtype=bool)
    allowed[np.arange(n), stage] = True
    duration = np.repeat([forward, inputs, weights], p * m)
    delays = np.full(len(edges), delay)
    if not memory:
        return Problem(duration=duration, allowed=allowed, edges=edges, delay=delays)
    mem = np.repeat([2, -1, -1], p * m)
    return Problem(
        duration=duration, allowed=allowed, edges=edges, delay=delays, mem_delta=mem, capacity=2 * (p - np.arange(p))
    )


def random_layered_problem(n: int, processors: int = 8, *, width: int = 16, max_in: int = 3, seed: int = 0) -> Problem:
    """``n`` tasks in layers of ``width``; each task after the first layer has 1..``max_in``
    predecessors in the previous layer. Durations 1..10, delays 0..5, every processor allowed."""
    rng = np.random.default_rng(seed)
    layer = np.arange(n) // width
    later = np.flatnonzero(layer > 0)
    k = rng.integers(1, max_in + 1, size=len(later))
    dst = np.repeat(later, k)
    src = (layer[dst] - 1) * width + rng.integers(0, width, size=len(dst))
    edges = np.unique(np.stack([src, dst], axis=1), axis=0)
    return Problem(
        duration=rng.integers(1, 11, size=n),
        num_processors=processors,
        edges=edges,
        delay=rng.integers(0, 6, size=len(edges)),
    )


def _row(name: str, problem: Problem, solve) -> list[str]:
    t0 = time.perf_counter()
    result = solve(problem)
    t_solve = time.perf_counter() - t0
    t0 = time.perf_counter()
    if result.schedule is not None:
        validate(problem, result.schedule)
    t_valid = time.perf_counter() - t0
    gap = f"{result.gap:.1%}" if result.gap is not None else "-"
    return [
        name,
        f"{problem.num_tasks:,}",
        f"{len(problem.edges):,}",
        result.solver,
        result.status,
        f"{t_solve:.2f}",
        f"{t_valid:.2f}",
        str(result.objective),
        str(result.lower_bound),
        gap,
    ]


def _print(rows: list[list[str]]) -> None:
    head = ["instance", "tasks", "edges", "solver", "status", "solve s", "validate s", "makespan", "lower bound", "gap"]
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        cells = [x.rjust(w) if c else x.ljust(w) for c, (x, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller instances")
    parser.add_argument(
        "--cpsat",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also run CP-SAT and LNS on a p=4, m=16 pipeline with this time limit",
    )
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    p, m, n = 32, 1024 // scale, 1_000_000 // scale
    rows = []
    for name, problem in [
        (f"pipeline p={p} m={m}", pipeline_problem(p, m)),
        (f"pipeline p={p} m={m} no memory", pipeline_problem(p, m, memory=False)),
        (f"random layered n={n:,} P=8", random_layered_problem(n)),
    ]:
        rows.append(_row(name, problem, list_schedule))
    if args.cpsat:
        from solvers.cpsat import cpsat
        from solvers.lns import cpsat_lns

        for memory in (True, False):
            name = "pipeline p=4 m=16" + ("" if memory else " no memory")
            small = pipeline_problem(4, 16, memory=memory)
            hint = list_schedule(small).schedule
            # micro-batches are interchangeable: relabelling makes stage 0's forwards start in order
            forwards = [list(range(16))]
            limit = {"time_limit": args.cpsat, "hint": hint}
            rows.append(_row(name, small, list_schedule))
            rows.append(_row(name, small, partial(cpsat, **limit)))
            rows.append(_row(name + " +sym", small, partial(cpsat, **limit, symmetry=forwards)))
            rows.append(_row(name, small, partial(cpsat_lns, **limit, window=48)))
    _print(rows)


if __name__ == "__main__":
    main()
