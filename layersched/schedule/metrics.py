"""What a schedule costs: iteration time (both objectives), bubble, work and peak memory per rank.

Bubble rate follows Zero Bubble: ``(time - work) / time`` per rank, where ``time`` is the
steady-state iteration time (the largest per-rank span) and ``work`` the rank's compute; the
reported rate is the mean over compute ranks.

Example
-------
>>> from solvers import Problem, Schedule
>>> p = Problem(duration=[2, 2], num_processors=2, edges=[[0, 1]], delay=[1])
>>> m = schedule_metrics(p, Schedule(processor=[0, 1], start=[0, 3]), num_ranks=2)
>>> m["span"], m["makespan"], m["bubble_rate"]
(2, 5, 0.0)
"""

from __future__ import annotations

import numpy as np

from solvers import Problem, Schedule, lower_bounds, peak_memory


def schedule_metrics(
    problem: Problem,
    schedule: Schedule,
    num_ranks: int,
    objective: str = "span",
    extra_bounds: dict[str, int] | None = None,
) -> dict:
    """Metrics of a schedule whose first ``num_ranks`` processors are compute ranks; ``extra_bounds``
    are further proven lower bounds on the objective (say, from the pipeline's structure)."""
    R = num_ranks
    spans = schedule.spans(problem)
    span = int(spans.max(initial=0))
    work = np.bincount(schedule.processor, weights=problem.duration, minlength=problem.num_processors)[:R]
    work = work.astype(np.int64)
    per_rank_bubble = [float((span - w) / span) if span else 0.0 for w in work.tolist()]
    bounds = {**lower_bounds(problem, objective), **(extra_bounds or {})}
    value = schedule.objective(problem, objective)
    return {
        "objective": objective,
        "value": value,
        "span": span,
        "makespan": schedule.makespan(problem),
        "bubble_rate": round(float(np.mean(per_rank_bubble)), 6) if R else 0.0,
        "per_rank_bubble": [round(b, 6) for b in per_rank_bubble],
        "work": work.tolist(),
        "peak_memory": peak_memory(problem, schedule).tolist(),
        "capacity": [int(c) if c < np.iinfo(np.int64).max // 8 else None for c in problem.capacity.tolist()],
        "lower_bound": max(bounds.values(), default=0),
        "lower_bounds": bounds,
    }
