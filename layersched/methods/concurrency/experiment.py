"""``layersched bench concurrency``: threads per operation and co-running, simulated on the analytic
CPU model, for three models and three machines.

Models (float32, 4 micro-batches): the examples' MLP (8 layers of width 32, 8 samples) and small GPT
(4 blocks, hidden 32, 16 tokens, 4 sequences), and a ResNet-50 on 32x32 images (8 images). Machines:
`layersched.methods.concurrency.perfmodel.CPUS` (2, 16 and 64 cores; assumed rates, not measured).
Each operation's time on k threads is `perfmodel.AnalyticModel`: launch, roofline per thread with the
socket's bandwidth shared, fork/join per extra thread, and one thread for an operation on fewer than
32,768 values (PyTorch's grain size).

The table is exact on that model: every plan is a validated schedule of the same operation graph,
and ``gap`` is the best plan's distance to the proven bound. It is a simulation, not a measurement;
``benchmarks/concurrency_real.py`` runs the strategies for real on the machine at hand.
"""

from __future__ import annotations

from pathlib import Path

from layersched.describe.config import CNNArch, MLPArch, TransformerArch
from layersched.describe.costmodel import Layers, cnn_layers, mlp_layers, transformer_layers
from layersched.formats.report import BenchResult
from layersched.methods.concurrency.opgraph import LayerOps, SumModel, op_graph
from layersched.methods.concurrency.perfmodel import CPUS, AnalyticModel, CpuSpec
from layersched.methods.concurrency.strategies import STRATEGIES, bound, compare

DTYPE_BYTES = 4
MICROBATCHES = 4
UPDATE_BYTES_PER_PARAM = 5  # values touched per parameter by SGD with momentum: read w, g, m; write w, m
COLUMNS = ("model", "cores", "tasks", *(f"{s}_ms" for s in STRATEGIES), "bound_ms", "gap", "speedup", "best static")


def models() -> dict[str, Layers]:
    """The three models' layers (units with FLOPs and bytes per pass) for one micro-batch."""
    gpt = TransformerArch(family="transformer", num_layers=4, hidden=32, heads=4, seq_len=16, vocab=64)
    return {
        "mlp (examples)": mlp_layers(MLPArch(family="mlp", widths=[32] * 9), 8, DTYPE_BYTES),
        "gpt_small (examples)": transformer_layers(gpt, 4, DTYPE_BYTES),
        "resnet50 32x32": cnn_layers(CNNArch(family="resnet50", image_size=32, num_classes=10), 8, DTYPE_BYTES),
    }


def layer_ops(layers: Layers, cpu: CpuSpec) -> list[LayerOps]:
    """One `LayerOps` per unit of the cost model: each pass the sum of its kernels' analytic times."""
    out = []
    for name, units in layers:
        for unit in units:
            label = name if len(units) == 1 else f"{name}.{unit.name}"

            def model(work: str, ops=unit.ops):
                parts = tuple(
                    AnalyticModel(*getattr(op, work), cpu, values=getattr(op, work)[1] / DTYPE_BYTES)
                    for op in ops
                    if sum(getattr(op, work)) > 0
                )
                return SumModel(parts) if parts else None

            params = sum(op.params for op in unit.ops)
            moved = UPDATE_BYTES_PER_PARAM * DTYPE_BYTES * params
            update = AnalyticModel(2.0 * params, moved, cpu, values=params) if params else None
            forward = model("forward") or AnalyticModel(0.0, 0.0, cpu)
            first = not out
            backward_input = None if first else (model("backward_input") or AnalyticModel(0.0, 0.0, cpu))
            out.append(LayerOps(label, forward, backward_input, model("backward_weight"), update))
    return out


def run(out_dir: Path, *, quick: bool = False, progress=None) -> BenchResult:
    """The table (``quick``: CP-SAT for 2 s per row instead of 10 s)."""
    rows = []
    jobs = [(name, layers, cpu) for name, layers in models().items() for cpu in CPUS.values()]
    for j, (name, layers, cpu) in enumerate(jobs):
        if progress:
            progress(j, len(jobs), f"{name}, {cpu.cores} cores")
        g = op_graph(layer_ops(layers, cpu), microbatches=MICROBATCHES, cores=cpu.cores)
        plans = compare(g, time_limit=2.0 if quick else 10.0)
        best = min(p.makespan for p in plans)
        lb = bound(g)
        row = {"model": name, "cores": cpu.cores, "tasks": g.problem.num_tasks}
        row.update({f"{p.name}_ms": round(p.makespan / 1e6, 3) for p in plans})
        row.update(
            bound_ms=round(lb / 1e6, 3),
            gap=(best - lb) / best,
            speedup=f"{plans[0].makespan / best:.2f}x",
            **{"best static": plans[1].setting},
        )
        rows.append(row)
    title = "simulated on the analytic CPU model (exact on the model, not measured): iteration time, concurrency"
    return BenchResult(title, rows, COLUMNS)
