"""PipeDream (Narayanan et al., SOSP 2019), the baseline: whole layers, a fused backward per layer,
PipeDream's partitioner, and the asynchronous 1F1B pipeline with weight stashing.

PipeDream's partitioner is a dynamic program over layer profiles. With ``A(j, m)`` the time per
micro-batch of the best pipeline for the first ``j`` layers on ``m`` machines and
``T(i, j, m) = max(sum_{l=i}^{j-1} T_l, sum_{l=i}^{j-1} W_l^m) / m`` a stage of layers ``i..j-1``
replicated on ``m`` machines (``W_l^m = 4 (m - 1) |w_l| / (m B)``: the replicas' weight sync),

    ``A(j, m) = min( T(0, j, m), min_{i, m'} max(A(i, m - m'), 2 C_i, T(i, j, m')) )``

where ``2 C_i`` is the activation and gradient crossing the cut before layer ``i``. Replication off
keeps ``m' = 1`` (one machine per stage, all ``m`` machines used). PipeDream's objective ignores
memory; the plan reports it (weights, stashed weight versions, in-flight activations).

Example
-------
>>> split = pipedream_partition([4.0, 1.0, 1.0, 2.0, 2.0], 2, cut=[0, 0, 0, 0])
>>> split.stages, split.replicas, split.time
([[0, 1], [2, 3, 4]], [1, 1], 5.0)
>>> pipedream_partition([4.0, 4.0], 4, replication=True).time  # one stage on all four machines
2.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layersched.describe.partition import PartitionInput
from layersched.methods.layerpipe.pipeplan import Plan, Setting, in_flight


@dataclass(frozen=True)
class PipeDreamSplit:
    """Stages (layer indices), machines per stage, and the time per micro-batch PipeDream predicts."""

    stages: list[list[int]]
    replicas: list[int]
    time: float


def pipedream_partition(
    work: Sequence[float],
    machines: int,
    *,
    cut: Sequence[float] | None = None,
    param_bytes: Sequence[float] | None = None,
    bandwidth: float = np.inf,
    replication: bool = False,
) -> PipeDreamSplit:
    """PipeDream's dynamic program (see the module docstring): ``O(n^2 M^2)``, vectorised over ``i``.

    ``work[l]`` is layer ``l``'s forward plus backward, ``cut[i]`` the time of the activation and the
    gradient crossing after layer ``i`` (PipeDream's ``2 C``), ``param_bytes`` and ``bandwidth`` price the
    weight sync of replicated stages. ``replication=False`` puts one stage on each machine.
    """
    n = len(work)
    if machines < 1 or (not replication and n < machines):
        raise ValueError(f"cannot split {n} layers onto {machines} machines without replication")
    pre = np.concatenate([[0.0], np.cumsum(np.asarray(work, dtype=float))])
    wpre = np.concatenate([[0.0], np.cumsum(np.zeros(n) if param_bytes is None else np.asarray(param_bytes, float))])
    cutb = np.concatenate([[0.0], np.zeros(n - 1) if cut is None else np.asarray(cut, dtype=float), [0.0]])

    def stage(i: np.ndarray | int, j: int, m: int) -> np.ndarray:
        sync = 4 * (m - 1) * (wpre[j] - wpre[i]) / (m * bandwidth) if m > 1 else 0.0
        return np.maximum(pre[j] - pre[i], sync) / m

    A = np.full((n + 1, machines + 1), np.inf)
    how: dict[tuple[int, int], tuple[int, int]] = {}
    for j in range(1, n + 1):
        for m in range(1, machines + 1):
            if replication or m == 1:
                A[j, m], how[j, m] = float(stage(0, j, m)), (0, m)
            for mp in range(1, m if replication else min(m, 2)):
                i = np.arange(1, j)
                if not len(i):
                    continue
                cand = np.maximum(np.maximum(A[i, m - mp], cutb[i]), stage(i, j, mp))
                k = int(np.argmin(cand))
                if cand[k] < A[j, m]:
                    A[j, m], how[j, m] = float(cand[k]), (int(i[k]), mp)
    if not np.isfinite(A[n, machines]):
        raise ValueError(f"no PipeDream split of {n} layers onto {machines} machines")
    stages, replicas, j, m = [], [], n, machines
    while j > 0:
        i, mp = how[j, m]
        stages.append(list(range(i, j)))
        replicas.append(mp)
        j, m = i, m - mp
    return PipeDreamSplit(stages[::-1], replicas[::-1], float(A[n, machines]))


def plan_pipedream(setting: Setting, processors: int) -> Plan:
    """PipeDream without replication on ``processors`` machines: layer granularity, fused backward,
    asynchronous 1F1B with weight stashing (stage ``p`` keeps ``P - p`` weight versions and the
    activations of ``P - p`` micro-batches)."""
    items = setting.items("layer")
    cut = items.cut_time(setting.link)
    split = pipedream_partition(items.work, processors, cut=cut)
    params = items["param_bytes"]
    inp = PartitionInput.make(
        items.work,
        processors,
        cut=cut,
        fixed=setting.static(items) - params,
        scaled=items["activation_bytes"] + params,
        scale=in_flight(processors),
        capacity=setting.capacity,
    )
    assignment = np.repeat(np.arange(processors), [len(s) for s in split.stages])
    part = inp.evaluate(assignment, "pipedream-dp", lower_bound=split.time)
    return Plan(
        "pipedream", items, part, "1f1b", False, part.bottleneck, part.stage_memory, setting.capacity, setting.link
    )
