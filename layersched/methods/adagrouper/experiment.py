"""``layersched bench adagrouper``: 1F1B vs fixed kFkB vs Ada-Grouper's adaptive k under network traces.

A 4-stage pipeline with a global batch of 256 samples and room for 64 samples' activations per stage
(`layersched.methods.adagrouper.adagrouper.GroupedWorkload`): 1F1B runs micro-batches of 16, ``kfkb-2`` of 8, ``kfkb-4``
of 4, ``kfkb-8`` of 2, each plan the largest micro-batch that fits. Every method runs the same number
of iterations back to back under each trace (`layersched.methods.adagrouper.network`), all schedules validated for the
nominal problem; the table gives each one's throughput gain over 1F1B on that trace, and the plot
those gains and, for one trace, the adaptive controller's k following the bandwidth.

Example
-------
>>> rows = table_rows(TRACES(10_000)[:1], iterations=4, ks=(1, 2))   # no preemption: 1F1B is best
>>> [(r["method"], r["speedup"]) for r in rows]
[('1f1b', 0.0), ('kfkb-2', -0.016), ('adaptive', 0.0)]
"""

from __future__ import annotations

from pathlib import Path

from layersched.formats.report import BenchResult, save_figure
from layersched.methods.adagrouper.adagrouper import GroupedWorkload, Plan, make_plans, simulate, speedup, total_time
from layersched.methods.adagrouper.network import BandwidthTrace, constant, markov_on_off, on_off

KS = (1, 2, 4, 8)
INTERVAL = 1
COLUMNS = ("trace", "method", "k", "microbatch", "peak_memory", "time", "speedup", "switches")


def TRACES(iteration: int) -> list[BandwidthTrace]:
    """The traces, with time scales relative to 1F1B's ``iteration`` time at nominal bandwidth."""
    it = iteration
    return [
        constant(1.0, "no preemption"),
        constant(0.25, "always 25%"),
        on_off(20 * it, 0.5, 0.1, name="on/off slow, 50% at 10%"),
        on_off(20 * it, 0.2, 0.1, name="on/off slow, 20% at 10%"),
        on_off(20 * it, 0.5, 0.05, name="on/off slow, 50% at 5%"),
        on_off(it // 4, 0.5, 0.1, name="on/off fast, 50% at 10%"),
        markov_on_off(8 * it, 4 * it, 0.1, 400 * it, seed=7, name="random on/off, 33% at 10%"),
    ]


def table_rows(
    traces: list[BandwidthTrace],
    iterations: int,
    ks=KS,
    workload: GroupedWorkload | None = None,
    plans: list[Plan] | None = None,
    progress=None,
) -> list[dict]:
    """One row per (trace, method): fixed ``k`` for each plan, then ``adaptive``."""
    plans = plans or make_plans(workload or GroupedWorkload(), ks)
    rows = []
    for j, tr in enumerate(traces):
        if progress:
            progress(j, len(traces), tr.name)
        base = None
        for plan in [*plans, None]:
            recs = simulate(plans, tr, iterations, k=plan.k if plan else None, interval=INTERVAL)
            t = total_time(recs)
            base = base or t
            used = sorted({r["k"] for r in recs})
            rows.append(
                {
                    "trace": tr.name,
                    "method": plan.name if plan else "adaptive",
                    "k": str(plan.k) if plan else "/".join(map(str, used)),
                    "microbatch": plan.microbatch_size if plan else None,
                    "peak_memory": max(plan.solution.metrics["peak_memory"])
                    if plan
                    else max(max(p.solution.metrics["peak_memory"]) for p in plans if p.k in used),
                    "time": t,
                    "speedup": round(speedup(base, t), 3),
                    "switches": sum(a["k"] != b["k"] for a, b in zip(recs, recs[1:], strict=False)),
                    "_records": recs,
                }
            )
    return rows


def run(out_dir: Path, *, quick: bool = False, progress=None) -> BenchResult:
    """Run the comparison (``quick``: fewer iterations) and plot it under ``out_dir``."""
    plans = make_plans(GroupedWorkload(), KS)
    iteration = plans[0].predict(1.0)
    rows = table_rows(TRACES(iteration), 24 if quick else 100, plans=plans, progress=progress)
    png = out_dir / "adagrouper.png"
    _plot(rows, png)
    for r in rows:
        r.pop("_records")
    return BenchResult("Ada-Grouper: throughput gain over 1F1B per network trace, adagrouper", rows, COLUMNS, [png])


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    traces = list(dict.fromkeys(r["trace"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7))
    w = 0.8 / len(methods)
    for j, m in enumerate(methods):
        vals = [next(r["speedup"] for r in rows if r["trace"] == t and r["method"] == m) for t in traces]
        ax.bar(np.arange(len(traces)) + j * w, [100 * v for v in vals], w, label=m)
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xticks(np.arange(len(traces)) + 0.4 - w / 2, [t.replace(", ", "\n") for t in traces], fontsize=7)
    ax.set_ylabel("throughput gain over 1F1B (%)")
    ax.set_title("kFkB and Ada-Grouper (adaptive k) under network preemption (simulated)")
    ax.legend(fontsize=7, ncol=len(methods))
    pick = next(r for r in rows if r["method"] == "adaptive" and r["trace"].startswith("random"))
    recs = pick["_records"]
    t = [r["start"] for r in recs]
    ax2.step(t, [r["k"] for r in recs], where="post", label="adaptive k")
    ax2.set_ylabel("k")
    ax3 = ax2.twinx()
    ax3.step(t, [r["bandwidth"] for r in recs], where="post", color="tab:red", alpha=0.6, label="bandwidth")
    ax3.step(t, [r["estimate"] for r in recs], where="post", color="tab:green", alpha=0.6, label="estimate")
    ax3.set_ylabel("bandwidth (fraction of nominal)")
    ax2.set_xlabel("time (ticks)")
    ax2.set_title(f"adaptive controller on '{pick['trace']}' (every {INTERVAL} iterations)")
    lines = ax2.get_lines() + ax3.get_lines()
    ax2.legend(lines, [ln.get_label() for ln in lines], loc="upper right", fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
