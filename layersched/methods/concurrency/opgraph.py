"""A training iteration at operation level, as moldable tasks on one multi-core processor.

Per layer and micro-batch: a forward ``F``, a backward for the input ``I`` (none for the first
layer: its input needs no gradient) and a backward for the weights ``W`` (none without weights); per
layer with weights an update ``U``. The edges are the ones that constrain execution:

- ``F`` of a layer feeds ``F`` of the next (the last forward also computes the loss gradient);
- the gradient of a layer's output (from the next layer's ``I``, or the loss) feeds its ``I`` and its
  ``W``;
- the ``W`` of successive micro-batches of one layer add into the same gradient, so they run in turn;
- ``U`` of a layer follows its last ``W`` and every ``I`` of that layer (they read the weights it
  overwrites).

Each task has one mode per thread count of the grid (``threads``), its duration from a performance
model (`layersched.methods.concurrency.perfmodel`), in nanoseconds.

>>> from layersched.methods.concurrency.perfmodel import ThreadModel
>>> m = ThreadModel(a=1e-6, b=8e-6, c=1e-6)
>>> g = op_graph([LayerOps("a", m, None, m, m), LayerOps("b", m, m, m, m)], microbatches=2, cores=4)
>>> g.problem.num_tasks, g.names[:4], g.threads
(12, ('a.F0', 'b.F0', 'b.I0', 'b.W0'), (1, 2, 4))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from solvers import Problem


class Model(Protocol):
    def time(self, k: int) -> float: ...


@dataclass(frozen=True)
class SumModel:
    """Operations run one after another: their times add."""

    parts: tuple

    def time(self, k: int) -> float:
        return sum(p.time(k) for p in self.parts)


@dataclass(frozen=True)
class LayerOps:
    """One layer's operations: the forward, and where they exist the backward for the input, the
    backward for the weights and the update."""

    name: str
    forward: Model
    backward_input: Model | None
    backward_weight: Model | None
    update: Model | None


@dataclass(frozen=True)
class OpGraph:
    """The moldable problem, its task names, the thread count of each mode, the layers and the
    micro-batch count; ``kind[t]``, ``layer[t]`` and ``microbatch[t]`` (-1 for updates) per task."""

    problem: Problem
    names: tuple[str, ...]
    threads: tuple[int, ...]
    layers: tuple[LayerOps, ...]
    microbatches: int
    kind: tuple[str, ...]
    layer: tuple[int, ...]
    microbatch: tuple[int, ...]

    @property
    def cores(self) -> int:
        return int(self.problem.width[0])

    def mode_of(self, threads: int) -> int:
        """The mode index of a thread count of the grid."""
        return self.threads.index(threads)


def thread_grid(cores: int) -> tuple[int, ...]:
    """Powers of two below ``cores``, and ``cores``: ``(1, 2, 4, 8, 12)`` for 12."""
    out, k = [], 1
    while k < cores:
        out.append(k)
        k *= 2
    return (*out, cores)


def op_graph(
    layers: list[LayerOps], *, microbatches: int, cores: int, threads: tuple[int, ...] | None = None
) -> OpGraph:
    """The operation-level graph of one iteration (see the module docstring)."""
    if microbatches < 1 or cores < 1:
        raise ValueError(f"microbatches and cores must be at least 1, got {microbatches} and {cores}")
    if not layers:
        raise ValueError("op_graph: no layers")
    for i, layer in enumerate(layers):
        if i and layer.backward_input is None:
            raise ValueError(f"op_graph: layer {layer.name} has no backward for its input; only the first may lack it")
    grid = tuple(threads) if threads is not None else thread_grid(cores)
    if not grid or min(grid) < 1 or max(grid) > cores or len(set(grid)) != len(grid):
        raise ValueError(f"threads: expected distinct counts in 1..{cores}, got {grid}")
    names: list[str] = []
    modes: list[list[tuple[int, int]]] = []
    kind: list[str] = []
    layer_of: list[int] = []
    mb_of: list[int] = []
    index: dict[str, int] = {}

    def task(name: str, model: Model, k: str, li: int, b: int) -> int:
        index[name] = len(names)
        names.append(name)
        modes.append([(c, max(1, round(model.time(c) * 1e9))) for c in grid])
        kind.append(k)
        layer_of.append(li)
        mb_of.append(b)
        return index[name]

    edges: list[tuple[int, int]] = []
    L = len(layers)
    for b in range(microbatches):
        for li, layer in enumerate(layers):
            task(f"{layer.name}.F{b}", layer.forward, "F", li, b)
        for li in reversed(range(L)):
            layer = layers[li]
            if layer.backward_input is not None:
                task(f"{layer.name}.I{b}", layer.backward_input, "I", li, b)
            if layer.backward_weight is not None:
                task(f"{layer.name}.W{b}", layer.backward_weight, "W", li, b)
    for li, layer in enumerate(layers):
        if layer.update is not None:
            task(f"{layer.name}.U", layer.update, "U", li, -1)
    for b in range(microbatches):
        for li in range(L):
            name = layers[li].name
            if li + 1 < L:
                edges.append((index[f"{name}.F{b}"], index[f"{layers[li + 1].name}.F{b}"]))
            grad = index[f"{name}.F{b}"] if li == L - 1 else index[f"{layers[li + 1].name}.I{b}"]
            for k in ("I", "W"):
                if f"{name}.{k}{b}" in index:
                    edges.append((grad, index[f"{name}.{k}{b}"]))
            if b + 1 < microbatches and f"{name}.W{b}" in index:
                edges.append((index[f"{name}.W{b}"], index[f"{name}.W{b + 1}"]))  # one gradient buffer
            if f"{name}.U" in index:
                if f"{name}.I{b}" in index:
                    edges.append((index[f"{name}.I{b}"], index[f"{name}.U"]))
                if b == microbatches - 1 and f"{name}.W{b}" in index:
                    edges.append((index[f"{name}.W{b}"], index[f"{name}.U"]))
                if f"{name}.W{b}" not in index and f"{name}.I{b}" not in index:
                    edges.append((index[f"{name}.F{b}"], index[f"{name}.U"]))
    problem = Problem.moldable(modes, edges=edges or None, width=[cores], names=tuple(names))
    return OpGraph(problem, tuple(names), grid, tuple(layers), microbatches, tuple(kind), tuple(layer_of),
                   tuple(mb_of))  # fmt: skip
