"""The strategies compared on one operation graph, each plan validated by `solvers.validate`:

- ``default``: PyTorch's default; every operation on all cores, one at a time.
- ``best static``: the best single setting over a grid of (operations co-running x threads each):
  every operation on ``k`` threads, at most ``c`` at once (``c k`` at most the cores). This is the
  "manual optimum" the paper compares with.
- ``paper``: the paper's approach as its abstract describes it: a thread count per operation from
  the performance model (the fewest threads within 10% of the operation's best predicted time), and
  operations co-run greedily while cores are free.
- ``list``: list scheduling with a core budget; each operation's threads chosen when it starts (the
  free cores shared among the ready operations).
- ``cpsat``: CP-SAT over modes and start times, seeded with the best of the above.

``bound`` is `solvers.moldable.moldable_bound`: the critical path at the fastest modes, or the least
total core-time over the cores.

>>> from layersched.methods.concurrency.opgraph import LayerOps, op_graph
>>> from layersched.methods.concurrency.perfmodel import ThreadModel
>>> m = ThreadModel(a=2e-6, b=20e-6, c=2e-6)
>>> g = op_graph([LayerOps(f"l{i}", m, m if i else None, m, m) for i in range(3)], microbatches=2, cores=4)
>>> plans = compare(g, time_limit=2)
>>> [p.name for p in plans], plans[0].makespan >= plans[-1].makespan >= bound(g)
(['default', 'best static', 'paper', 'list', 'cpsat'], True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layersched.methods.concurrency.opgraph import OpGraph
from solvers import Result, Schedule, validate
from solvers.cpsat_moldable import cpsat_moldable
from solvers.moldable import allot, list_moldable, moldable_bound

STRATEGIES = ("default", "best static", "paper", "list", "cpsat")


@dataclass(frozen=True)
class Plan:
    """A strategy's validated schedule: ``makespan`` in ns, and how it was set (``setting``)."""

    name: str
    schedule: Schedule
    makespan: int
    setting: str
    result: Result


def bound(g: OpGraph) -> int:
    return moldable_bound(g.problem)


def _plan(name: str, g: OpGraph, r: Result, setting: str) -> Plan:
    validate(g.problem, r.schedule)
    return Plan(name, r.schedule, int(r.objective), setting, r)


def default(g: OpGraph) -> Plan:
    mode = np.full(g.problem.num_tasks, g.mode_of(g.cores))
    r = list_moldable(g.problem, allotment=mode, concurrency=1)
    return _plan("default", g, r, f"{g.cores} threads, one operation at a time")


def best_static(g: OpGraph) -> Plan:
    best = None
    for k in g.threads:
        for c in range(1, g.cores // k + 1):
            r = list_moldable(g.problem, allotment=np.full(g.problem.num_tasks, g.mode_of(k)), concurrency=c)
            if best is None or r.objective < best[0].objective:
                best = (r, f"{c} co-running x {k} threads")
    return _plan("best static", g, best[0], best[1])


def paper(g: OpGraph) -> Plan:
    mode = allot(g.problem, "efficient")
    threads = np.asarray(g.threads)[mode]
    spread = ", ".join(f"{k}: {int((threads == k).sum())}" for k in g.threads if (threads == k).any())
    return _plan("paper", g, list_moldable(g.problem, allotment=mode), f"threads per op ({spread}), greedy co-run")


def list_scheduling(g: OpGraph) -> Plan:
    return _plan("list", g, list_moldable(g.problem), "threads chosen at start, cores shared")


def cpsat(g: OpGraph, hint: Plan, time_limit: float) -> Plan:
    r = cpsat_moldable(g.problem, time_limit=time_limit, hint=hint.schedule)
    return _plan("cpsat", g, r, f"{r.status}, from {r.info.get('source')}")


def compare(g: OpGraph, time_limit: float = 10.0) -> list[Plan]:
    """Every strategy of `STRATEGIES` on ``g``, in that order; CP-SAT starts from the best of the
    others and runs for at most ``time_limit`` seconds."""
    plans = [default(g), best_static(g), paper(g), list_scheduling(g)]
    plans.append(cpsat(g, min(plans, key=lambda p: p.makespan), time_limit))
    return plans
