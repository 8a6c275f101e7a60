"""Time the solvers on large generated graphs and print a table.

(a) a split-backward pipeline: ``p`` stages, ``m`` micro-batches, tasks F/I/W per stage and
    micro-batch, stage ``s`` fixed to processor ``s``, activation memory held from F until I and W;
(b) a random layered DAG on 8 processors that every task may use, scheduled by each list heuristic
    (list, heft, fcp, cpop, peft).

Optionally (``--cpsat SECONDS``) CP-SAT (with and without the micro-batch symmetry chain) and
CP-SAT LNS on a p=4, m=16 pipeline, with the list schedule as hint.

Usage::

    python benchmarks/solvers_bench.py                # p=32 m=1024 pipeline, 1M-task random DAG
    python benchmarks/solvers_bench.py --quick        # 10x smaller
    python benchmarks/solvers_bench.py --cpsat 20     # add CP-SAT rows on p=4, m=16
    python benchmarks/solvers_bench.py --saga         # against saga's HEFT, CPoP, FCP (pip install anrg-saga)
"""

from __future__ import annotations

import argparse
import dataclasses
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


# -- against saga ----------------------------------------------------------------------------------
# saga ("Scheduling Algorithms Gathered", pip install anrg-saga; Python 3.12+) is an optional
# benchmark dependency. Each instance is built once as integers and handed to saga exactly: on equal
# processors every speed is 1 (cost = duration, data size = delay); on heterogeneous ones processor
# and link speeds are 1, 2 or 4 and costs and sizes multiples of 4, so saga's cost / speed is our
# integer ``duration_on`` and its size / link speed our ``delay * link``. saga's schedules are
# translated back and pass our validator.

SPEEDS = (1, 2, 4)


def instance(
    kind: str, n: int, processors: int, seed: int, *, ccr: float = 1.0, hetero: bool = False
) -> tuple[Problem, tuple]:
    """A random DAG of ``n`` tasks: ``layered`` (layers of about sqrt(n) tasks, 1-3 predecessors each
    in the layer before) or ``erdos`` (Erdos-Renyi: about 2n edges, each from a lower to a higher
    index, drawn uniformly). Durations 1..20; delays uniform in 0..2*ccr*mean duration, so the
    communication-to-computation ratio is about ``ccr``. With ``hetero``, the costs are 4 times
    those, each processor and each link (both directions) runs at a speed drawn from 1, 2 and 4,
    and a task's duration is its cost over its processor's speed (``Problem.unrelated``); a delay
    is ``size / 4`` times the link factor ``4 / speed``. Returns the problem and saga's view of it:
    costs, edges, data sizes, processor speeds, link speeds."""
    rng = np.random.default_rng(seed)
    if kind == "layered":
        width = max(2, round(n**0.5))
        layer = np.arange(n) // width
        later = np.flatnonzero(layer > 0)
        k = rng.integers(1, 4, size=len(later))
        dst = np.repeat(later, k)
        src = (layer[dst] - 1) * width + rng.integers(0, width, size=len(dst))
    elif kind == "erdos":
        a, b = rng.integers(0, n, size=(2, 2 * n))
        keep = a != b
        src, dst = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    else:
        raise ValueError(f"unknown instance kind {kind!r}; valid: layered, erdos")
    edges = np.unique(np.stack([src, dst], axis=1), axis=0).reshape(-1, 2)
    duration = rng.integers(1, 21, size=n)
    delay = rng.integers(0, int(round(2 * ccr * duration.mean())) + 1, size=len(edges))
    if not hetero:
        ones = np.ones((processors, processors), dtype=np.int64)
        saga = (duration, edges, delay, np.ones(processors, dtype=np.int64), ones)
        return Problem(duration=duration, num_processors=processors, edges=edges, delay=delay), saga
    speed = rng.choice(SPEEDS, size=processors)
    link_speed = np.triu(rng.choice(SPEEDS, size=(processors, processors)), 1)
    link_speed = link_speed + link_speed.T
    np.fill_diagonal(link_speed, 4)
    cost, size = 4 * duration, 4 * delay
    on = cost[:, None] // speed[None, :]
    saga = (cost, edges, size, speed, link_speed)
    return Problem.unrelated(on, edges=edges, delay=delay, link=4 // link_speed), saga


def _saga_child(conn, problem_arrays, algorithm: str) -> None:
    import logging

    logging.disable(logging.WARNING)  # saga warns that it adds a super source and sink
    from saga import Network, TaskGraph
    from saga.schedulers.cpop import CpopScheduler
    from saga.schedulers.fcp import FCPScheduler
    from saga.schedulers.heft import HeftScheduler

    cost, edges, size, speed, link_speed = (np.asarray(x).tolist() for x in problem_arrays)
    P = len(speed)
    graph = TaskGraph.create(
        [(f"t{i}", float(c)) for i, c in enumerate(cost)],
        [(f"t{u}", f"t{v}", float(c)) for (u, v), c in zip(edges, size, strict=True)],
    )
    network = Network.create(
        [(f"p{q}", float(speed[q])) for q in range(P)],
        [(f"p{a}", f"p{b}", float(link_speed[a][b])) for a in range(P) for b in range(a + 1, P)],
    )
    scheduler = {"HEFT": HeftScheduler, "CPoP": CpopScheduler, "FCP": FCPScheduler}[algorithm]()
    t0 = time.perf_counter()
    schedule = scheduler.schedule(network, graph)
    seconds = time.perf_counter() - t0
    proc, start = [0] * len(cost), [0.0] * len(cost)
    for node, tasks in schedule.mapping.items():
        for task in tasks:
            if task.name.startswith("t"):
                proc[int(task.name[1:])], start[int(task.name[1:])] = int(node[1:]), task.start
    conn.send((seconds, proc, start))


def run_saga(
    problem: Problem, saga: tuple, algorithm: str, timeout: float, hash_seed: int = 0
) -> tuple[float | None, int | None]:
    """saga's ``algorithm`` (HEFT, CPoP or FCP) on ``problem`` in a child process: (seconds inside
    its ``schedule`` call, makespan) after our validator passed its schedule, or (None, None) past
    ``timeout`` seconds (building saga's graph included; the child is killed).

    The child starts with ``PYTHONHASHSEED=hash_seed``: on heterogeneous instances saga's schedules
    depend on Python's string hashing, so without a fixed seed they change from run to run (erdos-het,
    100 tasks, 32 processors, seed 0: HEFT 167, 177 and 167 under hash seeds 0, 1 and 2)."""
    import multiprocessing as mp
    import os

    from solvers import Schedule

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_saga_child, args=(child, saga, algorithm))
    before = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = str(hash_seed)
    try:
        worker.start()
    finally:
        if before is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = before
    if not parent.poll(timeout):
        worker.kill()
        worker.join()
        return None, None
    seconds, proc, start = parent.recv()
    worker.join()
    if any(s != int(s) for s in start):
        raise AssertionError(f"saga {algorithm}: a start time is not an integer; the translation is not exact")
    schedule = Schedule(processor=proc, start=[int(s) for s in start])
    validate(problem, schedule)
    return seconds, schedule.makespan(problem)


def against_saga(
    sizes: list[int],
    processor_counts: list[int],
    seeds: int,
    timeout: float,
    classes: list[str],
    lns: float = 0.0,
    ils: float = 0.0,
    hash_seed: int = 0,
    ccr: float = 1.0,
) -> None:
    """Per instance class (kind, equal or heterogeneous processors, tasks, processors), the median
    over ``seeds`` seeds of makespan and seconds: ours (``best``: `solvers.heuristics.candidates`;
    and ``list`` and ``heft`` alone) against saga's
    HEFT, CPoP and FCP, with our lower bound. With ``lns`` seconds, also CP-SAT LNS from best's
    schedule, with 1 worker, and its proven bound (on heterogeneous processors, that of
    `solvers.bounds`: LNS makes no whole-problem CP-SAT call there). With
    ``ils`` seconds, also `solvers.ils.ils` (best's schedule, or HEFT's with another rank weight
    where better, polished along its critical chain and kicked at each local optimum) with that time
    limit. saga runs with ``PYTHONHASHSEED=hash_seed`` (see `run_saga`). ``ccr``: the instances'
    ratio of communication to computation (`instance`)."""
    from statistics import median

    from solvers.heuristics import best
    from solvers.listsched import heft

    algorithms = ("HEFT", "CPoP", "FCP")
    head = ["class", "tasks", "P", "bound", "ours best", "s", "ours heft", "s", "ours list", "s"]
    head += [c for a in algorithms for c in (f"saga {a}", "s")]
    head += ["best/saga best", "saga HEFT s / ours best s", "/ ours list s"]
    if lns:
        head += [f"ours lns {lns:g}s", "lns bound", "lns/saga best", "lns < best"]
    if ils:
        head += ["ils", "s", "ils/saga best"]
    rows, wins, ils_wins = [], 0, 0
    lns_better = lns_room = 0  # instances where LNS improved on best / where best was above its bound
    for label in classes:
        kind, hetero = label.split("-")[0], label.endswith("-het")
        for n in sizes:
            for P in processor_counts:
                cells: dict[str, list] = {}
                for seed in range(seeds):
                    problem, saga = instance(kind, n, P, seed, ccr=ccr, hetero=hetero)
                    for name, run in (("best", best), ("heft", heft), ("list", list_schedule)):
                        fresh = dataclasses.replace(problem)  # what a problem computes once is not shared between runs
                        t0 = time.perf_counter()
                        result = run(fresh)
                        cells.setdefault(name, []).append((time.perf_counter() - t0, result.objective))
                        validate(problem, result.schedule)
                    cells.setdefault("bound", []).append((0.0, result.lower_bound))
                    if ils:
                        from solvers.ils import ils as iterated

                        fresh = dataclasses.replace(problem)
                        t0 = time.perf_counter()
                        searched = iterated(fresh, time_limit=ils)
                        cells.setdefault("ils", []).append((time.perf_counter() - t0, searched.objective))
                        validate(problem, searched.schedule)
                    for a in algorithms:
                        cells.setdefault(a, []).append(run_saga(problem, saga, a, timeout, hash_seed))
                    if lns:
                        from solvers.lns import cpsat_lns

                        start = best(problem)
                        searched = cpsat_lns(problem, time_limit=lns, workers=1, hint=start.schedule)
                        validate(problem, searched.schedule)
                        cells.setdefault("lns", []).append((searched.lower_bound, searched.objective))
                        # seeds where LNS improved on best, and where best was already at its bound
                        better = searched.objective < start.objective
                        cells.setdefault("lns<", []).append((start.objective <= start.lower_bound, better))

                def med(key: str, i: int, cells: dict = cells):
                    values = [c[i] for c in cells[key] if c[i] is not None]
                    return median(values) if len(values) == len(cells[key]) else None

                def show(value, seconds: bool = False) -> str:
                    if value is None:
                        return f">{timeout:.0f}s" if seconds else "-"
                    return f"{value:.3f}" if seconds else f"{value:g}"

                saga_best = [med(a, 1) for a in algorithms if med(a, 1) is not None]
                ratio = med("best", 1) / min(saga_best) if saga_best else None
                speed = med("HEFT", 0) / med("best", 0) if med("HEFT", 0) is not None else None
                fast = med("HEFT", 0) / med("list", 0) if med("HEFT", 0) is not None else None
                wins += ratio is not None and ratio <= 1
                row = [label, f"{n:,}", str(P), show(med("bound", 1)), show(med("best", 1)), show(med("best", 0), True)]
                row += [c for k in ("heft", "list") for c in (show(med(k, 1)), show(med(k, 0), True))]
                row += [c for a in algorithms for c in (show(med(a, 1)), show(med(a, 0), True))]
                row += [f"{ratio:.3f}" if ratio is not None else "-"]
                row += [f"{x:.0f}x" if x is not None else "-" for x in (speed, fast)]
                if lns and "lns" in cells:
                    row += [show(med("lns", 1)), show(med("lns", 0)), f"{med('lns', 1) / min(saga_best):.3f}"]
                    marks = cells["lns<"]
                    better, room = sum(b for _, b in marks), sum(not at for at, _ in marks)
                    lns_better, lns_room = lns_better + better, lns_room + room
                    row += [f"{better} of {room}"]
                elif lns:
                    row += ["-", "-", "-", "-"]
                if ils:
                    tuned = med("ils", 1) / min(saga_best) if saga_best else None
                    ils_wins += tuned is not None and tuned <= 1
                    row += [show(med("ils", 1)), show(med("ils", 0), True), f"{tuned:.3f}" if tuned else "-"]
                rows.append(row)
                print("  ".join(row), flush=True)
    print()
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        print("  ".join(x.rjust(w) if c > 1 else x.ljust(w) for c, (x, w) in enumerate(zip(r, widths, strict=True))))
    print(f"\nmedians over {seeds} seeds; ours at most saga's best heuristic on {wins} of {len(rows)} classes")
    if ils:
        print(f"ils at most saga's best heuristic on {ils_wins} of {len(rows)} classes")
    if lns:
        print(f"lns below best's makespan on {lns_better} of the {lns_room} instances where best is above its bound")


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
    parser.add_argument(
        "--saga",
        action="store_true",
        help="compare with saga's HEFT, CPoP and FCP instead (needs anrg-saga, Python 3.12+)",
    )
    parser.add_argument("--sizes", default="100,1000,5000", help="--saga: task counts (default 100,1000,5000)")
    parser.add_argument("--processors", default="4,8,32", help="--saga: processor counts (default 4,8,32)")
    parser.add_argument("--seeds", type=int, default=3, help="--saga: seeds per class (default 3)")
    parser.add_argument("--timeout", type=float, default=300.0, help="--saga: seconds per saga run (default 300)")
    parser.add_argument(
        "--lns", type=float, default=0.0, metavar="SECONDS", help="--saga: also CP-SAT LNS for this long per instance"
    )
    parser.add_argument(
        "--ils",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="--saga: also iterated local search from best's schedule (solvers.ils.ils) with this time limit",
    )
    parser.add_argument(
        "--hash-seed",
        type=int,
        default=0,
        help="--saga: PYTHONHASHSEED of saga's processes; its schedules of heterogeneous instances depend on it "
        "(default 0)",
    )
    parser.add_argument(
        "--classes",
        default="layered,erdos,layered-het,erdos-het",
        help="--saga: instance classes, -het for heterogeneous processors and links (default: all four)",
    )
    parser.add_argument(
        "--ccr",
        type=float,
        default=1.0,
        help="--saga: the instances' ratio of communication to computation (default 1: delays uniform in 0..2x "
        "the mean duration)",
    )
    args = parser.parse_args()
    if args.ccr < 0:
        parser.error(f"--ccr: expected a ratio >= 0, got {args.ccr}")
    if args.saga:
        ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
        against_saga(
            ints(args.sizes),
            ints(args.processors),
            args.seeds,
            args.timeout,
            args.classes.split(","),
            args.lns,
            args.ils,
            args.hash_seed,
            args.ccr,
        )
        return
    scale = 10 if args.quick else 1
    p, m, n = 32, 1024 // scale, 1_000_000 // scale
    rows = []
    for name, problem in [
        (f"pipeline p={p} m={m}", pipeline_problem(p, m)),
        (f"pipeline p={p} m={m} no memory", pipeline_problem(p, m, memory=False)),
    ]:
        rows.append(_row(name, problem, list_schedule))
    from solvers.heuristics import cpop, fcp, peft
    from solvers.listsched import heft

    dag = random_layered_problem(n)  # every list heuristic on it: time and makespan side by side
    for solve in (list_schedule, heft, fcp, cpop, peft):
        rows.append(_row(f"random layered n={n:,} P=8", dag, solve))
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
