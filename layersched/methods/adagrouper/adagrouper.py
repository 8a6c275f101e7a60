"""Ada-Grouper: kFkB plans under a memory limit and the controller that switches between them.

kFkB (template ``kfkb-<k>``) runs ``k`` forwards then ``k`` backwards per group; rank ``r`` holds up to
``k (p - r)`` micro-batches' activations (`kfkb_memory`), ``k`` times 1F1B's. Under a fixed memory
limit a larger ``k`` therefore needs smaller micro-batches: that is Ada-Grouper's trade. Small
micro-batches waste compute (every pass pays a fixed overhead, `GroupedWorkload`), but kFkB switches
between forward and backward ``k`` times less often, so its back-to-back passes hide slow transfers.
With a fast network 1F1B with the largest micro-batch wins; when the network is preempted a larger
``k`` does. `make_plans` builds, for each ``k``, the largest micro-batch that fits every stage and the
validated kFkB schedule; `AdaptiveController` re-estimates the bandwidth every ``interval``
iterations (from the transfer timings of the last iterations) and switches to the plan whose predicted
iteration time is least; `simulate` runs fixed plans or the controller under a `BandwidthTrace`. In a
real run (`layersched.methods.adagrouper.switching`) `TransferTimeController` does the same from the runner's
measured transfer timings, and `StepTimeController` from step times alone.

Example
-------
>>> wl = GroupedWorkload(num_stages=4, global_batch=64, capacity=32)
>>> plans = make_plans(wl, [1, 2, 4])
>>> [(p.k, p.microbatch_size, p.pipe.num_microbatches) for p in plans]
[(1, 8, 8), (2, 4, 16), (4, 2, 32)]
>>> ctl = AdaptiveController(plans, interval=2)
>>> ctl.choose(1.0).k, ctl.choose(0.05).k
(1, 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from layersched.describe.stages import Pipeline
from layersched.methods.adagrouper.network import BandwidthTrace, TracedRun, constant, time_orders_under
from layersched.schedule.solve import Solution, complete_orders, solve_pipeline


def kfkb_memory(pipe: Pipeline, k: int) -> np.ndarray:
    """Peak activation memory of each rank under ``kfkb-<k>`` (one stage per rank, fused backward):
    rank ``r`` holds ``min(m, k (p - r))`` micro-batches, each ``mem_forward[r]``.

    >>> from layersched.describe.config import ProblemSpec
    >>> from layersched.describe.stages import pipeline_from_spec
    >>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {"stages": 4,
    ...     "microbatches": 8, "forward": 1, "backward_input": 1, "backward_weight": 1, "memory_forward": 3}}))
    >>> kfkb_memory(pipe, 2).tolist()
    [24, 18, 12, 6]
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    held = np.minimum(m, k * (p - np.arange(p)))
    return held * pipe.mem_forward[:p]


def largest_k_per_stage(pipe: Pipeline) -> list[int]:
    """The largest ``k`` whose kFkB activations fit each stage's memory, ignoring whether ``k``
    divides the micro-batch count (``m`` when the stage fits them all, 0 when not even 1F1B fits).

    >>> from layersched.describe.config import ProblemSpec
    >>> from layersched.describe.stages import pipeline_from_spec
    >>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {"stages": 4,
    ...     "microbatches": 8, "forward": 1, "backward_input": 1, "backward_weight": 1,
    ...     "memory_forward": 1, "memory_limit": 6}}))
    >>> largest_k_per_stage(pipe), largest_feasible_k(pipe)
    ([1, 2, 3, 6], 1)
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    if pipe.capacity is None:
        return [m] * p
    out = []
    for r in range(p):
        per = int(pipe.mem_forward[r]) * (p - r)
        out.append(m if per == 0 or pipe.capacity >= m * int(pipe.mem_forward[r]) else pipe.capacity // per)
    return out


def largest_feasible_k(pipe: Pipeline) -> int:
    """The largest ``k`` that divides the micro-batch count and fits every stage (0 when none does)."""
    cap = min(largest_k_per_stage(pipe))
    return max(
        (k for k in range(1, pipe.num_microbatches + 1) if pipe.num_microbatches % k == 0 and k <= cap), default=0
    )


@dataclass(frozen=True)
class GroupedWorkload:
    """A pipeline whose costs scale with the micro-batch size ``b`` (equal stages, time in ticks).

    A forward pass takes ``forward_overhead + b * forward_per_sample`` (the overhead is what makes
    small micro-batches inefficient), a backward ``backward_ratio`` times that, a transfer between
    stages ``transfer_latency + b * transfer_per_sample`` at nominal bandwidth; a micro-batch's
    activations take ``b * activation_per_sample`` on each stage, within ``capacity`` per stage.
    """

    num_stages: int = 4
    global_batch: int = 256
    forward_overhead: int = 400
    forward_per_sample: int = 100
    backward_ratio: float = 2.0
    transfer_latency: int = 0
    transfer_per_sample: int = 25
    activation_per_sample: int = 1
    capacity: int = 64

    def pipeline(self, microbatch_size: int) -> Pipeline:
        """The stage-level `Pipeline` of one iteration with micro-batches of ``microbatch_size``."""
        b, S = microbatch_size, self.num_stages
        if self.global_batch % b:
            raise ValueError(f"micro-batch size {b} does not divide the global batch {self.global_batch}")
        fwd = self.forward_overhead + b * self.forward_per_sample
        bwd = round(self.backward_ratio * fwd)
        one = np.ones(S, dtype=np.int64)
        return Pipeline(
            name=f"grouped b={b}",
            num_ranks=S,
            num_microbatches=self.global_batch // b,
            forward=one * fwd,
            backward_input=one * (bwd // 2),
            backward_weight=one * (bwd - bwd // 2),
            transfer=np.full(S - 1, self.transfer_latency + b * self.transfer_per_sample, dtype=np.int64),
            mem_forward=one * b * self.activation_per_sample,
            mem_freed_by_weight=one * 0,
            capacity=self.capacity,
            allreduce=one * 0,
            optimizer=one * 0,
            time_unit="tick",
            memory_unit="unit",
            objective="makespan",
        )

    def largest_microbatch(self, k: int) -> int | None:
        """The largest micro-batch size whose ``kfkb-<k>`` plan fits every stage (None if none does)."""
        for b in range(self.global_batch, 0, -1):
            if self.global_batch % b == 0 and (self.global_batch // b) % k == 0:
                if (kfkb_memory(self.pipeline(b), k) <= self.capacity).all():
                    return b
        return None


@dataclass
class Plan:
    """A kFkB plan: group size, micro-batch size, its pipeline and validated schedule."""

    k: int
    microbatch_size: int
    solution: Solution
    orders: list[list[int]]
    _predicted: dict[float, int] = field(default_factory=dict, repr=False)

    @property
    def pipe(self) -> Pipeline:
        return self.solution.pipe

    @property
    def name(self) -> str:
        return "1f1b" if self.k == 1 else f"kfkb-{self.k}"

    def run(self, trace: BandwidthTrace, t0: int = 0) -> TracedRun:
        """One iteration of this plan started at ``t0`` under ``trace``."""
        return time_orders_under(self.solution.tasks.problem, self.orders, trace, t0)

    def predict(self, bandwidth: float) -> int:
        """Predicted iteration time when the bandwidth stays at ``bandwidth`` (fraction of nominal)."""
        key = round(bandwidth, 3)
        if key not in self._predicted:
            self._predicted[key] = self.run(constant(max(key, 1e-3))).schedule.makespan(self.solution.tasks.problem)
        return self._predicted[key]


def make_plans(workload: GroupedWorkload, ks: Sequence[int]) -> list[Plan]:
    """For each ``k`` with a fitting micro-batch size, the validated ``kfkb-<k>`` plan at the largest
    such size (``kfkb-1`` is 1F1B). `solve_pipeline` validates every schedule, memory included."""
    plans = []
    for k in ks:
        b = workload.largest_microbatch(k)
        if b is None:
            continue
        sol = solve_pipeline(workload.pipeline(b), schedule=f"kfkb-{k}", objective="makespan")
        plans.append(Plan(k, b, sol, complete_orders(sol.tasks, sol.actions())))
    if not plans:
        raise ValueError(f"no kFkB plan with k in {list(ks)} fits the memory limit {workload.capacity}")
    return plans


class AdaptiveController:
    """Every ``interval`` iterations, estimate the bandwidth from the transfers of the last
    ``interval`` iterations (nominal over measured transfer time) and switch to the plan with the
    least predicted iteration time at that bandwidth. Starts assuming the nominal bandwidth.

    Example
    -------
    >>> plans = make_plans(GroupedWorkload(num_stages=2, global_batch=32, capacity=16), [1, 2])
    >>> ctl = AdaptiveController(plans, interval=1)
    >>> ctl.plan.k
    1
    >>> ctl.observe(plans[0].run(constant(0.05))).k
    2
    """

    def __init__(self, plans: Sequence[Plan], interval: int = 4):
        if interval < 1:
            raise ValueError(f"interval must be at least 1, got {interval}")
        self.plans, self.interval = list(plans), interval
        self.estimate = 1.0
        self.plan = self.choose(1.0)
        self._window: list[TracedRun] = []

    def choose(self, bandwidth: float) -> Plan:
        """The plan with the least predicted iteration time at ``bandwidth`` (ties: smaller ``k``)."""
        return min(self.plans, key=lambda p: (p.predict(bandwidth), p.k))

    def observe(self, run: TracedRun) -> Plan:
        """Record one iteration's transfer timings; at the end of a window re-choose. The plan to run next."""
        self._window.append(run)
        if len(self._window) >= self.interval:
            nominal = sum(int(r.nominal.sum()) for r in self._window)
            actual = sum(int(r.actual.sum()) for r in self._window)
            self.estimate = nominal / actual if actual else 1.0
            self.plan = self.choose(self.estimate)
            self._window = []
        return self.plan


def simulate(
    plans: Sequence[Plan], trace: BandwidthTrace, iterations: int, *, k: int | None = None, interval: int = 4
) -> list[dict]:
    """Run ``iterations`` back to back under ``trace``: the fixed plan with group size ``k``, or the
    adaptive controller when ``k`` is None. One record per iteration: start, time, k, the bandwidth
    estimate in force and the trace's mean bandwidth over the iteration.

    >>> plans = make_plans(GroupedWorkload(num_stages=2, global_batch=32, capacity=16), [1, 2])
    >>> recs = simulate(plans, constant(1.0), 3, k=1)
    >>> [r["time"] for r in recs] == [plans[0].predict(1.0)] * 3
    True
    """
    ctl = None if k is not None else AdaptiveController(plans, interval)
    fixed = next((p for p in plans if p.k == k), None)
    if k is not None and fixed is None:
        raise ValueError(f"no plan with k = {k}; plans: {[p.k for p in plans]}")
    t, out = 0, []
    for _ in range(iterations):
        plan = fixed if ctl is None else ctl.plan
        estimate = 1.0 if ctl is None else ctl.estimate
        run = plan.run(trace, t)
        dt = run.schedule.makespan(plan.solution.tasks.problem)
        out.append({"start": t, "time": dt, "k": plan.k, "estimate": estimate, "bandwidth": trace.mean(t, t + dt)})
        t += dt
        if ctl is not None:
            ctl.observe(run)
    return out


def total_time(records: list[dict]) -> int:
    return sum(r["time"] for r in records)


def speedup(baseline: int, other: int) -> float:
    """Throughput gain of ``other`` over ``baseline`` (same work): ``baseline / other - 1``."""
    return baseline / other - 1 if other else math.inf


GRID = tuple(round(x, 3) for x in np.geomspace(1.0, 0.02, 40))
"""Bandwidth fractions at which `StepTimeController` tabulates each plan's predicted iteration time."""


class StepTimeController:
    """The adaptive controller for a real run (`layersched.methods.adagrouper.switching`), where only step times
    are measured: a picklable ``choose(step, history)`` with ``history`` the ``(plan index, seconds)``
    of the steps so far.

    The first step (run with the plan best at nominal bandwidth) calibrates seconds per tick, assuming
    the nominal bandwidth. Every ``interval`` steps the bandwidth estimate is the grid value at which
    the current plan's predicted time, in seconds, is closest to its mean measured time over the window,
    and the plan with the least predicted time at that bandwidth is chosen. ``history`` holds
    ``(plan index, seconds, ...)`` records (`layersched.methods.adagrouper.switching.StepRecord`).

    Example
    -------
    >>> plans = make_plans(GroupedWorkload(), [1, 2, 4])
    >>> ctl = StepTimeController(plans, interval=1)
    >>> ctl(0, [])
    0
    >>> ctl(1, [(0, 2.0)]), ctl(2, [(0, 2.0), (0, 2.0 * plans[0].predict(0.05) / plans[0].predict(1.0))])
    (0, 2)
    """

    def __init__(self, plans: Sequence[Plan], interval: int = 1):
        self.table = [[p.predict(b) for b in GRID] for p in plans]
        self.interval = interval
        self.first = min(range(len(plans)), key=lambda j: self.table[j][0])
        self.current = self.first
        self.estimate = 1.0

    def __call__(self, step: int, history: list) -> int:
        if not history or len(history) % self.interval:
            return self.current
        seconds_per_tick = history[0][1] / self.table[history[0][0]][0]
        window = [h[1] for h in history[-self.interval :] if h[0] == self.current]
        if window:
            ticks = float(np.mean(window)) / seconds_per_tick
            row = self.table[self.current]
            g = min(range(len(GRID)), key=lambda i: abs(row[i] - ticks))
            self.estimate = GRID[g]
            self.current = min(range(len(self.table)), key=lambda j: (self.table[j][g], j))
        return self.current


class TransferTimeController:
    """The adaptive controller for a real run that reads the runner's transfer timings: a picklable
    ``choose(step, history)`` over `layersched.methods.adagrouper.switching.StepRecord` ``history``, whose
    ``flights`` are the ``(bytes, seconds)`` in flight of the messages whose arrival was observed.

    Every ``interval`` steps it takes the window's messages, the seconds per byte above the link's
    ``latency`` (``sum(seconds - latency) / sum(bytes)``), and compares it with the first window's,
    which it takes as the nominal bandwidth: the estimate is their ratio (at most 1), and the plan
    with the least predicted time at the nearest `GRID` bandwidth is chosen. Unlike
    `StepTimeController` it does not confuse a slow step (other load, a straggler) with a slow link.

    Example
    -------
    >>> plans = make_plans(GroupedWorkload(), [1, 2, 4])
    >>> ctl = TransferTimeController(plans, interval=1)
    >>> ctl(0, []), ctl(1, [(0, 1.0, [(1000, 1e-3)])]), ctl(2, [(0, 1.0, [(1000, 1e-3)]), (0, 1.0, [(1000, 5e-2)])])
    (0, 0, 2)
    >>> round(ctl.estimate, 6)
    0.02
    """

    def __init__(self, plans: Sequence[Plan], interval: int = 1, latency: float = 0.0):
        if interval < 1:
            raise ValueError(f"interval must be at least 1, got {interval}")
        self.table = [[p.predict(b) for b in GRID] for p in plans]
        self.interval, self.latency = interval, latency
        self.current = min(range(len(plans)), key=lambda j: self.table[j][0])
        self.estimate = 1.0
        self.nominal: float | None = None  # seconds per byte of the first window

    def __call__(self, step: int, history: list) -> int:
        if not history or len(history) % self.interval:
            return self.current
        flights = [f for h in history[-self.interval :] for f in h[2]]
        nbytes = sum(b for b, _ in flights)
        if not nbytes:
            return self.current
        per_byte = sum(max(s - self.latency, 0.0) for _, s in flights) / nbytes
        if self.nominal is None:
            self.nominal = per_byte
        self.estimate = min(1.0, self.nominal / per_byte) if per_byte > 0 else 1.0
        g = min(range(len(GRID)), key=lambda i: abs(GRID[i] - self.estimate))
        self.current = min(range(len(self.table)), key=lambda j: (self.table[j][g], j))
        return self.current
