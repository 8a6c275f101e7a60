"""The training task graph of one iteration, as a networkx DiGraph and as a `solvers.Problem`.

Nodes are named like torch.distributed.pipelining's actions: ``0F3`` (stage 0, forward of
micro-batch 3), ``0I3`` (backward for inputs), ``0W3`` (backward for weights), ``0B3`` (fused
backward); ``0R`` is stage 0's data-parallel all-reduce, ``0U`` its optimizer update. Edges carry the
transfer delay paid when their ends sit on different ranks.

Example
-------
>>> import numpy as np
>>> from layersched.describe.stages import Pipeline, placement  # noqa: F401 (placement: re-exported)
>>> one = np.ones(2, dtype=np.int64)
>>> pipe = Pipeline("t", 2, 2, one, one, one, np.array([1]), one, 0 * one, None, 0 * one, 0 * one)
>>> g = build_graph(pipe, split_backward=True)
>>> sorted(g.successors("0F0")), sorted(g.successors("1F0"))
(['1F0'], ['1I0'])
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import networkx as nx
import numpy as np

from layersched.describe.config import MAX_INT, SpecError
from layersched.describe.placement import placement  # noqa: F401 (re-exported for templates and tests)
from layersched.describe.stages import Pipeline
from solvers import Problem, Schedule

ACTION = re.compile(r"^(\d+)(F|I|W|B|R|U)(\d*)$")
COMPUTE_KINDS = ("F", "I", "W", "B")


def parse_action(name: str) -> tuple[int, str, int | None]:
    """``"1W3"`` -> ``(1, "W", 3)``; ``"0R"`` -> ``(0, "R", None)``."""
    m = ACTION.match(name)
    if not m:
        raise ValueError(f"not an action name: {name!r} (expected like 0F3, 1I3, 1W3, 2B3, 0R, 0U)")
    return int(m[1]), m[2], int(m[3]) if m[3] else None


def compute_orders(problem: Problem, schedule: Schedule, num_ranks: int) -> list[list[int]]:
    """Per rank (processors ``0 .. num_ranks-1``), its compute passes (F, B, I, W) in ``schedule``'s
    start order (`Schedule.orders`): what the runner executes, without all-reduces and optimizer steps."""
    names = problem.names
    return [
        [t for t in order if parse_action(names[t])[2] is not None] for order in schedule.orders(problem)[:num_ranks]
    ]


def build_graph(pipe: Pipeline, *, split_backward: bool = True, stage_to_rank: list[int] | None = None) -> nx.DiGraph:
    """Task graph of one iteration.

    Each node has ``kind``, ``stage``, ``microbatch``, ``rank``, ``duration`` and ``memory`` (delta);
    each edge has ``delay``. Data-parallel all-reduce (``R``) and optimizer (``U``) nodes exist only
    where their time is positive; the all-reduce runs on the rank's network processor.
    """
    S, m = pipe.num_stages, pipe.num_microbatches
    ranks = stage_to_rank or placement(S, pipe.num_ranks)
    if len(ranks) != S:
        raise ValueError(f"stage_to_rank has {len(ranks)} entries for {S} stages")
    g = nx.DiGraph(
        name=pipe.name,
        num_stages=S,
        num_ranks=pipe.num_ranks,
        num_microbatches=m,
        split_backward=split_backward,
        stage_to_rank=list(ranks),
    )
    back = ("I", "W") if split_backward else ("B",)
    # collected, then added at once; a node is placed where it first appears, also as an edge's end
    # (task indices follow this order, as when the graph was built edge by edge)
    nodes: dict[str, dict] = {}
    edges: list[tuple[str, str, dict]] = []

    def task(name: str, kind: str, stage: int, mb: int | None, rank: int, duration: int, memory: int) -> None:
        attrs = {"kind": kind, "stage": stage, "microbatch": mb, "rank": rank, "duration": duration, "memory": memory}
        nodes.setdefault(name, {}).update(attrs)

    def edge(item: tuple[str, str, dict]) -> None:
        nodes.setdefault(item[0], {})
        nodes.setdefault(item[1], {})
        edges.append(item)

    for s in range(S):
        F, I, W = (
            int(x[s]) + pipe.overhead(k)
            for k, x in (("F", pipe.forward), ("I", pipe.backward_input), ("W", pipe.backward_weight))
        )
        mem_f, mem_w = int(pipe.mem_forward[s]), int(pipe.mem_freed_by_weight[s])
        fused = pipe.backward_input[s] + pipe.backward_weight[s] if pipe.backward is None else pipe.backward[s]
        B = int(fused) + pipe.overhead("B")
        r, d = ranks[s], int(pipe.transfer[s]) if s + 1 < S else 0
        for i in range(m):
            task(f"{s}F{i}", "F", s, i, r, F, mem_f)
            if split_backward:
                task(f"{s}I{i}", "I", s, i, r, I, -(mem_f - mem_w))
                task(f"{s}W{i}", "W", s, i, r, W, -mem_w)
                edge((f"{s}I{i}", f"{s}W{i}", {"delay": 0}))
            else:
                task(f"{s}B{i}", "B", s, i, r, B, -mem_f)
            first_back = f"{s}{back[0]}{i}"
            if s + 1 < S:
                edge((f"{s}F{i}", f"{s + 1}F{i}", {"delay": d}))
                edge((f"{s + 1}{back[0]}{i}", first_back, {"delay": d}))
            else:
                edge((f"{s}F{i}", first_back, {"delay": 0}))
        last = back[-1]
        ar, opt = int(pipe.allreduce[s]), int(pipe.optimizer[s])
        if ar > 0:
            task(f"{s}R", "R", s, None, r, ar, 0)
            edges.extend((f"{s}{last}{i}", f"{s}R", {"delay": 0}) for i in range(m))
        if opt > 0:
            task(f"{s}U", "U", s, None, r, opt, 0)
            pred = [f"{s}R"] if ar > 0 else [f"{s}{last}{i}" for i in range(m)]
            edges.extend((p, f"{s}U", {"delay": 0}) for p in pred)
    g.add_nodes_from(nodes.items())
    g.add_edges_from(edges)
    return g


@dataclass(frozen=True)
class TaskGraph:
    """A task graph lowered to a `solvers.Problem`, with the name of each task index."""

    graph: nx.DiGraph
    problem: Problem
    index: dict[str, int]

    @property
    def names(self) -> tuple[str, ...]:
        return self.problem.names  # type: ignore[return-value]

    def processor_of_rank(self, rank: int, network: bool = False) -> int:
        return processor_of(rank, "R" if network else "F", self.graph.graph["num_ranks"])


def processor_of(rank: int, kind: str, num_ranks: int) -> int:
    """The processor `to_problem` binds a task of ``kind`` on ``rank`` to: the rank's own, or for an
    all-reduce (``R``) the rank's network processor, numbered after the ranks."""
    return rank + (num_ranks if kind == "R" else 0)


def to_problem(g: nx.DiGraph, capacity: int | None = None) -> TaskGraph:
    """Lower ``g`` to a `solvers.Problem`: processors are the ranks, then one network processor
    per rank when the graph has all-reduce nodes. Each task is bound to its rank's processor.

    `SpecError` when the passes and transfers of one iteration add up to more than `MAX_INT`: every
    schedule timed from orders ends by that sum, and a schedule file holds times up to it (a
    stage-level forward of 1e15 once solved, then failed on writing with 1,726 validation errors).
    The check is on the safe side: with ranks working in parallel a schedule may end well before the
    sum, but that sum is then already over eleven days of work per iteration in nanoseconds."""
    R = g.graph["num_ranks"]
    names = list(g.nodes)
    index = {n: i for i, n in enumerate(names)}
    kinds = [g.nodes[n]["kind"] for n in names]
    network = "R" in kinds
    P = 2 * R if network else R
    proc = np.array([processor_of(g.nodes[n]["rank"], k, R) for n, k in zip(names, kinds, strict=True)], dtype=np.int64)
    allowed = np.zeros((len(names), P), dtype=bool)
    allowed[np.arange(len(names)), proc] = True
    edges = np.array([(index[u], index[v]) for u, v in g.edges], dtype=np.int64).reshape(-1, 2)
    cap = np.full(P, capacity if capacity is not None else np.iinfo(np.int64).max // 4, dtype=np.int64)
    pnames = [f"rank{r}" for r in range(R)] + ([f"net{r}" for r in range(R)] if network else [])
    problem = Problem(
        duration=[g.nodes[n]["duration"] for n in names],
        allowed=allowed,
        edges=edges,
        delay=[d for _, _, d in g.edges(data="delay")],
        mem_delta=[g.nodes[n]["memory"] for n in names],
        capacity=cap,
        names=tuple(names),
        processor_names=tuple(pnames),
    )
    horizon = problem.total_time()
    if horizon > MAX_INT:
        raise SpecError(
            f"{g.graph['name']}: the passes and transfers of one iteration add up to {horizon:.6g} time units, more "
            f"than the {MAX_INT:.0e} a schedule file holds; give the times in a coarser unit or use fewer micro-batches"
        )
    return TaskGraph(graph=g, problem=problem, index=index)
