"""Switch between schedules between training iterations (Ada-Grouper's plan changes) on the runner.

Every rank builds one `layersched.runtime.runner.Executor` per schedule (the same model, micro-batch
count and ranks), and before each step rank 0 picks the schedule with a ``choose(step, history)``
callable and broadcasts its index; when it differs from the last step's, each stage's weights and
momentum buffers are copied from the executor that ran last. Each step's time (the slowest rank's)
is all-reduced into ``history``, with the time in flight of the step's messages (`layersched.runtime.
trace.flight_times` of every rank's transfer records, gathered on rank 0): that is what a controller
sees (`layersched.methods.adagrouper.adagrouper.StepTimeController`,
`layersched.methods.adagrouper.adagrouper.TransferTimeController`).
Since every kFkB schedule computes the same gradients, a run that switches reproduces the
single-process reference exactly.

Example
-------
>>> choose = FixedSequence([0, 1, 0])
>>> choose(1, []), choose(7, [])
(1, 0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch
import torch.distributed as dist

from layersched.runtime.plan import PlanError
from layersched.runtime.runner import Executor, RunConfig, param_name, prepare
from layersched.runtime.trace import flight_times


class StepRecord(NamedTuple):
    """One step as a controller sees it: the schedule index, the slowest rank's seconds, and
    ``(bytes, seconds)`` in flight of each message whose arrival was observed."""

    plan: int
    seconds: float
    flights: list[tuple[int, float]] = []


class Chooser(Protocol):
    def __call__(self, step: int, history: list[StepRecord]) -> int: ...


@dataclass(frozen=True)
class FixedSequence:
    """Schedule ``seq[step]`` at each step (the last one after the end)."""

    seq: list[int]

    def __call__(self, step: int, history: list[StepRecord]) -> int:
        return self.seq[min(step, len(self.seq) - 1)]


@dataclass
class SwitchResult:
    """One rank's run: losses (last stage's rank only), final parameters, the schedule index of every
    step, every step's time (slowest rank, seconds) and, on rank 0, how many messages' flights
    each step observed."""

    rank: int
    losses: list[float] | None
    params: dict[str, torch.Tensor]
    choices: list[int]
    step_times: list[float]
    flights: list[int] | None = None


def _prepare(world_size: int, cfgs: list[RunConfig], choose: Chooser):
    return [prepare(c, world_size) for c in cfgs], cfgs, choose


def _copy_state(src: Executor, dst: Executor) -> None:
    with torch.no_grad():
        for s, st in dst.stages.items():
            for a, b in zip(src.stages[s].parameters(), st.parameters(), strict=True):
                b.copy_(a)
        for s, opt in dst.optimizers.items():
            opt.buffers = [None if b is None else b.clone() for b in src.optimizers[s].buffers]


def _run(rank: int, device: torch.device, state) -> SwitchResult:
    preps, cfgs, choose = state
    execs = [Executor(c, p, rank, device) for c, p in zip(cfgs, preps, strict=True)]
    history: list[StepRecord] = []
    losses, last = [], None
    for step in range(cfgs[0].steps):
        pick = torch.tensor([choose(step, history) if rank == 0 else 0], dtype=torch.int64)
        dist.broadcast(pick, src=0)
        ex = execs[int(pick)]
        if last is not None and last is not ex:
            _copy_state(last, ex)
        last = ex
        mbs = [
            (x.to(device), y.to(device))
            for x, y in ex.workload.batches(step, ex.M * ex.D)[ex.replica * ex.M : (ex.replica + 1) * ex.M]
        ]
        specs = [ex.boundary_specs(x) for x, _ in mbs]
        dist.barrier()
        start = time.perf_counter()
        losses.append(ex.train_step(step, mbs, specs))
        t = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        mine = {"replica": ex.replica, "transfers": [r for r in ex.timer.transfers if r["step"] == step]}
        every = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(mine, every, dst=0)
        flights = flight_times({"ranks": every}) if rank == 0 else []
        history.append(StepRecord(int(pick), float(t[0]), flights))
    params = {
        param_name(n, k): v.detach().cpu().clone()
        for st in last.stages.values()
        for n, m in st.layers
        for k, v in m.named_parameters()
    }
    is_last = last.S - 1 in last.stages
    return SwitchResult(
        rank,
        losses if is_last else None,
        params,
        [h.plan for h in history],
        [h.seconds for h in history],
        [len(h.flights) for h in history] if rank == 0 else None,
    )


def launch_switching(cfgs: list[RunConfig], choose: Chooser, *, timeout: float = 120.0) -> list[SwitchResult]:
    """Run ``cfgs[0].steps`` steps on local CPU processes, each step with the schedule of ``cfgs``
    that ``choose`` picks; the schedules must share the model, ranks and micro-batch count."""
    from layersched.runtime.launch import run_processes

    world = cfgs[0].world_size
    ref = cfgs[0].schedule.pipeline
    for c in cfgs:
        p = c.schedule.pipeline
        if (c.world_size, p.num_microbatches, p.num_stages, c.model) != (
            world,
            ref.num_microbatches,
            ref.num_stages,
            cfgs[0].model,
        ):
            raise PlanError("schedules to switch between must share the model, ranks, stages and micro-batch count")
        prepare(c, world)
    return run_processes(_run, world, (cfgs, choose), before=_prepare, timeout=timeout)
