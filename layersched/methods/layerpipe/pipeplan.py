"""Asynchronous and synchronous pipelines planned from a model's layers: items, stages, steady state.

Shared by PipeDream (`layersched.methods.layerpipe.pipedream`) and LayerPipe
(`layersched.methods.layerpipe.layerpipe`). A model is a chain of *items*: whole layers
(``granularity="layer"``) or their sub-layers (``"sublayer"``, the leaves of `LayerSpec.leaves`).
A plan assigns contiguous runs of items to ``P`` processors, one stage each, and prices them.

Assumptions, stated once:

- **Time per micro-batch (asynchronous).** In the steady state of an asynchronous 1F1B pipeline every
  processor does one forward and one backward per micro-batch, so the time per micro-batch is the
  slowest processor's ``F + I + W``. Transfers run on the links in parallel with compute (PipeDream's
  assumption; NCCL on NVLink): a cut is a pipeline stage of its own costing its activation forward
  plus its gradient back, ``2 * link.time(output_bytes)``.
- **Memory per processor.** Weights, gradients and optimizer state (``2 + optimizer_bytes_per_param /
  dtype_bytes`` times the parameter bytes, as in `layersched.describe.stages`) plus the activations of the
  micro-batches in flight: ``P - p`` on stage ``p`` under 1F1B. PipeDream's weight stashing adds one
  stashed copy of the stage's weights per in-flight micro-batch beyond the newest.
- **Checked by simulation.** `simulate` builds the stage-level `Pipeline`, schedules ``m`` and ``2 m``
  micro-batches with a template, validates both through `layersched.schedule.solve`, and reads the steady state
  as the rate at which micro-batches enter the stages mid-run; it confirms the compute bottleneck (edges carry
  transfers as delays, so a link never limits throughput in the simulation).

Example
-------
>>> from layersched.describe.config import LayerSpec
>>> sub = [LayerSpec(name="mm", forward=2, backward_input=2, backward_weight=2, output_bytes=1),
...        LayerSpec(name="act", forward=1, backward_input=1, output_bytes=1)]
>>> layers = [LayerSpec(name=f"l{i}", sublayers=sub) for i in range(3)]
>>> len(Items.from_layers(layers, "layer").names), len(Items.from_layers(layers, "sublayer").names)
(3, 6)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from layersched.describe.config import LayerSpec, LinkSpec
from layersched.describe.partition import Partition
from layersched.describe.stages import NS_PER_SECOND, Pipeline

FIELDS = (
    "forward",
    "backward_input",
    "backward_weight",
    "activation_bytes",
    "kept_for_weight_grad",
    "param_bytes",
    "output_bytes",
)
GRANULARITIES = ("layer", "sublayer")


@dataclass(frozen=True)
class Items:
    """A model as a chain of items: names and, per field of `LayerSpec`, one value per item."""

    names: list[str]
    values: dict[str, np.ndarray]

    @classmethod
    def from_layers(cls, layers: list[LayerSpec], granularity: str) -> Items:
        """Whole layers (their totals) or their sub-layers (the leaves)."""
        if granularity == "layer":
            units = layers
        elif granularity == "sublayer":
            units = [leaf for layer in layers for leaf in layer.leaves()]
        else:
            raise ValueError(f"unknown granularity {granularity!r}; valid: {', '.join(GRANULARITIES)}")
        return cls([u.name for u in units], {f: np.array([u.total(f) for u in units], dtype=float) for f in FIELDS})

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]

    @property
    def work(self) -> np.ndarray:
        """Forward plus backward (both parts) per item, in seconds."""
        return self["forward"] + self["backward_input"] + self["backward_weight"]

    def cut_time(self, link: LinkSpec) -> np.ndarray:
        """Per cut after item ``i``: its activation sent forward and its gradient sent back."""
        return np.array([2 * link.time(b) for b in self["output_bytes"][:-1]])

    def per_stage(self, name: str, parts: list[list[int]]) -> np.ndarray:
        return np.array([self[name][idx].sum() for idx in parts])


def in_flight(processors: int) -> np.ndarray:
    """Micro-batches in flight on each stage of a 1F1B pipeline: ``P - p``.

    >>> in_flight(4).tolist()
    [4.0, 3.0, 2.0, 1.0]
    """
    return np.arange(processors, 0, -1, dtype=float)


@dataclass(frozen=True)
class Plan:
    """A priced pipeline: its items, their partition, the time per micro-batch and memory per processor."""

    method: str
    items: Items
    partition: Partition
    schedule: str
    split_backward: bool
    time_per_microbatch: float
    memory: np.ndarray
    capacity: float
    link: LinkSpec
    extra: dict = field(default_factory=dict)

    @property
    def processors(self) -> int:
        return len(self.partition.parts)

    @property
    def imbalance(self) -> float:
        """Slowest over mean processor compute per micro-batch (1.0: perfectly balanced)."""
        compute = self.items.per_stage("forward", self.partition.parts) + self.items.per_stage(
            "backward_input", self.partition.parts
        )
        compute += self.items.per_stage("backward_weight", self.partition.parts)
        return float(compute.max() / compute.mean()) if compute.mean() > 0 else 1.0

    def pipeline(self, microbatches: int) -> Pipeline:
        """The stage-level `Pipeline` of this plan (nanoseconds, bytes; no memory limit: memory is
        reported, not enforced, so a plan over its device's memory still simulates)."""
        parts, items = self.partition.parts, self.items

        def ns(name: str) -> np.ndarray:
            return np.rint(items.per_stage(name, parts) * NS_PER_SECOND).astype(np.int64)

        S = len(parts)
        zero = np.zeros(S, dtype=np.int64)
        transfer = [round(self.link.time(items["output_bytes"][p[-1]]) * NS_PER_SECOND) for p in parts[:-1]]
        return Pipeline(
            name=self.method,
            num_ranks=S,
            num_microbatches=microbatches,
            forward=ns("forward"),
            backward_input=ns("backward_input"),
            backward_weight=ns("backward_weight"),
            transfer=np.array(transfer, dtype=np.int64),
            mem_forward=items.per_stage("activation_bytes", parts).astype(np.int64),
            mem_freed_by_weight=items.per_stage("kept_for_weight_grad", parts).astype(np.int64),
            capacity=None,
            allreduce=zero,
            optimizer=zero,
            stage_layers=[[items.names[i] for i in p] for p in parts],
            default_schedule=self.schedule,
        )


def simulate(plan: Plan, microbatches: int) -> dict:
    """Schedule ``microbatches`` and twice as many with the plan's template; both schedules are
    validated (`layersched.schedule.solve.solve_pipeline`). Returns seconds per micro-batch in the steady state
    (``steady``: the rate at which the middle ``microbatches`` of the longer run enter each stage, the
    slowest stage's), per micro-batch of a flushed iteration of
    ``microbatches`` (``flushed``), and the simulated activation peak per rank (``peak_activations``).

    Example
    -------
    >>> from layersched.describe.config import LayerSpec, LinkSpec
    >>> from layersched.describe.partition import optimal_contiguous
    >>> layers = [LayerSpec(name=f"l{i}", forward=1e-3, backward_input=1e-3, backward_weight=1e-3,
    ...                     activation_bytes=10) for i in range(4)]
    >>> items = Items.from_layers(layers, "layer")
    >>> part = optimal_contiguous(items.work, 2)
    >>> plan = Plan("t", items, part, "1f1b", False, part.bottleneck, np.zeros(2), np.inf, LinkSpec(bandwidth=1e9))
    >>> sim = simulate(plan, 4)
    >>> round(sim["steady"] * 1e3, 6), round(sim["flushed"] * 1e3, 6)
    (6.0, 7.5)
    """
    from layersched.schedule.solve import solve_pipeline

    m = microbatches
    sols = [solve_pipeline(plan.pipeline(k), schedule=plan.schedule, objective="span") for k in (m, 2 * m)]
    # steady state: the rate at which the middle micro-batches enter each stage of the longer run
    start, index = sols[1].schedule.start, sols[1].tasks.index
    lo, hi = m // 2, m // 2 + m
    period = max(int(start[index[f"{s}F{hi}"]] - start[index[f"{s}F{lo}"]]) for s in range(plan.processors)) / m
    return {
        "steady": period / NS_PER_SECOND,
        "flushed": sols[0].metrics["span"] / m / NS_PER_SECOND,
        "peak_activations": list(sols[0].metrics["peak_memory"][: plan.processors]),
    }


def static_bytes(params: np.ndarray, optimizer_bytes_per_param: float, dtype_bytes: int) -> np.ndarray:
    """Weights, gradients and optimizer state for ``params`` bytes of weights (as `layersched.describe.stages`).

    >>> static_bytes(np.array([2.0]), 12.0, 2).tolist()
    [16.0]
    """
    return params * (2 + optimizer_bytes_per_param / dtype_bytes)


@dataclass(frozen=True)
class Setting:
    """What planning needs from a model-level problem: the priced layers, the link between
    neighbouring processors, each device's memory and the optimizer's state per parameter."""

    name: str
    layers: list[LayerSpec]
    link: LinkSpec
    capacity: float
    optimizer_bytes_per_param: float
    dtype_bytes: int
    microbatches: int

    @classmethod
    def from_spec(cls, spec, source: str = "problem") -> Setting:
        """From a model-level `ProblemSpec`; `SpecError` for a stage-level one."""
        from layersched.describe.config import SpecError
        from layersched.describe.costmodel import model_layers

        if spec.model is None:
            raise SpecError(f"{source}: partitioning needs a model-level problem (model, cluster, training)")
        train, cluster = spec.training, spec.cluster
        return cls(
            name=spec.name,
            layers=model_layers(spec.model, cluster.device, train.microbatch_size),
            link=cluster.intra_node,
            capacity=float(train.memory_limit or cluster.device.memory_bytes),
            optimizer_bytes_per_param=train.optimizer_bytes_per_param,
            dtype_bytes=spec.model.dtype_bytes,
            microbatches=train.microbatches,
        )

    def items(self, granularity: str) -> Items:
        return Items.from_layers(self.layers, granularity)

    def static(self, items: Items) -> np.ndarray:
        return static_bytes(items["param_bytes"], self.optimizer_bytes_per_param, self.dtype_bytes)
