"""Data-parallel training with out-of-order weight gradients: overlap the all-reduces with compute.

The task graph spans ``T`` iterations and the forward pass of iteration ``T`` (which closes the
window). Per iteration ``t`` and layer ``l`` there are a forward ``F``, a backward for inputs ``I``,
a backward for weights ``W`` and an update ``U`` on the GPU, and per gradient bucket an all-reduce
``R`` on the network processor (a ring: ``2(n-1)/n * bytes / bandwidth + 2(n-1) * latency``, as
`layersched.describe.stages` prices it). Edges: ``F(t,l) -> F(t,l+1)``, the output gradient ``I(t,l+1)`` (or
the loss, ``F(t,L-1)``) before ``I(t,l)`` and ``W(t,l)``, ``W -> R`` of its bucket ``-> U(t,l) ->
F(t+1,l)``. The input gradient of layer 0 is never needed: its ``I`` takes no time. Memory: ``F``
allocates the layer's activations, ``I`` frees all of them but what ``W`` still needs, ``W`` the
rest (the first layer's ``W`` all of them: it has no input gradient); `Evaluation.peak_memory`.
The peak is every layer's activations, at the end of a forward, in every valid order: deferring
``W`` costs no memory here. A layer's next forward waits for its own ``W`` (through its update),
and that ``W`` for the input gradients of all later layers, so when ``F(t+1,x)`` runs the GPU holds
at most the new activations of layers up to ``x`` and the kept part of the later ones.

A policy is the order of one iteration's backward passes on the GPU; updates run right before their
layer's next forward and the network runs the all-reduces in the order their buckets complete.
The iteration time is ``(end of F(T, L-1) - end of F(0, L-1)) / T``: the mean time between the ends
of the same task in consecutive iterations. It is the window's makespan less the first forward pass,
so CP-SAT, which minimises the makespan from the best reverse-first-k order as its hint, is never
worse than that order.

Example
-------
>>> import numpy as np
>>> costs = LayerCosts(("a", "b"), *(np.array([10, 10]) for _ in range(4)), np.array([1000, 1000]))
>>> net = Network(replicas=2, bandwidth=1e11, latency=0.0)  # 10 ns per all-reduce
>>> base = evaluate(costs, net, reverse_first_k(2, 0))
>>> best = evaluate(costs, net, reverse_first_k(2, 2))
>>> base.iteration_time, best.iteration_time
(90.0, 80.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import NS_PER_SECOND, optimizer_seconds
from solvers import Problem, Result, Schedule, peak_memory, time_orders, validate

Order = list[tuple[str, int]]
"""One iteration's backward passes on the GPU: ``("I", l)`` and ``("W", l)`` items."""


@dataclass(frozen=True)
class LayerCosts:
    """Per layer of one replica: times in ns (``update``: the optimizer step), gradient bytes, and
    the bytes of activations the forward keeps for the backward (``activation``; of them ``kept``
    until ``W``), none when left out."""

    names: tuple[str, ...]
    forward: np.ndarray
    backward_input: np.ndarray
    backward_weight: np.ndarray
    update: np.ndarray
    grad_bytes: np.ndarray
    activation: np.ndarray | None = None
    kept: np.ndarray | None = None

    @property
    def num_layers(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Network:
    """Ring all-reduce over ``replicas`` devices on a link of ``bandwidth`` bytes/s and ``latency`` s
    per step; ``bucket_bytes`` > 0 fuses consecutive gradients (in ``W`` order) into buckets of at
    least that size (PyTorch DDP's default is 25 MiB), 0 gives one all-reduce per layer."""

    replicas: int
    bandwidth: float
    latency: float
    bucket_bytes: int = 0

    def allreduce_ns(self, nbytes: float) -> int:
        """Ring all-reduce time of ``nbytes`` in ns (0 for one replica or nothing to send).

        >>> Network(4, 1e9, 1e-6).allreduce_ns(1e6)
        1506000
        """
        n = self.replicas
        if n <= 1 or nbytes <= 0:
            return 0
        return round((2 * (n - 1) / n * nbytes / self.bandwidth + 2 * (n - 1) * self.latency) * NS_PER_SECOND)


def layer_costs(spec: ProblemSpec) -> LayerCosts:
    """Per-layer costs of a model-level problem on its cluster's device, for a per-device batch of
    ``training.microbatch_size`` (summed over ``training.microbatches``); gradients are
    ``dtype_bytes`` per parameter, the update is memory bound as in `layersched.describe.stages`."""
    from layersched.describe.costmodel import model_layers

    model, cluster, train = spec.model, spec.cluster, spec.training
    if model is None or cluster is None or train is None:
        raise ValueError(f"{spec.name}: data-parallel costs need a model-level problem (model, cluster, training)")
    layers = model_layers(model, cluster.device, train.microbatch_size)
    m, dev = train.microbatches, cluster.device

    def ns(field: str) -> np.ndarray:
        return np.array([round(layer.total(field) * m * NS_PER_SECOND) for layer in layers], dtype=np.int64)

    grad = np.array([layer.total("param_bytes") for layer in layers], dtype=np.int64)
    seconds = optimizer_seconds(layers, model.dtype_bytes, train.optimizer_bytes_per_param, dev)
    update = np.round(seconds * NS_PER_SECOND).astype(np.int64)
    bi = ns("backward_input")
    bi[0] = 0  # the input gradient of the first layer is never needed

    def nbytes(field: str) -> np.ndarray:
        return np.array([layer.total(field) * m for layer in layers], dtype=np.int64)

    return LayerCosts(
        tuple(layer.name for layer in layers),
        ns("forward"),
        bi,
        ns("backward_weight"),
        update,
        grad,
        nbytes("activation_bytes"),
        nbytes("kept_for_weight_grad"),
    )


def network_for(spec: ProblemSpec, replicas: int, bucket_bytes: int = 0) -> Network:
    """The ring of ``replicas`` devices of the problem's cluster: the inter-node link once the
    replicas span more than one node, else the intra-node link."""
    cluster = spec.cluster
    if replicas > cluster.num_devices:
        raise ValueError(f"{spec.name}: {replicas} replicas, but the cluster has {cluster.num_devices} devices")
    link = cluster.inter_node if replicas > cluster.devices_per_node and cluster.inter_node else cluster.intra_node
    return Network(replicas, link.bandwidth, link.latency, bucket_bytes)


# -- policies --------------------------------------------------------------------------------------
def reverse_first_k(num_layers: int, k: int) -> Order:
    """The usual reverse order (``I`` then ``W`` per layer, last layer first) with the weight gradients
    of the first ``k`` layers deferred until the input-gradient chain is done, then computed in
    forward order so that their all-reduces overlap the next forward. ``k = 0`` is the usual order.

    >>> reverse_first_k(3, 2)
    [('I', 2), ('W', 2), ('I', 1), ('I', 0), ('W', 0), ('W', 1)]
    """
    if not 0 <= k <= num_layers:
        raise ValueError(f"k must be in 0..{num_layers}, got {k}")
    order: Order = []
    for layer in range(num_layers - 1, -1, -1):
        order.append(("I", layer))
        if layer >= k:
            order.append(("W", layer))
    return order + [("W", layer) for layer in range(k)]


def buckets(costs: LayerCosts, order: Order, bucket_bytes: int) -> list[list[int]]:
    """Layers per all-reduce: consecutive ``W`` passes of ``order`` until at least ``bucket_bytes``
    (one layer each when 0); layers without gradients get no all-reduce.

    >>> c = LayerCosts(("a", "b", "c"), *(np.zeros(3, np.int64) for _ in range(4)), np.array([4, 0, 4]))
    >>> buckets(c, reverse_first_k(3, 0), 5), buckets(c, reverse_first_k(3, 0), 0)
    ([[2, 0]], [[2], [0]])
    """
    out: list[list[int]] = []
    size = bucket_bytes  # a full bucket: start a new one
    for kind, layer in order:
        if kind != "W" or costs.grad_bytes[layer] <= 0:
            continue
        if size >= bucket_bytes:
            out.append([])
            size = 0
        out[-1].append(layer)
        size += int(costs.grad_bytes[layer])
    return out


# -- task graph ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DPGraph:
    """The window's `Problem` (processor 0: the GPU, 1: the network), task names ``F3.2`` (kind,
    iteration, layer; ``R1.0`` is iteration 1's first bucket) and the bucket layers."""

    problem: Problem
    index: dict[str, int]
    buckets: list[list[int]]
    iterations: int
    num_layers: int

    def iteration_time(self, schedule: Schedule) -> float:
        """Mean time between the ends of the last forward in consecutive iterations."""
        end = schedule.end(self.problem)
        last = self.num_layers - 1
        return float(end[self.index[f"F{self.iterations}.{last}"]] - end[self.index[f"F0.{last}"]]) / self.iterations


def build_graph(costs: LayerCosts, net: Network, bucket_layers: list[list[int]], iterations: int = 3) -> DPGraph:
    """The task graph of ``iterations`` iterations and the next forward pass (see the module doc)."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    L, T = costs.num_layers, iterations
    names: list[str] = []
    dur: list[int] = []
    proc: list[int] = []
    mem: list[int] = []
    act = np.zeros(L, np.int64) if costs.activation is None else costs.activation
    kept = np.zeros(L, np.int64) if costs.kept is None else np.minimum(costs.kept, act).copy()
    kept[0] = act[0]  # the first layer has no input gradient: its W frees all it keeps

    def task(name: str, d: int, q: int = 0, m: int = 0) -> None:
        names.append(name)
        dur.append(int(d))
        proc.append(q)
        mem.append(int(m))

    bucket_of = {layer: b for b, ls in enumerate(bucket_layers) for layer in ls}
    for t in range(T + 1):
        for layer in range(L):
            # the window's last forward closes it: it keeps nothing for a backward it does not hold
            task(f"F{t}.{layer}", costs.forward[layer], m=act[layer] if t < T else 0)
            if t < T:
                task(f"I{t}.{layer}", costs.backward_input[layer], m=-(act[layer] - kept[layer]))
                task(f"W{t}.{layer}", costs.backward_weight[layer], m=-kept[layer])
                task(f"U{t}.{layer}", costs.update[layer])
        if t < T:
            for b, ls in enumerate(bucket_layers):
                task(f"R{t}.{b}", net.allreduce_ns(sum(int(costs.grad_bytes[x]) for x in ls)), 1)
    index = {n: i for i, n in enumerate(names)}
    edges: list[tuple[str, str]] = []
    for t in range(T + 1):
        edges += [(f"F{t}.{x}", f"F{t}.{x + 1}") for x in range(L - 1)]
        if t == T:
            break
        for x in range(L):
            grad = f"I{t}.{x + 1}" if x + 1 < L else f"F{t}.{L - 1}"
            edges += [(grad, f"I{t}.{x}"), (grad, f"W{t}.{x}"), (f"U{t}.{x}", f"F{t + 1}.{x}")]
            if x in bucket_of:
                edges += [(f"W{t}.{x}", f"R{t}.{bucket_of[x]}"), (f"R{t}.{bucket_of[x]}", f"U{t}.{x}")]
            else:
                edges.append((f"W{t}.{x}", f"U{t}.{x}"))
    allowed = np.zeros((len(names), 2), dtype=bool)
    allowed[np.arange(len(names)), proc] = True
    problem = Problem(
        duration=dur,
        allowed=allowed,
        edges=[(index[u], index[v]) for u, v in edges],
        mem_delta=mem,
        names=tuple(names),
        processor_names=("gpu", "net"),
    )
    return DPGraph(problem, index, bucket_layers, T, L)


def gpu_orders(graph: DPGraph, order: Order) -> list[list[int]]:
    """Per processor, task indices: per iteration the forwards (each after its layer's previous
    update) then ``order``; the network's all-reduces in bucket order."""
    idx, T, L = graph.index, graph.iterations, graph.num_layers
    gpu: list[int] = []
    for t in range(T + 1):
        for x in range(L):
            if t:
                gpu.append(idx[f"U{t - 1}.{x}"])
            gpu.append(idx[f"F{t}.{x}"])
        if t < T:
            gpu += [idx[f"{kind}{t}.{x}"] for kind, x in order]
    net = [idx[f"R{t}.{b}"] for t in range(T) for b in range(len(graph.buckets))]
    return [gpu, net]


@dataclass(frozen=True)
class Evaluation:
    """A validated schedule of a policy and its steady-state iteration time (ns)."""

    graph: DPGraph
    schedule: Schedule
    iteration_time: float

    @property
    def peak_memory(self) -> int:
        """The most activation bytes the GPU holds at once over the window."""
        return int(peak_memory(self.graph.problem, self.schedule)[0])


def evaluate(costs: LayerCosts, net: Network, order: Order, iterations: int = 3) -> Evaluation:
    """Time ``order`` (buckets formed along it with ``net.bucket_bytes``) and validate it."""
    graph = build_graph(costs, net, buckets(costs, order, net.bucket_bytes), iterations)
    schedule = time_orders(graph.problem, gpu_orders(graph, order))
    validate(graph.problem, schedule)
    return Evaluation(graph, schedule, graph.iteration_time(schedule))


def best_k(costs: LayerCosts, net: Network, iterations: int = 3) -> tuple[int, Evaluation]:
    """The ``k`` of `reverse_first_k` with the shortest iteration time (the smallest on ties)."""
    L = costs.num_layers
    runs = [(k, evaluate(costs, net, reverse_first_k(L, k), iterations)) for k in range(L + 1)]
    return min(runs, key=lambda kr: (kr[1].iteration_time, kr[0]))


def search_order(hint: Evaluation, time_limit: float = 10.0, workers: int = 2) -> tuple[Evaluation, Result]:
    """CP-SAT over the full order of ``hint``'s window (its buckets kept), started from ``hint`` (say,
    the best ``k``), so never worse than it. Returns the validated evaluation and CP-SAT's result."""
    from solvers.cpsat import cpsat

    problem = hint.graph.problem
    result = cpsat(problem, objective="makespan", time_limit=time_limit, workers=workers, hint=hint.schedule)
    validate(problem, result.schedule)
    return Evaluation(hint.graph, result.schedule, hint.graph.iteration_time(result.schedule)), result


def backward_orders(ev: Evaluation) -> list[Order]:
    """Per iteration of ``ev``'s window, the order its schedule runs the ``I`` and ``W`` passes in:
    what `layersched.methods.ooo.dp_order` executes.

    >>> costs = LayerCosts(("a", "b"), *(np.array([10, 10]) for _ in range(4)), np.array([1000, 1000]))
    >>> ev = evaluate(costs, Network(2, 1e11, 0.0), reverse_first_k(2, 1), iterations=2)
    >>> backward_orders(ev)[1]
    [('I', 1), ('W', 1), ('I', 0), ('W', 0)]
    """
    names, start = ev.graph.problem.names, ev.schedule.start
    keyed: list[list[tuple[int, int, int, str]]] = [[] for _ in range(ev.graph.iterations)]
    for t, name in enumerate(names):
        if name[0] in "IW":
            it, layer = (int(v) for v in name[1:].split("."))
            # at equal starts (zero-length passes) an I goes first, from the last layer down
            keyed[it].append((int(start[t]), name[0] == "W", -layer, name[0]))
    return [[(kind, -neg) for _, _, neg, kind in sorted(items)] for items in keyed]
