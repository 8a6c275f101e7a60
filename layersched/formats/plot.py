"""Gantt chart of a schedule (one row per processor) with each rank's memory over time under it.

F/I/W/B, all-reduce and update boxes have distinct colours and carry their micro-batch number;
idle time is the white between them. Written as SVG, PNG or PDF, as the path's suffix says.

Example
-------
>>> from layersched.formats.export import load_schedule           # doctest: +SKIP
>>> plot_schedule(load_schedule("schedule.json"), "schedule.svg")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from layersched.formats.units import axis_unit
from layersched.schedule.graph import parse_action
from solvers import memory_profile

COLOURS = {"F": "#4C72B0", "B": "#DD8452", "I": "#C44E52", "W": "#55A868", "R": "#8172B3", "U": "#937860"}
LABELS = {
    "F": "forward",
    "B": "backward",
    "I": "backward (inputs)",
    "W": "backward (weights)",
    "R": "all-reduce",
    "U": "optimizer",
}


def plot_schedule(doc, path: str | Path, title: str | None = None) -> Path:
    """Draw ``doc`` (a `layersched.formats.export.ScheduleFile`) to ``path`` (.svg or .png); returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from layersched.formats.export import to_problem
    from layersched.formats.report import figure_format, save_figure

    figure_format(path)  # refuse a suffix we cannot honour before drawing anything
    problem, schedule = to_problem(doc)
    P, R = problem.num_processors, doc.pipeline.num_ranks
    t_unit, t_div = axis_unit(doc.time_unit)
    m_unit, m_div = axis_unit(doc.memory_unit)
    fig, (ax, axm) = plt.subplots(
        2, 1, figsize=(14, 1.0 + 0.45 * P + 2.6), sharex=True, gridspec_kw={"height_ratios": [max(P, 2), 3]}
    )
    span = max(schedule.makespan(problem), 1) / t_div
    boxes: dict[tuple[int, str], list[tuple[int, int]]] = {}
    label_boxes = len(doc.tasks) <= 3000
    for task in doc.tasks:
        _, kind, mb = parse_action(task.name)
        start, duration = task.start / t_div, task.duration / t_div
        boxes.setdefault((task.processor, kind), []).append((start, duration))
        if label_boxes and mb is not None and duration > span / 300:
            ax.text(
                start + duration / 2,
                task.processor,
                str(mb),
                ha="center",
                va="center",
                fontsize=6,
                color="white",
            )
    seen: set[str] = set()
    for (q, kind), segs in sorted(boxes.items()):
        ax.broken_barh(
            segs,
            (q - 0.4, 0.8),
            facecolors=COLOURS[kind],
            edgecolor="white",
            linewidth=0.3,
            label=None if kind in seen else LABELS[kind],
        )
        seen.add(kind)
    ax.set_xlim(0, span)
    ax.set_ylim(-0.6, P - 0.4)
    ax.set_yticks(range(P), [p.name for p in doc.processors])
    ax.invert_yaxis()
    ax.set_ylabel("processor")
    m = doc.metrics
    ax.set_title(
        title
        or f"{doc.name} · {doc.method} · time {m.get('value', 0) / t_div:.6g} {t_unit} "
        f"({doc.objective}) · bubble {m.get('bubble_rate', 0):.2%}",
        fontsize=10,
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=len(seen), fontsize=8, frameon=False)

    for q, (times, usage, _) in enumerate(memory_profile(problem, schedule)[:R]):
        if len(times):
            axm.step(
                np.r_[0, times / t_div, span],
                np.r_[0, usage, usage[-1]] / m_div,
                where="post",
                lw=1,
                label=doc.processors[q].name,
            )
    caps = {p.capacity for p in doc.processors[:R] if p.capacity is not None}
    for c in caps:
        axm.axhline(c / m_div, color="black", ls="--", lw=1)
        axm.text(0, c / m_div, " limit", va="bottom", fontsize=8)
    axm.set_ylabel(f"memory ({m_unit})")
    axm.set_xlabel(f"time ({t_unit})")
    if R <= 16 and axm.get_lines():
        axm.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_frontier(front, path: str | Path) -> Path:
    """Draw a `layersched.schedule.frontier.Frontier`: the best bubble rate found at each per-rank
    memory limit (a step line) with its proven lower bound (dashed), and each template without a
    limit as a labelled marker at its peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from layersched.formats.report import figure_format, save_figure

    figure_format(path)
    pipe = front.pipe
    m_unit, m_div = axis_unit(pipe.memory_unit)

    def bound_bubble(p) -> float:  # the bubble rate the point's bound allows: same work, bound's time
        work = p.value * (1 - p.bubble_rate)
        return max(0.0, (p.lower_bound - work) / p.lower_bound) if p.lower_bound else 0.0

    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = [p.limit / m_div for p in front.points]
    ax.step(x, [p.bubble_rate for p in front.points], where="post", marker="o", label="best at this limit")
    ax.step(x, [bound_bubble(p) for p in front.points], where="post", ls="--", color="grey", label="bound")
    for t in front.templates:
        ax.scatter(t.peak_memory / m_div, t.bubble_rate, marker="x", color="black", zorder=3)
        ax.annotate(
            t.label, (t.peak_memory / m_div, t.bubble_rate), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set_xlabel(f"memory limit per rank ({m_unit})")
    ax.set_ylabel("bubble rate")
    ax.set_title(f"{pipe.name}: memory-bubble frontier ({front.objective})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
