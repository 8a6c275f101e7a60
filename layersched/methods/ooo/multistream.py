"""One device, two streams: weight-gradient kernels on a sub stream beside the main stream.

A host thread launches every kernel in turn (``launch`` ns each, on the ``host`` processor); a kernel
starts after its launch and its inputs. Kernel groups are the leaves of the cost model's layers (a
convolution with its normalisation and activation, say), one per pass: ``F``, ``I`` (the input
gradient; none for the first leaf, whose input gradient is never needed) and ``W`` (where the leaf
has weights); a group's launch costs ``launch`` per op of the cost model with work in that pass.
``F(k) -> F(k+1)``; the output gradient ``I(k+1)`` (the loss, ``F(K-1)``, for the last leaf) comes
before ``I(k)`` and ``W(k)``.

- serial: everything on the main stream in PyTorch's order (per leaf from the last: ``I`` then ``W``);
- out-of-order multi-stream: the same launch order, but ``W`` kernels run on the sub stream.

Co-run model: two kernels that share the device each run ``corun`` times slower (1: the device has
room for both; 2: it only time-slices them). `Problem` durations cannot depend on what overlaps, so
the model charges every ``W`` on the sub stream as if it overlapped all along: it takes ``corun * W``
there, and the main stream gets a charge task ``C`` of ``(corun - 1) * W`` (the progress it loses)
right after the ``I`` launched before that ``W``. A ``W`` that overlaps nothing is over-charged, so
the multi-stream time is an upper bound in this model; at ``corun = 2`` the main stream carries all
the serial work again. One iteration is timed (its makespan). Memory is not tracked: with one
iteration, only forwards allocate and every backward comes after them, so both orders peak at the
forward's activations; a ``W`` late on the sub stream only delays a release.

Example
-------
>>> k = Kernels(("a", "b"), forward=[10, 10], backward_input=[0, 10], backward_weight=[4, 4])
>>> serial = evaluate(k, launch=1, corun=1.5, multistream=False)
>>> ooo = evaluate(k, launch=1, corun=1.5, multistream=True)
>>> serial.makespan, ooo.makespan
(39, 37)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import NS_PER_SECOND
from solvers import Problem, Schedule, time_orders, validate

HOST, MAIN, SUB = 0, 1, 2


@dataclass(frozen=True)
class Kernels:
    """Per leaf (kernel group) in forward order: its passes' times in ns (0: no kernel)."""

    names: tuple[str, ...]
    forward: list[int] = field(default_factory=list)
    backward_input: list[int] = field(default_factory=list)
    backward_weight: list[int] = field(default_factory=list)
    ops: dict[str, list[int]] | None = None
    """Per pass (``"F"``, ``"I"``, ``"W"``) the number of kernels of each leaf (1 each when None)."""

    @property
    def num_leaves(self) -> int:
        return len(self.names)


def kernels(spec: ProblemSpec) -> Kernels:
    """The leaves of a model-level problem's layers on its device, for ``training.microbatch_size``."""
    from layersched.describe.costmodel import model_layers

    if spec.model is None or spec.cluster is None or spec.training is None:
        raise ValueError(f"{spec.name}: multi-stream costs need a model-level problem (model, cluster, training)")
    leaves = [
        leaf
        for layer in model_layers(spec.model, spec.cluster.device, spec.training.microbatch_size)
        for leaf in layer.leaves()
    ]

    def ns(f: str) -> list[int]:
        return [round(getattr(leaf, f) * NS_PER_SECOND) for leaf in leaves]

    bi = ns("backward_input")
    bi[0] = 0
    return Kernels(tuple(leaf.name for leaf in leaves), ns("forward"), bi, ns("backward_weight"), _op_counts(spec))


def _op_counts(spec: ProblemSpec) -> dict[str, list[int]] | None:
    """Kernels per leaf and pass from the cost model's ops (None for hand-written layers)."""
    from layersched.describe import costmodel
    from layersched.describe.config import CNNArch, MLPArch

    arch, b, d = spec.model.architecture, spec.training.microbatch_size, spec.model.dtype_bytes
    if arch is None:
        return None
    if isinstance(arch, CNNArch):
        layers = costmodel.cnn_layers(arch, b, d)
    elif isinstance(arch, MLPArch):
        layers = costmodel.mlp_layers(arch, b, d)
    else:
        layers = costmodel.transformer_layers(arch, b, d)
    units = [unit for _, us in layers for unit in us]
    passes = {"F": "forward", "I": "backward_input", "W": "backward_weight"}
    return {k: [sum(any(getattr(op, f)) for op in u.ops) for u in units] for k, f in passes.items()}


@dataclass(frozen=True)
class Evaluation:
    """A validated schedule (processors host, main, sub), its task names and its makespan (ns)."""

    problem: Problem
    schedule: Schedule
    makespan: int


def evaluate(k: Kernels, launch: int, corun: float, multistream: bool) -> Evaluation:
    """Build the one-iteration graph, time the serial or the multi-stream order, validate it."""
    if corun < 1:
        raise ValueError(f"corun is a slowdown factor and must be at least 1, got {corun}")
    names: list[str] = []
    dur: list[int] = []
    proc: list[int] = []
    edges: list[tuple[int, int]] = []
    kernel_of: dict[tuple[str, int], int] = {}

    def add(name: str, d: int, q: int) -> int:
        names.append(name)
        dur.append(int(d))
        proc.append(q)
        return len(names) - 1

    host: list[int] = []
    streams: list[list[int]] = [[], []]
    count = k.ops or {kind: [1] * k.num_leaves for kind in "FIW"}
    K = k.num_leaves
    passes = [("F", x) for x in range(K)]
    for x in range(K - 1, -1, -1):
        passes += [("I", x), ("W", x)]
    times = {"F": k.forward, "I": k.backward_input, "W": k.backward_weight}
    for kind, x in passes:
        d = times[kind][x]
        if d <= 0:
            continue
        side = multistream and kind == "W"
        launch_task = add(f"L{kind}{x}", launch * max(count[kind][x], 1), HOST)
        kernel = add(f"{kind}{x}", round(d * corun) if side else d, SUB if side else MAIN)
        kernel_of[kind, x] = kernel
        host.append(launch_task)
        streams[side].append(kernel)
        edges.append((launch_task, kernel))
        if side and corun > 1:
            streams[0].append(add(f"C{x}", round(d * (corun - 1)), MAIN))

    def need(kind: str, x: int, grad_of: int) -> None:
        src = kernel_of.get(("I", grad_of)) if grad_of < K else kernel_of.get(("F", K - 1))
        if (kind, x) in kernel_of and src is not None:
            edges.append((src, kernel_of[kind, x]))

    for x in range(K):
        if x + 1 < K and ("F", x) in kernel_of and ("F", x + 1) in kernel_of:
            edges.append((kernel_of["F", x], kernel_of["F", x + 1]))
        need("I", x, x + 1)
        need("W", x, x + 1)
    allowed = np.zeros((len(names), 3), dtype=bool)
    allowed[np.arange(len(names)), proc] = True
    problem = Problem(
        duration=dur, allowed=allowed, edges=edges, names=tuple(names), processor_names=("host", "main", "sub")
    )
    schedule = time_orders(problem, [host, *streams])
    validate(problem, schedule)
    return Evaluation(problem, schedule, schedule.makespan(problem))
