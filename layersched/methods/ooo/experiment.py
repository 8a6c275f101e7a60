"""``layersched bench ooo``: out-of-order backprop's simulated speedups over the usual schedules.

Analytic costs from the problem files under ``problems/`` (V100s, `layersched.describe.costmodel`):

- data parallel: ResNet-50 and ResNet-101, 64 images per GPU, on 4 to 48 GPUs (4 per node) with
  10 and 25 Gb/s links between nodes. Baseline: the reverse-layer order with 25 MiB buckets
  (PyTorch DDP's default). ``reverse-tuned``: the same order with the best bucket size (so the gain
  of ooo proper is ``best-k`` over ``reverse-tuned``). ``best-k``: reverse first-k, ``k`` and the
  bucket size (per layer, 1, 4 or 25 MiB) searched. ``cpsat``: CP-SAT over the full order, started
  from the best ``k``. Iteration time: the mean over a window of two iterations
  (`layersched.methods.ooo.dataparallel`).
- single device: MobileNetV3-large and DenseNet-121, 32 images (and 8, where launches bind), one
  V100, 5 us per kernel launch; serial single-stream order against weight gradients on a second
  stream, for three co-run slowdowns (`layersched.methods.ooo.multistream`).
- pipeline: BERT (hidden 1024, 512 tokens, 4 sequences per micro-batch) with 12 to 48 layers on 8 to
  32 GPUs, as many micro-batches as ranks; GPipe against gradient fast-forwarding (same stages) and
  modulo allocation with fast-forwarding (`layersched.methods.ooo.pipeline`).

``paper`` gives the range Oh et al. (EuroSys 2022) report for that kind of training.
"""

from __future__ import annotations

from pathlib import Path

from layersched.describe.config import ClusterSpec, bundled_problems, load_problem, load_spec
from layersched.formats.report import BenchResult, save_figure

PROBLEMS = bundled_problems()
MIB = 2**20
COLUMNS = ("part", "model", "setting", "baseline", "baseline_ms", "method", "ooo_ms", "speedup", "detail", "paper")
PAPER = {"data parallel": "1.10-1.27", "single device": "1.03-1.58", "pipeline": "1.41-1.99"}
LAUNCH_NS = 5_000
ITERATIONS = 2
BUCKETS = (0, MIB, 4 * MIB, 25 * MIB)


def _row(part: str, model: str, setting: str, baseline: str, base_ns: float, method: str, ns: float, detail: str):
    return {
        "part": part,
        "model": model,
        "setting": setting,
        "baseline": baseline,
        "baseline_ms": round(base_ns / 1e6, 3),
        "method": method,
        "ooo_ms": round(ns / 1e6, 3),
        "speedup": round(base_ns / ns, 3),
        "detail": detail,
        "paper": PAPER[part],
    }


def data_parallel(quick: bool, time_limit: float, progress=None) -> list[dict]:
    from layersched.methods.ooo import dataparallel as dp

    models = ("resnet50",) if quick else ("resnet50", "resnet101")
    links = ("10gbps", "25gbps")
    sizes = (8, 48) if quick else (4, 8, 16, 32, 48)
    rows = []
    for model in models:
        spec = load_problem(PROBLEMS / f"{model}-dp-v100.yaml")
        costs = dp.layer_costs(spec)
        for link in links:
            cluster = load_spec(PROBLEMS / "clusters" / f"v100-4x12-{link}.yaml", ClusterSpec)
            spec_l = spec.model_copy(update={"cluster": cluster})
            for n in sizes:
                if progress:
                    progress(0, 1, f"data parallel {model} {link} {n} GPUs")
                L = costs.num_layers
                base = dp.evaluate(costs, dp.network_for(spec_l, n, 25 * MIB), dp.reverse_first_k(L, 0), ITERATIONS)
                tries = [(b, *dp.best_k(costs, dp.network_for(spec_l, n, b), ITERATIONS)) for b in BUCKETS]
                bucket, k, best = min(tries, key=lambda t: t[2].iteration_time)
                tuned = min(
                    (
                        (dp.evaluate(costs, dp.network_for(spec_l, n, b), dp.reverse_first_k(L, 0), ITERATIONS), b)
                        for b in BUCKETS
                    ),
                    key=lambda eb: eb[0].iteration_time,
                )
                found, result = dp.search_order(best, time_limit=time_limit)
                assert found.iteration_time <= best.iteration_time  # CP-SAT starts from the best k
                setting = f"{n} GPUs, {link.replace('gbps', ' Gb/s')}"
                what = f"k={k}/{L}, " + (f"{bucket // MIB} MiB buckets" if bucket else "per-layer all-reduce")
                name = model.replace("resnet", "ResNet-")
                tuned_what = f"{tuned[1] // MIB} MiB buckets" if tuned[1] else "per-layer all-reduce"
                candidates = (
                    ("reverse-tuned", tuned[0].iteration_time, f"k=0, {tuned_what}"),
                    ("best-k", best.iteration_time, what),
                    ("cpsat", found.iteration_time, f"{result.status}, from {what}"),
                )
                for method, time_, how in candidates:
                    rows.append(
                        _row(
                            "data parallel",
                            name,
                            setting,
                            "reverse, 25 MiB buckets",
                            base.iteration_time,
                            method,
                            time_,
                            how,
                        )
                    )
    return rows


def single_device(quick: bool) -> list[dict]:
    from layersched.methods.ooo import multistream as ms

    cases = ((32, 1.25),) if quick else ((32, 1.0), (32, 1.25), (32, 1.5), (8, 1.25))
    rows = []
    for model, label in (("mobilenetv3", "MobileNetV3"), ("densenet121", "DenseNet-121")):
        spec = load_problem(PROBLEMS / f"{model}-v100.yaml")
        for batch, corun in cases:
            train = spec.training.model_copy(update={"microbatch_size": batch})
            k = ms.kernels(spec.model_copy(update={"training": train}))
            serial = ms.evaluate(k, LAUNCH_NS, corun, multistream=False).makespan
            ooo = ms.evaluate(k, LAUNCH_NS, corun, multistream=True).makespan
            launches = LAUNCH_NS * (sum(sum(v) for v in k.ops.values()) if k.ops else 3 * k.num_leaves)
            rows.append(
                _row(
                    "single device",
                    label,
                    f"batch {batch}, co-run x{corun:g}",
                    "serial, one stream",
                    serial,
                    "multi-stream",
                    ooo,
                    f"W on sub stream; launches {launches / 1e6:.2f} ms at {LAUNCH_NS // 1000} us",
                )
            )
    return rows


def pipeline(quick: bool, progress=None) -> list[dict]:
    from layersched.methods.ooo import pipeline as pp

    shapes = ((24, 8), (48, 16)) if quick else ((12, 8), (24, 8), (48, 8), (32, 16), (48, 16), (48, 24), (48, 32))
    spec0 = load_problem(PROBLEMS / "bert-ooo-v100.yaml")
    rows = []
    for layers, ranks in shapes:
        if progress:
            progress(0, 1, f"pipeline BERT-{layers} on {ranks}")
        sols = pp.compare(pp.with_shape(spec0, layers=layers, ranks=ranks, microbatches=ranks))
        base = sols["gpipe"].metrics["value"]
        for method in ("fast-forward", "modulo"):
            sol = sols[method]
            detail = "same stages, I first" if method == "fast-forward" else f"block i on rank i mod {ranks}"
            detail += f", max work {max(sol.metrics['work']) / 1e6:.1f} ms"
            rows.append(
                _row(
                    "pipeline",
                    f"BERT-{layers}",
                    f"{ranks} GPUs, {ranks} micro-batches",
                    "GPipe",
                    base,
                    method,
                    sol.metrics["value"],
                    detail,
                )
            )
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """Speedup per scenario and method, one panel per part; the paper's range shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = list(dict.fromkeys(r["part"] for r in rows))
    fig, axes = plt.subplots(len(parts), 1, figsize=(13, 4.2 * len(parts)), squeeze=False)
    for ax, part in zip(axes[:, 0], parts, strict=True):
        sub = [r for r in rows if r["part"] == part]
        labels = list(dict.fromkeys(f"{r['model']}, {r['setting']}" for r in sub))
        methods = list(dict.fromkeys(r["method"] for r in sub))
        width = 0.8 / len(methods)
        for j, method in enumerate(methods):
            xs = [labels.index(f"{r['model']}, {r['setting']}") + j * width for r in sub if r["method"] == method]
            ax.bar(xs, [r["speedup"] for r in sub if r["method"] == method], width, label=method)
        lo, hi = (float(x) for x in PAPER[part].split("-"))
        ax.axhspan(lo, hi, color="grey", alpha=0.2, label="paper's range")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, fontsize=7, rotation=35, ha="right")
        ax.set_ylim(0.8, max(hi, max(r["speedup"] for r in sub)) + 0.1)
        ax.set_ylabel("speedup")
        ax.set_title(part)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def run(out_dir: Path, *, quick: bool = False, progress=None) -> BenchResult:
    """All three parts; writes ``ooo.png`` under ``out_dir``."""
    out_dir = Path(out_dir)
    rows = data_parallel(quick, 1.0 if quick else 10.0, progress) + single_device(quick) + pipeline(quick, progress)
    png = out_dir / "ooo.png"
    plot(rows, png)
    return BenchResult("out-of-order backprop: speedups, ooo", rows, COLUMNS, [png])
