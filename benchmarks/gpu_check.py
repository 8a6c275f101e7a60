"""The runner on a GPU: NCCL process group, CUDA-event timing and the weight-gradient side stream.

Every schedule that fits the GPUs at hand (one rank per GPU; on one GPU every stage sits on rank 0,
so multi-stage templates such as interleaved, zb-v and dualpipev run their local transfers) trains
the examples' MLP and small GPT for a few steps on ``cuda``. Each run's parameters are compared with
the single-process reference (rtol 1e-5, float64 models), and the median, min and max step time over
the steps after the first are printed. Split-backward schedules run again with ``--weight-stream``.

Run: ``python benchmarks/gpu_check.py [--steps N]`` on a machine with CUDA.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

from layersched.describe.stages import Pipeline
from layersched.formats.export import schedule_file
from layersched.methods.ooo.wstream import SideStreamStage
from layersched.runtime.launch import launch_jobs
from layersched.runtime.runner import RunConfig, train_reference
from layersched.runtime.workload import load_workload
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import TEMPLATES, TemplateError, template_names

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"mlp": f"{ROOT / 'examples' / 'models.py'}:mlp", "gpt_small": f"{ROOT / 'examples' / 'models.py'}:gpt_small"}
LR, MOMENTUM = 0.05, 0.9


def stage_pipe(ranks: int, microbatches: int, stages_per_rank: int) -> Pipeline:
    import numpy as np

    S = ranks * stages_per_rank
    one = np.ones(S, dtype=np.int64)
    return Pipeline(
        "gpu-check", ranks, microbatches, 2 * one, 2 * one, one, np.ones(max(S - 1, 0), dtype=np.int64),
        0 * one, 0 * one, None, 0 * one, 0 * one, time_unit="unit", memory_unit="unit",
    )  # fmt: skip


def jobs(ranks: int, steps: int) -> list[tuple[str, RunConfig]]:
    out = []
    for name in template_names():
        try:
            pipe = stage_pipe(ranks, 4, TEMPLATES[name].min_stages_per_rank)
            doc = schedule_file(solve_pipeline(pipe, schedule=name))
        except TemplateError as exc:
            print(f"  {name}: not run ({exc})")
            continue
        for model, spec in MODELS.items():
            if model == "gpt_small" and doc.pipeline.num_stages > 6:
                continue  # six layers: embed, four blocks, head
            cfg = RunConfig(doc, spec, steps=steps, lr=LR, momentum=MOMENTUM)
            out.append((f"{name} {model}", cfg))
            if TEMPLATES[name].split_backward:
                out.append((f"{name} {model} +wstream", replace(cfg, stage_factory=SideStreamStage)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    ranks = torch.cuda.device_count()
    nccl = torch.cuda.nccl.version()
    print(f"device: {torch.cuda.get_device_name(0)} x{ranks}; torch {torch.__version__}; NCCL {nccl}")
    todo = jobs(ranks, args.steps)
    results = launch_jobs([cfg for _, cfg in todo], timeout=600, device="cuda")
    refs, failed = {}, 0
    print(f"\n{'schedule / model':34} {'max |rel diff|':>14} {'ok':>3} {'step ms: min':>13} {'median':>8} {'max':>8}")
    for (label, cfg), ranks_out in zip(todo, results, strict=True):
        p = cfg.schedule.pipeline
        key = (cfg.model, p.num_microbatches)
        if key not in refs:
            refs[key] = train_reference(cfg.model, p.num_microbatches, steps=cfg.steps, lr=LR, momentum=MOMENTUM)
        ref, _ = refs[key]
        init = {f"{n}.{k}": v.detach() for n, m in load_workload(cfg.model).layers for k, v in m.named_parameters()}
        worst = 0.0
        got = {k: v.detach().cpu() for r in ranks_out for k, v in r.params.items()}
        ok = sorted(got) == sorted(ref)
        for name, value in got.items():
            upd, want = value - init[name], ref[name] - init[name]
            worst = max(worst, float(((upd - want).abs() / want.abs().clamp_min(1e-12)).max()))
            ok &= bool(torch.allclose(upd, want, rtol=1e-5, atol=1e-12))
        failed += not ok
        times = [1e3 * t for t in ranks_out[0].step_times[1:]]
        print(
            f"{label:34} {worst:14.2e} {'yes' if ok else 'NO':>3} {min(times):13.2f} "
            f"{statistics.median(times):8.2f} {max(times):8.2f}"
        )
    print(f"\n{len(todo) - failed} of {len(todo)} runs equal the single-process reference")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
