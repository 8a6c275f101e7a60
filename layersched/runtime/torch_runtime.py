"""The same schedule through torch's own runtime: a second executor to check ours against.

Each rank wraps its stages' layers in ``torch.distributed.pipelining.PipelineStage`` objects and
loads the schedule's compute-only CSV (`layersched.formats.export.to_torch_csv`) into
``_PipelineScheduleRuntime``, which adds the sends and receives itself. Data-parallel replicas each
run their own pipeline group; their gradients are averaged after the step, then the same SGD as
ours is applied. Only whole steps are timed.

Torch's runtime accepts a subset of what ours runs (it infers the stage placement from the CSV and
supports neighbouring stages only), and older torch releases less (`version_refusal`);
`torch_supports` says whether a schedule is in it, and `prepare` refuses a run that is not.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from layersched.runtime.runner import (
    Prepared,
    RankResult,
    RunConfig,
    clip_gradients,
    make_optimizer,
    make_schedule,
    param_name,
    replica_groups,
)

TORCH_RUNTIME_SINCE = (2, 11)
"""The first torch release whose runtime ran our schedules: 2.9.1 aborted every one of them over
gloo in its first step ("Received data size doesn't match expected size", float32 models too);
2.11 and 2.13 ran them (session 27). 2.10 was not tried."""

SAME_RANK_NEIGHBOURS_SINCE = (2, 12)
"""The first torch release whose stages pass shapes to a neighbouring stage on their own rank
without the network (``PipelineStage._is_same_rank``, read in 2.12's source). 2.11 sends them as to
another rank, which gloo cannot ("Pair is not connected"): every V placement (``dualpipev``,
``v-half``, ``v-min``, ``zb-v``) failed there, the loop placements ran; 2.13 runs both."""


def version_refusal(version: str, stage_to_rank: list[int]) -> str | None:
    """Why torch ``version``'s runtime cannot run a schedule with this placement, or None: releases
    before `TORCH_RUNTIME_SINCE` at all, and before `SAME_RANK_NEIGHBOURS_SINCE` where two
    neighbouring stages share a rank.

    >>> version_refusal("2.11.0+cu130", [0, 1, 1, 0]).split(", which")[0]
    "torch 2.11.0+cu130's runtime sends stage 1's shapes to stage 2 on the same rank (1) over the network"
    >>> version_refusal("2.11.0", [0, 1, 0, 1]) is None
    True
    """
    from torch.torch_version import TorchVersion

    v = TorchVersion(version)
    if v < TORCH_RUNTIME_SINCE:
        since = ".".join(map(str, TORCH_RUNTIME_SINCE))
        return (
            f"torch {version}'s runtime is older than {since}, the first release that ran our schedules (2.9.1 "
            f"aborted every one over gloo: a message size mismatch); use torch >= {since} or runtime layersched"
        )
    if v < SAME_RANK_NEIGHBOURS_SINCE:
        for s, (a, b) in enumerate(itertools.pairwise(stage_to_rank)):
            if a == b:
                return (
                    f"torch {version}'s runtime sends stage {s}'s shapes to stage {s + 1} on the same rank ({a}) over "
                    f"the network, which fails (V placements); use torch >= "
                    f"{'.'.join(map(str, SAME_RANK_NEIGHBOURS_SINCE))} or runtime layersched"
                )
    return None


def torch_supports(schedule) -> str | None:
    """Why torch's runtime cannot run ``schedule`` (a `ScheduleFile`), or None when it can: the
    installed release must run its placement (`version_refusal`), and torch must accept the CSV as it
    loads it, checked without starting processes."""
    from torch.distributed.pipelining.schedules import _Action, _validate_schedule

    p = schedule.pipeline
    why = version_refusal(torch.__version__, list(p.stage_to_rank))
    if why:
        return why
    actions = {r: [_Action.from_str(a) for a in acts] for r, acts in enumerate(schedule.actions)}
    try:
        mapping = _validate_schedule(actions, p.num_ranks, p.num_stages, p.num_microbatches)
    except (AssertionError, RuntimeError, ValueError) as exc:
        return f"torch rejects the action lists: {str(exc).splitlines()[0]}"
    if [mapping[s] for s in range(p.num_stages)] != list(p.stage_to_rank):
        return "torch infers a different stage placement from the action lists"
    return None


def run_torch_rank(cfg: RunConfig, prep: Prepared, rank: int, device: torch.device) -> RankResult:
    """Run ``cfg`` as global ``rank`` with torch.distributed.pipelining's runtime."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    from layersched.formats.export import to_torch_csv

    doc, plan = cfg.schedule, prep.plan
    R, D, M, S = plan.num_ranks, doc.pipeline.data_parallel, plan.num_microbatches, plan.num_stages
    pr, replica = rank % R, rank // R
    # every process creates every group, in the same order
    pipe_groups = [dist.new_group([d * R + r for r in range(R)]) for d in range(D)] if D > 1 else [None]
    dp_group = replica_groups(R, D)[pr] if D > 1 else None
    modules = prep.modules
    mine = plan.ranks[pr].stages
    submods = {s: nn.Sequential(*(modules[n] for n in prep.stage_layers[s])).to(device) for s in mine}
    stages = [PipelineStage(submods[s], s, S, device, group=pipe_groups[replica]) for s in mine]
    schedule = _PipelineScheduleRuntime(stages, n_microbatches=M, loss_fn=prep.workload.loss_fn, scale_grads=True)
    with tempfile.TemporaryDirectory(prefix="layersched-csv-") as tmp:
        path = Path(tmp) / "schedule.csv"
        path.write_text(to_torch_csv(doc))
        schedule._load_csv(str(path))
    params = {s: [p for p in submods[s].parameters() if p.requires_grad] for s in mine}
    optimizers = {s: make_optimizer(ps, cfg) for s, ps in params.items() if ps}
    schedules = {s: make_schedule(opt, cfg) for s, opt in optimizers.items()}
    losses_out, starts, times = [], [], []
    t_run = time.perf_counter()
    for step in range(cfg.steps):
        for ps in params.values():
            for p in ps:
                p.grad = None
        mbs = prep.workload.batches(step, M * D)[replica * M : (replica + 1) * M]
        x = torch.cat([a for a, _ in mbs]).to(device)
        y = torch.cat([b for _, b in mbs]).to(device)
        losses: list[torch.Tensor] = []
        dist.barrier()
        starts.append(time.perf_counter() - t_run)
        t = time.perf_counter()
        schedule.step(
            *((x,) if 0 in mine else ()), target=y if S - 1 in mine else None, losses=losses, return_outputs=False
        )
        for s in sorted(optimizers):
            if dp_group is not None:
                flat = torch.cat(
                    [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params[s]]
                )
                dist.all_reduce(flat, group=dp_group)
                flat /= D
                k = 0
                for p in params[s]:
                    p.grad = flat[k : k + p.numel()].view_as(p).clone()
                    k += p.numel()
        if cfg.clip_grad_norm is not None:  # every stage's gradients, over the pipeline ranks of the replica
            group = (pipe_groups[replica] or dist.group.WORLD) if R > 1 else None  # one replica: all of it
            clip_gradients([p for s in sorted(optimizers) for p in params[s]], cfg.clip_grad_norm, group)
        for s in sorted(optimizers):
            optimizers[s].step()
            if schedules[s] is not None:
                schedules[s].step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        if losses:
            losses_out.append(float(torch.stack([v.detach().double() for v in losses]).mean()))
    result_params = {
        param_name(n, k): v.detach().cpu().clone()
        for s in mine
        for n in prep.stage_layers[s]
        for k, v in modules[n].named_parameters()
    }
    events = [{"action": "step", "step": k, "start": 0.0, "duration": d} for k, d in enumerate(times)]
    return RankResult(rank, pr, replica, losses_out if S - 1 in mine else None, result_params, events, starts, times)
