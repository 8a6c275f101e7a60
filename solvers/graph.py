"""Graph helpers on integer edge arrays: adjacency in CSR form, topological order, longest paths."""

from __future__ import annotations

from collections import deque

import numpy as np


def csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outgoing adjacency: ``(indptr, targets, edge_ids)`` with edges grouped by source."""
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, src + 1, 1)
    np.cumsum(indptr, out=indptr)
    return indptr, dst[order], order


def neighbours(n: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each task's predecessors and successors together, in CSR form: ``(indptr, tasks)``, those of
    task ``t`` being ``tasks[indptr[t]:indptr[t + 1]]``."""
    src, dst = edges[:, 0], edges[:, 1]
    indptr, tasks, _ = csr(n, np.concatenate([src, dst]), np.concatenate([dst, src]))
    return indptr, tasks


def kahn(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Kahn's algorithm. Returns the ordered tasks and the remaining in-degree of each task
    (non-zero exactly for the tasks on or behind a cycle)."""
    indptr, targets, _ = csr(n, src, dst)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    ptr, tgt, deg = indptr.tolist(), targets.tolist(), indeg.tolist()
    queue = deque(i for i in range(n) if deg[i] == 0)
    out: list[int] = []
    while queue:
        u = queue.popleft()
        out.append(u)
        for k in range(ptr[u], ptr[u + 1]):
            v = tgt[k]
            deg[v] -= 1
            if deg[v] == 0:
                queue.append(v)
    return out, np.asarray(deg, dtype=np.int64)


def topological_order(n: int, edges: np.ndarray) -> np.ndarray:
    """Topological order of ``n`` nodes; ``ValueError`` naming a node on a cycle otherwise."""
    order, deg = kahn(n, edges[:, 0], edges[:, 1])
    if len(order) < n:
        raise ValueError(f"the precedence graph has a cycle through task {int(np.argmax(deg > 0))}")
    return np.asarray(order, dtype=np.int64)


def longest_from_sources(
    order: np.ndarray, n: int, edges: np.ndarray, weight_node: np.ndarray, weight_edge: np.ndarray
) -> np.ndarray:
    """Earliest start of each node: the longest path ending just before it, where a path's length
    adds the durations of its nodes and the weights of its edges."""
    head = np.zeros(n, dtype=np.int64)
    if len(edges) == 0:
        return head
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    # relax edges level by level in the order of their source's position
    e_order = np.argsort(pos[edges[:, 0]], kind="stable")
    src, dst = edges[e_order, 0].tolist(), edges[e_order, 1].tolist()
    w = (weight_node[edges[e_order, 0]] + weight_edge[e_order]).tolist()
    h = head.tolist()
    for u, v, ww in zip(src, dst, w, strict=False):
        c = h[u] + ww
        if c > h[v]:
            h[v] = c
    return np.asarray(h, dtype=np.int64)


def longest_to_sinks(
    order: np.ndarray, n: int, edges: np.ndarray, weight_node: np.ndarray, weight_edge: np.ndarray
) -> np.ndarray:
    """Tail of each node: the longest path from its end to the end of the graph."""
    rev = edges[:, ::-1]
    return longest_from_sources(order[::-1].copy(), n, rev, weight_node, weight_edge)
