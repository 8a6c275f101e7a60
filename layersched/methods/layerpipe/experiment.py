"""LayerPipe against PipeDream on five models for 2 to 9 processors (``layersched bench layerpipe``).

For each model and processor count: PipeDream (whole layers, fused backward, its own partitioner,
asynchronous 1F1B with weight stashing) and LayerPipe (sub-layer cuts, split backward, our
memory-aware exact partitioner), asynchronous and synchronous. Times are per micro-batch in ms:
``*_ms`` the steady-state bottleneck (links overlapped with compute, a cut counting its activation and
its gradient), ``*_sim_ms`` the same read off validated 1F1B schedules of ``4 P`` and ``8 P``
micro-batches. ``lp_layer_ms`` is our partitioner at whole-layer granularity: it separates the gain of
the finer cuts from that of the objective. Memory is the peak over processors in GiB (weights,
optimizer state, stashed versions for PipeDream, in-flight activations); the plot's second panel
draws it. ``pd_repl_ms`` is PipeDream's partitioner with replication on (stages replicated
data-parallel, weight sync counted). The last row times the partitioner on 1000 random sub-layers and 64 processors.

A second table (``layerpipe-main.csv``) is the main path: ``solve --solver best`` on each bundled
transformer and CNN pipeline problem with its whole-layer and its sub-layer partition
(`layersched.schedule.cuts`), the span kept, its bound, the gain over whole layers, and the peak
activation memory against the limit.

Example
-------
>>> from layersched.methods.layerpipe.experiment import MODELS
>>> len(MODELS) >= 5
True
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from layersched.describe.config import bundled_problems, load_problem
from layersched.describe.partition import optimal_contiguous
from layersched.formats.report import BenchResult, save_figure
from layersched.methods.layerpipe.layerpipe import plan_layerpipe, speedup
from layersched.methods.layerpipe.pipedream import pipedream_partition, plan_pipedream
from layersched.methods.layerpipe.pipeplan import Setting, simulate

ROOT = bundled_problems()
MODELS = {
    "VGG-16": "vgg16-v100.yaml",
    "ResNet-50": "resnet50-v100.yaml",
    "BERT-large": "bert-large-v100.yaml",
    "GPT-3 2.7B": "gpt3-2.7b-a100.yaml",
    "deep MLP": "mlp-deep-v100.yaml",
}
COLUMNS = (
    "model",
    "P",
    "sublayers",
    "pd_ms",
    "pd_sim_ms",
    "pd_repl_ms",
    "lp_layer_ms",
    "lp_ms",
    "lp_sim_ms",
    "lp_sync_ms",
    "speedup",
    "speedup_sim",
    "pd_mem_gib",
    "lp_mem_gib",
    "partition_ms",
)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def model_rows(name: str, setting: Setting, processors: list[int], progress=None) -> list[dict]:
    """One row per processor count for one model."""
    rows = []
    items = setting.items("layer")
    for P in processors:
        if progress:
            progress(f"{name} P={P}")
        pd = plan_pipedream(setting, P)
        t0 = time.perf_counter()
        lp = plan_layerpipe(setting, P)
        partition_s = time.perf_counter() - t0
        whole = plan_layerpipe(setting, P, granularity="layer")
        sync = plan_layerpipe(setting, P, mode="sync")
        repl = pipedream_partition(
            items.work,
            P,
            cut=items.cut_time(setting.link),
            param_bytes=items["param_bytes"],
            bandwidth=setting.link.bandwidth,
            replication=True,
        )
        sim_pd, sim_lp = (simulate(plan, 4 * P)["steady"] for plan in (pd, lp))
        rows.append(
            {
                "model": name,
                "P": P,
                "sublayers": len(lp.items.names),
                "pd_ms": _ms(pd.time_per_microbatch),
                "pd_sim_ms": _ms(sim_pd),
                "pd_repl_ms": _ms(repl.time),
                "lp_layer_ms": _ms(whole.time_per_microbatch),
                "lp_ms": _ms(lp.time_per_microbatch),
                "lp_sim_ms": _ms(sim_lp),
                "lp_sync_ms": _ms(sync.time_per_microbatch),
                "speedup": round(speedup(pd, lp), 4),
                "speedup_sim": round(sim_pd / sim_lp, 4),
                "pd_mem_gib": round(float(pd.memory.max()) / 2**30, 2),
                "lp_mem_gib": round(float(lp.memory.max()) / 2**30, 2),
                "partition_ms": round(partition_s * 1e3, 1),
            }
        )
    return rows


def timing_row(n: int = 1000, processors: int = 64) -> dict:
    """The partitioner on ``n`` random sub-layers with cuts and memory limits onto ``processors``."""
    rng = np.random.default_rng(0)
    args = dict(cut=rng.random(n - 1) * 0.01, fixed=rng.random(n), scaled=rng.random(n) / processors)
    t0 = time.perf_counter()
    part = optimal_contiguous(rng.random(n), processors, scale=np.arange(processors, 0, -1), capacity=40, **args)
    elapsed = time.perf_counter() - t0
    return {
        "model": f"random {n}x{processors}",
        "P": processors,
        "sublayers": n,
        "lp_ms": round(part.bottleneck, 3),
        "partition_ms": round(elapsed * 1e3, 1),
    }


def plot(rows: list[dict], path: Path) -> None:
    """Speedup of LayerPipe over PipeDream against processors (one line per model), and the peak
    memory per processor of both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, mem) = plt.subplots(1, 2, figsize=(11, 4))
    for k, model in enumerate(dict.fromkeys(r["model"] for r in rows if "pd_ms" in r)):
        mine = [r for r in rows if r["model"] == model]
        P = [r["P"] for r in mine]
        color = f"C{k}"
        ax.plot(P, [r["speedup"] for r in mine], "o-", color=color, label=model)
        ax.plot(P, [r["speedup_sim"] for r in mine], "x:", color=color, alpha=0.6)
        mem.plot(P, [r["pd_mem_gib"] for r in mine], "s--", color=color, alpha=0.6)
        mem.plot(P, [r["lp_mem_gib"] for r in mine], "o-", color=color, label=model)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="processors", ylabel="speedup over PipeDream", title="LayerPipe (async) / PipeDream, per micro-batch")
    ax.text(0.01, 0.01, "solid: bottleneck, dotted: simulated", transform=ax.transAxes, fontsize=7)
    mem.set(
        xlabel="processors",
        ylabel="peak memory per processor (GiB)",
        title="memory (solid LayerPipe, dashed PipeDream)",
    )
    ax.legend(fontsize=8)
    mem.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def run(out_dir: Path, *, quick: bool = False, progress=None) -> BenchResult:
    """Every model for 2 to 9 processors (``quick``: 2, 5 and 8); table rows, plot under ``out_dir``."""
    out_dir = Path(out_dir)
    processors = [2, 5, 8] if quick else list(range(2, 10))
    rows: list[dict] = []
    total = len(MODELS) * len(processors)

    def step(label: str) -> None:
        if progress:
            progress(len(rows), total, label)

    for name, file in MODELS.items():
        rows += model_rows(name, Setting.from_spec(load_problem(ROOT / file), file), processors, step)
    png = out_dir / "layerpipe.png"
    plot(rows, png)
    rows.append(timing_row())
    main = main_path_rows(
        1.0 if quick else 5.0, progress, MAIN_PROBLEMS[2:3] + MAIN_PROBLEMS[-2:] if quick else MAIN_PROBLEMS
    )
    if progress:
        progress(total, total, "done")
    section = BenchResult("main path (solve --solver best): whole-layer vs sub-layer cuts, layerpipe-main", main,
                          MAIN_COLUMNS)  # fmt: skip
    return BenchResult("experiment layerpipe", rows, COLUMNS, [png], sections=[section])


MAIN_PROBLEMS = (
    "bert-large-v100.yaml",
    "bert-ooo-v100.yaml",
    "gpt3-1.3b-a100.yaml",
    "gpt3-1.3b-h100.yaml",
    "gpt3-2.7b-a100.yaml",
    "gpt3-2.7b-a100-2x8.yaml",
    "mobilenetv2-v100.yaml",
    "resnet50-v100.yaml",
    "vgg16-v100.yaml",
)
"""The bundled transformer and CNN problems with a pipeline of two or more stages."""
MAIN_COLUMNS = (
    "problem",
    "stages",
    "whole_ms",
    "sublayer_ms",
    "chosen_ms",
    "bound_ms",
    "gain",
    "peak_gib",
    "limit_gib",
)


def main_path_rows(time_limit: float, progress=None, problems=MAIN_PROBLEMS) -> list[dict]:
    """For each problem (default `MAIN_PROBLEMS`): `solve --solver best` (``time_limit`` per partition) on
    whole-layer and sub-layer partitions (`layersched.schedule.cuts`), the span chosen, its bound,
    the gain over whole layers, and the chosen schedule's peak memory against the limit."""
    from layersched.schedule.cuts import choose_cuts
    from layersched.schedule.solve import solve_pipeline

    rows = []
    for j, file in enumerate(problems):
        if progress:
            progress(j, len(problems), f"main path: {file}")
        spec = load_problem(ROOT / file)
        sol, tried = choose_cuts(
            spec, file, lambda p: solve_pipeline(p, solver="best", time_limit=time_limit), climb=False
        )
        by = {c.granularity: c.value for c in tried}
        whole, chosen = by.get("layer"), sol.metrics["value"]
        peak = max(sol.metrics.get("peak_memory", [0]) or [0])
        rows.append(
            {
                "problem": file.removesuffix(".yaml"),
                "stages": sol.pipe.num_stages,
                "whole_ms": round(whole / 1e6, 3) if whole is not None else None,
                "sublayer_ms": round(by["sublayer"] / 1e6, 3) if by.get("sublayer") is not None else None,
                "chosen_ms": round(chosen / 1e6, 3),
                "bound_ms": round(sol.metrics["lower_bound"] / 1e6, 3),
                "gain": (whole - chosen) / whole if whole else 0.0,
                "peak_gib": round(peak / 2**30, 2),
                "limit_gib": round(sol.pipe.capacity / 2**30, 2) if sol.pipe.capacity else None,
            }
        )
    return rows
