"""The same schedule through torch's own runtime: a second executor to check ours against.

Each rank wraps its stages' layers in ``torch.distributed.pipelining.PipelineStage`` objects and
loads the schedule's compute-only CSV (`layersched.formats.export.to_torch_csv`) into
``_PipelineScheduleRuntime``, which adds the sends and receives itself. Data-parallel replicas each
run their own pipeline group; their gradients are averaged after the step, then the same SGD as
ours is applied. Only whole steps are timed.

Torch's runtime accepts a subset of what ours runs (it infers the stage placement from the CSV and
supports neighbouring stages only), and older torch releases less;
`layersched.runtime.preflight.torch_supports` says whether a schedule is in it, and `prepare` refuses
a run that is not.
"""

from __future__ import annotations

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
    seed_rank,
)


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
    seed_rank(cfg, rank)
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
