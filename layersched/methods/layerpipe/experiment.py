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
    if progress:
        progress(total, total, "done")
    return BenchResult("experiment layerpipe", rows, COLUMNS, [png])
