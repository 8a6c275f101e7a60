"""The least period of a periodic schedule: is a memory-tight row's steady state short of the bound?

On some rows under less memory than 1F1B's the gap of `best` grows with the number of micro-batches
(interleaved p=5, v=2 under 7 stage activations: 0% at m=6, 4% at m=10, 8.9% at m=23): its schedules
take 102,000-109,000 per micro-batch in the middle, where the bound takes 91,890 (rank 0's work per
micro-batch). Either the search misses a faster steady state, or the bound misses what holds it back.
This probe asks a narrower question that CP-SAT can answer: how fast can a *periodic* schedule be,
one where every ``per`` micro-batches repeat the passes of the ``per`` before them ``per * period``
later, under the same memory limit?

The model (`periodic_model`): one template of ``per`` micro-batches, each pass at a start ``n * P + r``
with its phase ``r`` in ``[0, P)`` (``P = per * period``). Every dependency of the pipeline holds
inside the template (with the transfers between ranks). On each rank the passes' phases do not overlap
modulo ``P`` (each interval also placed ``P`` earlier). Memory: a stage's activation (the part the
``I`` pass frees, and the part the ``W`` pass frees) is held from the start of its forward to the end
of the pass that frees it; held for ``n * P + e``, it counts ``n`` times all along and once more in the
``e`` after its forward's phase, so the cumulative of those parts plus ``n`` times the memory stays in
the rank's limit. Within the template the forward of the first stage of micro-batch ``j`` starts no
earlier than that of ``j - 1`` and before ``P``. A feasible answer is a schedule for any number of
micro-batches (`expand`): micro-batch ``i`` runs the template's micro-batch ``i % per`` shifted by
``(i // per) * P``; fewer micro-batches in flight at the ends hold no more memory than the steady
state does. Each one found is checked that way by `solve.start_solution` (our validator).

What it answers: INFEASIBLE proves that no schedule of that kind has that period (each period is
its own question: a longer one need not be feasible because a shorter one is). It says nothing of
schedules that are not periodic (`best`'s are not), so it is no lower bound. CP-SAT starts from a
greedy template that may break the memory limit (`greedy_template`); within its time limit it often
leaves the larger templates undecided (``UNKNOWN``).

Usage: python benchmarks/periodic_probe.py PROBLEM [--per 1] [--time-limit 30] PERIOD [PERIOD ...]
       (PROBLEM: a stage-level problem file with a split backward; periods per micro-batch)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from machine_speed import HEADING, describe, speed
from ortools.sat.python import cp_model

from layersched.cli.options import positive_float, positive_int
from layersched.describe.config import load_problem
from layersched.describe.stages import Pipeline, pipeline_from_spec
from layersched.schedule.solve import Start, start_solution

Template = dict[tuple[str, int, int], int]  # (kind, stage, micro-batch of the template) -> start


def periodic_model(
    pipe: Pipeline,
    period: int,
    per: int = 1,
    time_limit: float = 30.0,
    workers: int = 2,
    seed: int = 0,
    hint: Template | None = None,
) -> tuple[str, Template | None, int | None]:
    """CP-SAT's status and, where it found one, a template of ``per`` micro-batches that repeats every
    ``per * period`` under the pipeline's memory limit (see the module text) and its latency (the end
    of its last pass; the least CP-SAT found). CP-SAT starts from ``hint`` (default: `greedy_template`)."""
    S, (rank, dur, c) = pipe.num_stages, _costs(pipe)
    P = per * period
    # a pass that waits a whole period for its phase can run a period earlier, with every pass after it
    # in its micro-batch's chain: memory is then held no longer. So some template of every periodic
    # schedule lies within the chains plus less than a period of waiting per pass
    horizon = sum(sum(d) for d in dur.values()) + 2 * sum(c) + (3 * S + 1) * per * P
    m = cp_model.CpModel()
    start, phase = {}, {}
    for j in range(per):
        for s in range(S):
            for kind in "FIW":
                x = m.NewIntVar(0, horizon, f"{s}{kind}{j}")
                r = m.NewIntVar(0, P - 1, f"phase {s}{kind}{j}")
                n = m.NewIntVar(0, horizon // P, f"periods {s}{kind}{j}")
                m.Add(x == n * P + r)
                start[kind, s, j], phase[kind, s, j] = x, r
    m.Add(start["F", 0, 0] == 0)
    for j in range(per):
        if j:
            m.Add(start["F", 0, j] >= start["F", 0, j - 1])
            m.Add(start["F", 0, j] < P)
        for s in range(S - 1):
            m.Add(start["F", s + 1, j] >= start["F", s, j] + dur["F"][s] + c[s])
            m.Add(start["I", s, j] >= start["I", s + 1, j] + dur["I"][s + 1] + c[s])
        m.Add(start["I", S - 1, j] >= start["F", S - 1, j] + dur["F"][S - 1])
        for s in range(S):
            m.Add(start["W", s, j] >= start["I", s, j] + dur["I"][s])
    cap = None if pipe.capacity is None else int(pipe.capacity)
    mf, mw = [int(x) for x in pipe.mem_forward], [int(x) for x in pipe.mem_freed_by_weight]
    for q in range(pipe.num_ranks):
        mine = [(s, j) for s in range(S) for j in range(per) if rank[s] == q]
        m.AddNoOverlap(
            [
                m.NewFixedSizeIntervalVar(phase[kind, s, j] - shift, dur[kind][s], "")
                for s, j in mine
                for kind in "FIW"
                for shift in (0, P)
            ]
        )
        if cap is None:
            continue
        parts, demands, whole = [], [], []
        for s, j in mine:
            for memory, kind in ((mf[s] - mw[s], "I"), (mw[s], "W")):
                if memory <= 0:
                    continue
                held = start[kind, s, j] + dur[kind][s] - start["F", s, j]
                n, e = m.NewIntVar(0, horizon // P + 1, ""), m.NewIntVar(0, P - 1, "")
                m.Add(held == n * P + e)
                whole.append((n, memory))
                for shift in (0, P):
                    begin = phase["F", s, j] - shift
                    end = m.NewIntVar(-P, 2 * P, "")
                    m.Add(end == begin + e)
                    parts.append(m.NewIntervalVar(begin, e, end, ""))
                    demands.append(memory)
        left = m.NewIntVar(0, cap, "")
        m.Add(left == cap - sum(n * memory for n, memory in whole))
        m.AddCumulative(parts, demands, left)
    latency = m.NewIntVar(0, horizon + max(max(d) for d in dur.values()), "latency")
    for (kind, s, _j), x in start.items():
        m.Add(latency >= x + dur[kind][s])
    m.Minimize(latency)
    hint = greedy_template(pipe, period, per) if hint is None else hint
    for key, x in (hint or {}).items():
        m.AddHint(start[key], x)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.Solve(m)
    name = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return name, None, None
    return name, {key: solver.Value(x) for key, x in start.items()}, solver.Value(latency)


def greedy_template(pipe: Pipeline, period: int, per: int = 1) -> Template | None:
    """A template that keeps every dependency and each rank's phases apart, memory aside: each pass in
    the order of its micro-batch's chain (``W`` right after its ``I``) at the earliest time from which
    it meets no pass placed before it on its rank, modulo the period. CP-SAT's hint: from nothing it
    often finds no template at all in its time (at p=5, v=2 even at twice the least period), and from
    this one at once. None where a rank's passes do not fit in the period."""
    S, (rank, dur, c), P = pipe.num_stages, _costs(pipe), per * period
    busy: list[list[tuple[int, int]]] = [[] for _ in range(pipe.num_ranks)]

    def place(q: int, ready: int, d: int) -> int:
        """The earliest start from ``ready`` whose phase meets no interval placed on rank ``q``."""
        t = ready
        while True:
            if t - ready >= P:
                raise _NoRoom
            r = t % P
            ends = [b + sh for a, b in busy[q] for sh in (-P, 0, P) if r < b + sh and a + sh < r + d]
            if not ends:
                busy[q].append((r, r + d))
                return t
            t += max(ends) - r  # past every interval it meets

    template: Template = {}
    try:
        for j in range(per):
            t = j * period
            for s in range(S):
                template["F", s, j] = place(rank[s], t, dur["F"][s])
                t = template["F", s, j] + dur["F"][s] + c[s]
            t -= c[S - 1]
            for s in reversed(range(S)):
                template["I", s, j] = place(rank[s], t, dur["I"][s])
                template["W", s, j] = place(rank[s], template["I", s, j] + dur["I"][s], dur["W"][s])
                t = template["I", s, j] + dur["I"][s] + (c[s - 1] if s else 0)
    except _NoRoom:
        return None
    return template


class _NoRoom(Exception):
    """No phase of the period has room for a pass (the rank's passes are longer than the period)."""


def expand(pipe: Pipeline, template: Template, period: int, per: int):
    """The template repeated for the pipeline's micro-batches, as a validated `Solution`
    (`solve.start_solution`: every dependency, every rank one pass at a time, the memory limit)."""
    rank, m = pipe.stage_to_rank(), pipe.num_microbatches
    times = {}
    for i in range(m):
        for (kind, s, j), x in template.items():
            if j == i % per:
                times[f"{s}{kind}{i}"] = (rank[s], x + (i // per) * per * period)
    actions = [
        sorted((n for n, (r, _) in times.items() if r == q), key=lambda n: times[n][1]) for q in range(pipe.num_ranks)
    ]
    return start_solution(pipe, Start(actions, True, rank, times), pipe.objective)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", type=Path, help="a stage-level problem file (split backward)")
    ap.add_argument("periods", type=positive_int, nargs="+", help="periods per micro-batch to try")
    ap.add_argument("--per", type=positive_int, default=1, help="micro-batches per period (default 1)")
    ap.add_argument("--time-limit", type=positive_float, default=30.0, help="CP-SAT seconds per period (default 30)")
    args = ap.parse_args(argv)
    pipe = pipeline_from_spec(load_problem(args.problem))
    work = _rank_work(pipe)
    print(
        f"{args.problem.name}: {pipe.num_stages} stages on {pipe.num_ranks} ranks, "
        f"{pipe.num_microbatches} micro-batches;"
    )
    print(f"{HEADING}: {describe(speed())}")
    print(
        f"the busiest rank works {work} per micro-batch (no period is shorter); {args.per} micro-batch(es) per period;"
    )
    print(
        f"CP-SAT {args.time_limit:g} s per period on 2 workers; "
        "span at m: the template repeated for the problem's micro-batches"
    )
    print(f"{'period':>9} {'status':>11} {'latency':>9} {'span at m':>10} {'seconds':>8}")
    for period in args.periods:
        t = time.perf_counter()
        status, template, latency = periodic_model(pipe, period, args.per, args.time_limit)
        took = time.perf_counter() - t
        span = "-" if template is None else expand(pipe, template, period, args.per).metrics["value"]
        print(
            f"{period:>9} {status:>11} {latency if latency is not None else '-'!s:>9} {span!s:>10} {took:>8.1f}",
            flush=True,
        )


def _rank_work(pipe: Pipeline) -> int:
    """The most work one rank has per micro-batch: no period is shorter."""
    rank, dur, _ = _costs(pipe)
    total = [0] * pipe.num_ranks
    for s in range(pipe.num_stages):
        total[rank[s]] += sum(dur[kind][s] for kind in "FIW")
    return max(total)


def _costs(pipe: Pipeline) -> tuple[list[int], dict[str, list[int]], list[int]]:
    """The rank of each stage, each pass's duration (``F``, ``I`` and ``W`` per stage, with the action
    overhead) and the transfer after each stage (paid only between ranks)."""
    S, rank = pipe.num_stages, pipe.stage_to_rank()
    c = [int(pipe.transfer[s]) if s + 1 < S and rank[s] != rank[s + 1] else 0 for s in range(S)]
    return rank, pipe.pass_durations(), c


if __name__ == "__main__":
    main()
