"""From a problem description to per-stage costs: the `Pipeline` every schedule is built on.

A model-level problem is priced by the cost model, split into ``pipeline * stages_per_rank``
contiguous stages of balanced cost, and turned into integer times (nanoseconds). A stage-level
problem is taken as it is.

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> spec = ProblemSpec.model_validate({"name": "t", "pipeline": {"stages": 4, "microbatches": 8,
...     "forward": 2, "backward_input": 2, "backward_weight": 1, "transfer": 1}})
>>> pipe = pipeline_from_spec(spec)
>>> pipe.num_stages, pipe.num_ranks, pipe.forward.tolist()
(4, 4, [2, 2, 2, 2])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from layersched.describe.config import MAX_INT, DeviceSpec, LayerSpec, ProblemSpec, SpecError
from layersched.describe.partition import optimal_contiguous
from layersched.describe.placement import placement

NS_PER_SECOND = 1_000_000_000


@dataclass(frozen=True)
class Pipeline:
    """Costs per stage of one training iteration. Arrays have one entry per stage; ``transfer[s]``
    is the time to send stage ``s``'s output to stage ``s + 1`` (and the gradient back).
    ``backward`` is the time of a fused backward (``B``) where it is not ``backward_input +
    backward_weight`` (None: it is). ``action_overhead`` is added to every compute action (``F``,
    ``I``, ``W`` and the fused ``B``; one figure for all, or one per kind, see `overhead`): the
    runtime's fixed cost per action."""

    name: str
    num_ranks: int
    num_microbatches: int
    forward: np.ndarray
    backward_input: np.ndarray
    backward_weight: np.ndarray
    transfer: np.ndarray
    mem_forward: np.ndarray
    mem_freed_by_weight: np.ndarray
    capacity: int | None
    allreduce: np.ndarray
    optimizer: np.ndarray
    data_parallel: int = 1
    time_unit: str = "ns"
    memory_unit: str = "bytes"
    stage_layers: list[list[str]] | None = None
    default_schedule: str = "1f1b"
    default_solver: str | None = None
    objective: str = "span"
    static_memory: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    action_overhead: int | dict[str, int] = 0
    backward: np.ndarray | None = None
    placement: str | tuple[int, ...] | None = None
    """Which rank holds each stage: ``loop``, ``v`` or one rank per stage; None: a template's own
    (loop for the generic solvers)."""

    def stage_to_rank(self, default: str = "loop") -> list[int]:
        """The rank of each stage: the problem's placement, else ``default``."""
        return placement(self.num_stages, self.num_ranks, self.placement or default)

    def least_memory(self) -> int:
        """The least per-rank memory limit under which any schedule exists (one micro-batch at a time):
        the largest sum, over a rank's stages, of one forward's activations. A stage's ``I`` waits for
        the forwards of every later stage, the rank's other stages among them, so they are all held."""
        per_rank = np.bincount(self.stage_to_rank(), weights=self.mem_forward, minlength=self.num_ranks)
        return int(per_rank.max())

    def overhead(self, kind: str) -> int:
        """The fixed cost of one action of ``kind`` (``F``, ``I``, ``W`` or ``B``)."""
        o = self.action_overhead
        return int(o.get(kind, 0)) if isinstance(o, dict) else int(o)

    def pass_durations(self) -> dict[str, list[int]]:
        """Per stage, the duration of its ``F``, ``I`` and ``W`` passes, each with its action overhead
        (`overhead`)."""
        costs = (("F", self.forward), ("I", self.backward_input), ("W", self.backward_weight))
        return {k: [int(t) + self.overhead(k) for t in x] for k, x in costs}

    @property
    def num_stages(self) -> int:
        return len(self.forward)

    @property
    def stages_per_rank(self) -> int:
        return self.num_stages // self.num_ranks

    @property
    def mem_freed_by_input(self) -> np.ndarray:
        return self.mem_forward - self.mem_freed_by_weight


def _ints(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _whole(values, what: str, unit: str, source: str) -> np.ndarray:
    """A model's per-stage figures (seconds already turned into ns), rounded to whole numbers; `SpecError`
    naming the first stage whose figure is not finite or above `MAX_INT`, the most a problem holds
    (a layer's forward of 1e30 s once ended in an OverflowError). ``what`` names the figure with
    ``{s}`` for the stage: ``"forward of stage {s}"``."""
    a = np.asarray(values, dtype=float).reshape(-1)
    bad = ~np.isfinite(a) | (a > MAX_INT)
    if bad.any():
        s = int(np.argmax(bad))
        raise SpecError(
            f"{source}: {what.format(s=s)} comes to {a[s]:.6g} {unit}, more than the {MAX_INT:.0e} a problem "
            "may hold; check the model's and the cluster's figures"
        )
    return np.rint(a).astype(np.int64)


def optimizer_seconds(
    layers: list[LayerSpec], dtype_bytes: int, optimizer_bytes_per_param: float, device: DeviceSpec
) -> np.ndarray:
    """Per layer, the seconds of its optimizer step: each leaf's profiled ``optimizer`` figure, else
    memory bound (its weights, gradients and ``optimizer_bytes_per_param`` of state per parameter,
    read and written once at the device's achievable bandwidth).

    >>> from layersched.describe.config import DeviceSpec, LayerSpec
    >>> dev = DeviceSpec(name="d", peak_flops=1e12, memory_bandwidth=1e9, memory_bytes=2**30, bandwidth_efficiency=1)
    >>> optimizer_seconds([LayerSpec(name="a", param_bytes=1000), LayerSpec(name="b", optimizer=0.5)], 4, 4.0, dev)
    array([3.e-06, 5.e-01])
    """
    rate = device.memory_bandwidth * device.bandwidth_efficiency
    per_param = 2 + optimizer_bytes_per_param  # gradient and state bytes beside each weight
    return np.array(
        [
            sum(
                leaf.param_bytes / dtype_bytes * per_param * 2 / rate if leaf.optimizer is None else leaf.optimizer
                for leaf in layer.leaves()
            )
            for layer in layers
        ],
        dtype=float,
    )


GRANULARITIES = ("layer", "sublayer")
"""Where a model-level problem may be cut between stages: between whole layers, or also between the
sub-layers of a layer (LayerPipe's inter-layer cuts; a transformer block's attention and MLP parts,
down to single kernels where the cost model has them)."""


def model_units(spec: ProblemSpec, granularity: str = "layer") -> list:
    """The model's layers (``layer``) or their leaves (``sublayer``), in order: what stages are made of."""
    from layersched.describe.costmodel import model_layers

    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: expected one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    model, cluster, train = spec.model, spec.cluster, spec.training
    assert model is not None and cluster is not None and train is not None
    layers = model_layers(model, cluster.device, train.microbatch_size)
    return layers if granularity == "layer" else [leaf for layer in layers for leaf in layer.leaves()]


def pipeline_from_spec(
    spec: ProblemSpec,
    source: str = "problem",
    *,
    granularity: str = "layer",
    parts: list[list[int]] | None = None,
    all_in_flight: bool = False,
) -> Pipeline:
    """Lower a `ProblemSpec` to a `Pipeline`; `SpecError` when it cannot be split or priced.

    A model-level problem is cut between whole layers or, with ``granularity="sublayer"``, also
    inside them (see `model_units`); ``parts`` gives the units of each stage (default: the exact
    memory-aware partition with the least bottleneck, counting 1F1B's activations in flight, or with
    ``all_in_flight`` every micro-batch's on every stage)."""
    if spec.pipeline is not None:
        p = spec.pipeline
        S = p.stages
        full = np.full(S, 1, dtype=np.int64)
        return Pipeline(
            name=spec.name,
            num_ranks=S // p.stages_per_rank,
            num_microbatches=p.microbatches,
            forward=_ints(p.per_stage("forward")),
            backward_input=_ints(p.per_stage("backward_input")),
            backward_weight=_ints(p.per_stage("backward_weight")),
            transfer=_ints(p.per_stage("transfer")).reshape(max(S - 1, 0)),
            mem_forward=_ints(p.per_stage("memory_forward")),
            mem_freed_by_weight=_ints(p.per_stage("memory_freed_by_weight")),
            capacity=p.memory_limit,
            allreduce=full * 0,
            optimizer=full * 0,
            time_unit=p.time_unit,
            memory_unit=p.memory_unit,
            default_schedule=p.schedule,
            default_solver=p.solver,
            objective=p.objective,
            static_memory=full * 0,
            placement=_placement(p.placement),
        )
    return _model_pipeline(spec, source, granularity, parts, all_in_flight)


def _placement(value) -> str | tuple[int, ...] | None:
    return tuple(value) if isinstance(value, list) else value


def _model_pipeline(
    spec: ProblemSpec, source: str, granularity: str, parts: list[list[int]] | None, all_in_flight: bool = False
) -> Pipeline:
    model, cluster, train = spec.model, spec.cluster, spec.training
    assert model is not None and cluster is not None and train is not None
    ranks = train.pipeline
    if ranks * train.data_parallel > cluster.num_devices:
        raise SpecError(
            f"{source}: training: pipeline x data_parallel = {ranks * train.data_parallel} "
            f"devices, but the cluster has {cluster.num_devices}; lower them or add devices (a profiled "
            "problem describes this machine with as many devices as 'layersched profile --pipeline' asked for)"
        )
    layers = model_units(spec, granularity)
    S = ranks * train.stages_per_rank
    if len(layers) < S:
        inside = granularity == "layer" and len(model_units(spec, "sublayer")) >= S
        raise SpecError(
            f"{source}: training.pipeline: {S} stages need at least {S} "
            f"{'layers' if granularity == 'layer' else 'sub-layers'}, the model has {len(layers)}; lower pipeline or "
            f"stages_per_rank{', or cut inside layers (cuts: sublayer or best)' if inside else ''}"
        )
    if train.placement is not None:
        try:
            placement(S, ranks, train.placement)
        except ValueError as exc:
            raise SpecError(f"{source}: training.placement: {exc}") from None
    tot = {
        f: np.array([layer.total(f) for layer in layers])
        for f in (
            "forward",
            "backward_input",
            "backward_weight",
            "backward",
            "activation_bytes",
            "kept_for_weight_grad",
            "param_bytes",
            "output_bytes",
        )
    }
    if parts is None:
        parts = _partition(tot, S, train, cluster, model.dtype_bytes, source, all_in_flight)
    elif sorted(i for idx in parts for i in idx) != list(range(len(layers))) or len(parts) != S or not all(parts):
        raise ValueError(f"parts: expected {S} non-empty runs covering units 0..{len(layers) - 1} in order")

    ns = float(NS_PER_SECOND)

    def per_stage(f: str, scale: float = 1.0) -> np.ndarray:
        unit = "ns" if scale == ns else "bytes"
        return _whole([tot[f][idx].sum() * scale for idx in parts], f.replace("_", " ") + " of stage {s}", unit, source)

    params = per_stage("param_bytes")
    # the stage's output crosses to the next stage's rank: same node unless the cluster says not
    transfer = _whole(
        [cluster.link(s % ranks, (s + 1) % ranks).time(tot["output_bytes"][parts[s][-1]]) * ns for s in range(S - 1)],
        "the transfer after stage {s}",
        "ns",
        source,
    )
    dp = train.data_parallel
    # ring all-reduce of the stage's gradients across the data-parallel replicas (across nodes when
    # the replicas sit on different nodes, i.e. devices pipeline*k apart)
    dp_link = cluster.link(0, ranks) if dp > 1 else cluster.intra_node
    allreduce = _whole(
        [
            (2 * (dp - 1) / dp * b / dp_link.bandwidth + 2 * (dp - 1) * dp_link.latency) * ns if dp > 1 else 0
            for b in params
        ],
        "the gradient all-reduce of stage {s}",
        "ns",
        source,
    )
    dev = cluster.device
    tot["optimizer"] = optimizer_seconds(layers, model.dtype_bytes, train.optimizer_bytes_per_param, dev)
    optimizer = per_stage("optimizer", ns)
    static = _whole(
        [b * (2 + train.optimizer_bytes_per_param / model.dtype_bytes) for b in params],
        "the weights, gradients and optimizer state of stage {s}",
        "bytes",
        source,
    )
    static_per_rank = np.zeros(ranks, dtype=np.int64)
    np.add.at(static_per_rank, placement(S, ranks, train.placement or "loop"), static)
    capacity = train.memory_limit or int(dev.memory_bytes - static_per_rank.max())
    if capacity <= 0:
        raise SpecError(
            f"{source}: training.pipeline: weights and optimizer state need "
            f"{static_per_rank.max() / 2**30:.1f} GiB on one device, more than its "
            f"{dev.memory_bytes / 2**30:.1f} GiB; use more pipeline stages"
        )
    return Pipeline(
        name=spec.name,
        num_ranks=ranks,
        num_microbatches=train.microbatches,
        forward=per_stage("forward", ns),
        backward_input=per_stage("backward_input", ns),
        backward_weight=per_stage("backward_weight", ns),
        transfer=transfer,
        mem_forward=per_stage("activation_bytes"),
        mem_freed_by_weight=per_stage("kept_for_weight_grad"),
        capacity=capacity,
        allreduce=allreduce,
        optimizer=optimizer,
        data_parallel=dp,
        time_unit="ns",
        stage_layers=[[layers[i].name for i in idx] for idx in parts],
        default_schedule=train.schedule,
        default_solver=train.solver,
        objective=train.objective,
        static_memory=static,
        placement=_placement(train.placement),
        action_overhead=(  # at most MAX_SECONDS each (the field's cap): MAX_INT in ns
            {k: round(v * ns) for k, v in dev.action_overhead.items()}
            if isinstance(dev.action_overhead, dict)
            else round(dev.action_overhead * ns)
        ),
        backward=per_stage("backward", ns) if any(s.backward is not None for x in layers for s in x.leaves()) else None,
    )


def _partition(
    tot: dict, S: int, train, cluster, dtype_bytes: int, source: str, all_in_flight: bool = False
) -> list[list[int]]:
    """Contiguous layers per stage by `layersched.describe.partition.optimal_contiguous`: the slowest stage
    (compute, or a link at a cut, both directions) as fast as possible, with each stage's weights,
    gradients and optimizer state plus the activations that 1F1B keeps in flight (``S - s``
    micro-batches on stage ``s``, one stage per rank; every micro-batch with ``all_in_flight``, the
    memory-aware variant for schedules that keep more) within the device's memory."""
    link = (
        cluster.intra_node
        if S * train.data_parallel <= cluster.devices_per_node
        else (cluster.inter_node or cluster.intra_node)
    )
    cut = [2 * link.time(b) for b in tot["output_bytes"][:-1]]
    one_f_one_b = train.stages_per_rank == 1 and not all_in_flight
    in_flight = [min(train.microbatches, S - s) for s in range(S)] if one_f_one_b else train.microbatches
    try:
        part = optimal_contiguous(
            tot["forward"] + tot["backward_input"] + tot["backward_weight"],
            S,
            cut=cut,
            fixed=tot["param_bytes"] * (2 + train.optimizer_bytes_per_param / dtype_bytes),
            scaled=tot["activation_bytes"],
            scale=in_flight,
            capacity=cluster.device.memory_bytes,
        )
    except ValueError as exc:
        raise SpecError(f"{source}: training.pipeline: {exc}") from None
    return part.parts
