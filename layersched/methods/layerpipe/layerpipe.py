"""LayerPipe (Unnikrishnan and Parhi, 2021): sub-layer cuts and the split backward, in our terms.

- **Intra-layer split.** A (sub-)layer's backward is two tasks: the gradient for its inputs (``I``, on
  the critical path back to the previous stage) and for its weights (``W``, free to move in time).
- **Inter-layer split.** The activation gradient of layer ``l - 1`` is ``W_l^T delta_l`` (the backward
  for inputs of layer ``l``'s matmul) followed by the product with the derivative of layer
  ``l - 1``'s nonlinearity. With sub-layers (a matmul and its nonlinearity) the two parts are two
  items, and a stage boundary between them puts them on neighbouring processors: a cut between
  sub-layers, which sends that sub-layer's ``output_bytes``.

A plan partitions the sub-layers with the exact dynamic program (`layersched.describe.partition`) so the
slowest processor is as fast as possible, within each device's memory, counting the cuts' transfers;
the schedule is then retimed so every processor does the same work per micro-batch: one ``F``, one
``I`` and one ``W`` of its stage, ``W`` placed where it fills idle time.

- ``async``: delayed gradients as in the paper: no flush and no stashed weight versions (the update of
  micro-batch ``i`` lands a few micro-batches late). Time per micro-batch: the bottleneck.
- ``sync``: a flush per iteration of ``m`` micro-batches (ZB-H1 order: ``W`` fills the cool-down);
  time per micro-batch: the validated schedule's span over ``m``.

Both keep the activations of ``P - p`` micro-batches on stage ``p`` and one copy of the weights.

Example
-------
>>> from layersched.describe.config import LayerSpec, LinkSpec
>>> mm = LayerSpec(name="mm", forward=3e-3, backward_input=3e-3, backward_weight=3e-3, output_bytes=8)
>>> act = LayerSpec(name="act", forward=1e-3, backward_input=1e-3, output_bytes=8)
>>> layers = [LayerSpec(name=f"l{i}", sublayers=[mm, act]) for i in range(3)]
>>> setting = Setting("toy", layers, LinkSpec(bandwidth=1e12), 1e9, 12.0, 2, 4)
>>> whole = plan_layerpipe(setting, 2, granularity="layer")
>>> plan = plan_layerpipe(setting, 2)
>>> round(whole.time_per_microbatch * 1e3, 6), round(plan.time_per_microbatch * 1e3, 6), plan.partition.parts
(22.0, 20.0, [[0, 1, 2], [3, 4, 5]])
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from layersched.describe.partition import cpsat_partition_items, optimal_contiguous
from layersched.methods.layerpipe.pipeplan import Plan, Setting, in_flight, simulate

MODES = ("async", "sync")
SCHEDULES = {"async": "1f1b-split", "sync": "zb-h1"}


def plan_layerpipe(
    setting: Setting,
    processors: int,
    *,
    mode: str = "async",
    granularity: str = "sublayer",
    solver: str = "dp",
    time_limit: float = 10.0,
) -> Plan:
    """Partition ``setting``'s model onto ``processors`` and price it as LayerPipe in ``mode``.

    ``solver``: ``dp`` (exact, contiguous) or ``cpsat`` (any assignment; CP-SAT, from the DP's split).
    Raises ``ValueError`` when no split fits in memory.
    """
    if mode not in MODES:
        raise ValueError(f"unknown LayerPipe mode {mode!r}; valid: {', '.join(MODES)}")
    items = setting.items(granularity)
    options = dict(
        cut=items.cut_time(setting.link),
        fixed=setting.static(items),
        scaled=items["activation_bytes"],
        scale=in_flight(processors),
        capacity=setting.capacity,
    )
    if solver == "dp":
        part = optimal_contiguous(items.work, processors, **options)
    elif solver == "cpsat":
        part = cpsat_partition_items(items.work, processors, resolution=1e-7, time_limit=time_limit, **options)
    else:
        raise ValueError(f"unknown partition solver {solver!r}; valid: dp, cpsat")
    plan = Plan(
        f"layerpipe-{mode}",
        items,
        part,
        SCHEDULES[mode],
        True,
        part.bottleneck,
        part.stage_memory,
        setting.capacity,
        setting.link,
    )
    if mode == "sync":
        flushed = simulate(plan, setting.microbatches)["flushed"]
        plan = replace(plan, time_per_microbatch=flushed)
    return plan


def speedup(baseline: Plan, plan: Plan) -> float:
    """How many times faster ``plan`` trains than ``baseline``, per micro-batch.

    >>> from types import SimpleNamespace as N
    >>> speedup(N(time_per_microbatch=1.25), N(time_per_microbatch=1.0))
    1.25
    """
    return float(baseline.time_per_microbatch / plan.time_per_microbatch)


def memory_gib(plan: Plan) -> list[float]:
    """Memory per processor in GiB, two decimals."""
    return [round(float(x) / 2**30, 2) for x in np.asarray(plan.memory)]
