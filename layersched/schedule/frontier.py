"""The memory-bubble frontier: the best schedule at each per-rank memory limit, with its proven bound.

The sweep starts at the least limit any schedule fits under, `Pipeline.least_memory`: every rank must hold,
for one micro-batch, the activations of all its stages at once (a stage's ``I`` waits for the
forwards of every later stage, the rank's other stages among them). It ends where more memory buys
nothing: at the peak memory of the best template without a limit, or earlier once a point reaches
the bound that holds for any limit; where that end leaves room to the bound, one more point where no
limit binds (every micro-batch in flight). Each point is `layersched.schedule.solve.solve_best` under that
limit, started from the point before (whose schedule fits the larger limit too), so the frontier never
rises with more memory, even where the searches are not proven. Beside the sweep, each template run
without a limit is a point of its own (its peak memory and bubble): 1F1B, ZB-H1, ZB-H2 (about twice
1F1B's memory), ZB-V, ... on the same axes.

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> from layersched.describe.stages import pipeline_from_spec
>>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 2, "microbatches": 4, "forward": 2, "backward_input": 2, "backward_weight": 1,
...     "memory_forward": 4, "memory_freed_by_weight": 1}}))
>>> pipe.least_memory()
4
>>> f = frontier(pipe, points=3, time_limit=2)
>>> [(p.limit, p.value, p.status) for p in f.points]
[(4, 36, 'optimal'), (8, 23, 'optimal'), (12, 21, 'optimal')]
>>> f.floor
21
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from layersched.describe.stages import Pipeline


@dataclass(frozen=True)
class FrontierPoint:
    """The best schedule found under one per-rank memory limit (or a template's own point)."""

    label: str
    limit: int | None
    value: int
    lower_bound: int
    bubble_rate: float
    peak_memory: int
    status: str

    @property
    def gap(self) -> float:
        return (self.value - self.lower_bound) / self.value if self.value else 0.0


@dataclass(frozen=True)
class Frontier:
    pipe: Pipeline
    objective: str
    points: list[FrontierPoint]
    templates: list[FrontierPoint]
    floor: int
    """A lower bound on the objective under any memory limit."""


def frontier(
    pipe: Pipeline,
    *,
    points: int = 8,
    time_limit: float = 10.0,
    objective: str | None = None,
    progress: Callable[[FrontierPoint], None] | None = None,
) -> Frontier:
    """Sweep the per-rank memory limit over ``points`` evenly spaced values from `Pipeline.least_memory`
    to where the templates stop gaining, and each template's own peak memory between them; `solve_best`
    with ``time_limit`` seconds at each, from the schedule of the limit before (its ``start``), so no
    point is slower than one with less memory."""
    from layersched.schedule.solve import solve_best, solve_pipeline, start_of
    from layersched.schedule.templates import TemplateError, template_names
    from solvers import Deadlock, InvalidSchedule

    if points < 2:
        raise ValueError(f"points: at least 2, got {points}")
    objective = objective or pipe.objective
    free = replace(pipe, capacity=None)
    templates, floor = [], 0
    for name in template_names():
        try:
            sol = solve_pipeline(free, schedule=name, objective=objective)
        except (TemplateError, InvalidSchedule, Deadlock):
            continue
        if pipe.placement is not None and sol.stage_to_rank != pipe.stage_to_rank():
            continue
        templates.append(_point(name, None, sol, "template"))
        floor = max(floor, sol.metrics["lower_bound"])  # bounds of the memory-free problem hold for any limit
    if not templates:
        raise ValueError(f"{pipe.name}: no template applies, so the sweep has no upper end")
    lo = pipe.least_memory()
    best_free = min(templates, key=lambda p: (p.value, p.peak_memory))
    hi = max(lo, best_free.peak_memory)
    # an even grid, plus each template's own peak memory on it (1F1B's, ZB-H2's, ...): the limits users compare at
    grid = {int(round(x)) for x in np.linspace(lo, hi, points)}
    limits = sorted(grid | {t.peak_memory for t in templates if lo <= t.peak_memory <= hi})
    unbound = lo * pipe.num_microbatches  # every micro-batch in flight: no limit binds
    if unbound > hi:
        limits.append(unbound)  # reached only while the sweep stays above the floor (see the loop)
    swept, start = [], None
    for limit in limits:
        # each point starts from the one before: its schedule fits this larger limit too, so more memory
        # never costs time, proven or not
        sol = solve_best(replace(pipe, capacity=limit), objective=objective, time_limit=time_limit, start=start)
        start = start_of(sol)
        if sol.info.get("interrupted"):
            raise KeyboardInterrupt  # Ctrl-C: a half-swept frontier is not written
        point = _point("best", limit, sol, sol.result.status)
        swept.append(point)
        if progress:
            progress(point)
        if point.value <= floor:  # nothing can be faster at any limit
            break
    return Frontier(pipe, objective, swept, templates, floor)


def _point(label: str, limit: int | None, sol, status: str) -> FrontierPoint:
    m, R = sol.metrics, sol.pipe.num_ranks
    return FrontierPoint(
        label, limit, m["value"], m["lower_bound"], m["bubble_rate"], max(m["peak_memory"][:R]), status
    )
