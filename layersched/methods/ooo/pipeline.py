"""Pipeline parallelism with out-of-order backprop: gradient fast-forwarding and modulo allocation.

- GPipe (the baseline): the layers split into ``G`` contiguous stages of balanced cost, all forwards
  then all (fused) backwards on each rank (`layersched.schedule.templates.gpipe`).
- Gradient fast-forwarding: the same stages; each stage sends its input gradient (``I``) before any
  weight gradient and runs the ``W`` passes in its idle time (`layersched.schedule.templates.ooo`).
- Modulo allocation with fast-forwarding: one stage per layer, transformer block ``i`` on rank
  ``i mod G`` (the embedding with block 0, the head with the last block), split backward, scheduled by
  memory-aware list scheduling with critical-path (upward rank) priorities, which runs the ``I``
  chain first and fills gaps with ``W``.

All three are timed on `layersched.schedule.graph`'s task graph and validated; the iteration time is the
largest per-rank span (objective ``span``, as for every pipeline schedule here). Transfers are edge
delays: links are not a shared resource, so modulo allocation's many transfers cost only latency.

Example
-------
>>> from layersched.describe.config import load_problem
>>> spec = with_shape(load_problem("problems/bert-ooo-v100.yaml"), layers=4, ranks=2, microbatches=2)
>>> _, ranks = modulo_pipeline(spec)
>>> ranks
[0, 0, 1, 0, 1, 1]
"""

from __future__ import annotations

import numpy as np

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import NS_PER_SECOND, Pipeline, optimizer_seconds, pipeline_from_spec
from layersched.schedule.solve import Solution, solve_pipeline


def with_shape(spec: ProblemSpec, *, layers: int, ranks: int, microbatches: int) -> ProblemSpec:
    """``spec`` (a transformer problem) with ``layers`` blocks, ``ranks`` pipeline ranks and
    ``microbatches`` micro-batches."""
    arch = spec.model.architecture.model_copy(update={"num_layers": layers})
    model = spec.model.model_copy(update={"architecture": arch})
    train = spec.training.model_copy(update={"pipeline": ranks, "microbatches": microbatches, "stages_per_rank": 1})
    return spec.model_copy(update={"model": model, "training": train})


def modulo_pipeline(spec: ProblemSpec) -> tuple[Pipeline, list[int]]:
    """One stage per layer of ``spec`` and the rank of each: block ``i`` on ``i mod G``, the first
    layer (embedding) with block 0 and the last (head) with the last block. Costs as in
    `layersched.describe.stages`: the cost model's layer figures in ns, transfers over the link between the
    two ranks, a memory-bound optimizer step per layer."""
    from layersched.describe.costmodel import model_layers

    model, cluster, train = spec.model, spec.cluster, spec.training
    G = train.pipeline
    layers = model_layers(model, cluster.device, train.microbatch_size)
    S = len(layers)
    ranks = [0] + [i % G for i in range(S - 2)] + [(S - 3) % G]  # embedding, blocks, head
    ns = float(NS_PER_SECOND)

    def per_layer(field: str, scale: float = 1.0) -> np.ndarray:
        return np.array([round(layer.total(field) * scale) for layer in layers], dtype=np.int64)

    transfer = [
        round(cluster.link(ranks[s], ranks[s + 1]).time(layers[s].total("output_bytes")) * ns)
        if ranks[s] != ranks[s + 1]
        else 0
        for s in range(S - 1)
    ]
    params = per_layer("param_bytes")
    update = optimizer_seconds(layers, model.dtype_bytes, train.optimizer_bytes_per_param, cluster.device)
    pipe = Pipeline(
        name=spec.name,
        num_ranks=G,
        num_microbatches=train.microbatches,
        forward=per_layer("forward", ns),
        backward_input=per_layer("backward_input", ns),
        backward_weight=per_layer("backward_weight", ns),
        transfer=np.array(transfer, dtype=np.int64),
        mem_forward=per_layer("activation_bytes"),
        mem_freed_by_weight=per_layer("kept_for_weight_grad"),
        capacity=_modulo_capacity(spec, params, ranks),
        allreduce=np.zeros(S, dtype=np.int64),
        optimizer=np.round(update * ns).astype(np.int64),
        stage_layers=[[layer.name] for layer in layers],
        objective=train.objective,
        static_memory=np.zeros(S, dtype=np.int64),
    )
    return pipe, ranks


def _modulo_capacity(spec: ProblemSpec, params: np.ndarray, ranks: list[int]) -> int:
    """Device memory less the largest rank's weights, gradients and optimizer state."""
    per = 2 + spec.training.optimizer_bytes_per_param / spec.model.dtype_bytes
    static = np.zeros(spec.training.pipeline)
    np.add.at(static, ranks, params * per)
    return int(spec.cluster.device.memory_bytes - static.max())


def solve_modulo(spec: ProblemSpec) -> Solution:
    """Modulo allocation with gradient fast-forwarding, list-scheduled and validated."""
    from layersched.schedule.graph import build_graph, to_problem
    from layersched.schedule.metrics import schedule_metrics
    from solvers import solve

    pipe, ranks = modulo_pipeline(spec)
    tasks = to_problem(build_graph(pipe, split_backward=True, stage_to_rank=ranks), pipe.capacity)
    result = solve(tasks.problem, "list", objective=pipe.objective)  # validated by solvers.solve
    if result.schedule is None:
        raise RuntimeError(f"{spec.name}: modulo allocation found no schedule ({result.info.get('reason')})")
    metrics = schedule_metrics(tasks.problem, result.schedule, pipe.num_ranks, pipe.objective)
    return Solution(pipe, tasks, result.schedule, "modulo-ooo", pipe.objective, metrics, result.runtime, result)


def compare(spec: ProblemSpec) -> dict[str, Solution]:
    """GPipe, gradient fast-forwarding (``ooo`` template) and modulo allocation on ``spec``."""
    pipe = pipeline_from_spec(spec)
    return {
        "gpipe": solve_pipeline(pipe, schedule="gpipe"),
        "fast-forward": solve_pipeline(pipe, schedule="ooo"),
        "modulo": solve_modulo(spec),
    }
