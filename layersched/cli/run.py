"""Run a schedule file: ``torchrun --nproc-per-node N -m layersched.run schedule.json --model ...``.

Under torchrun (``RANK`` in the environment) this process is one rank; otherwise it starts every
rank on this machine itself (``python -m layersched.run schedule.json --model ...``). The schedule,
the model and the world size are checked before any process group starts: a mismatch is one line
on stderr and exit status 2. A failed or timed-out run exits with status 1.

Example::

    layersched solve problems/mlp-tiny.yaml --schedule 1f1b --out schedule.json
    torchrun --nproc-per-node 2 -m layersched.run schedule.json --model examples/models.py:mlp \\
        --model-arg depth=4 --steps 20          # writes run-trace.json (--trace FILE, --no-trace)
    layersched compare schedule.json run-trace.json
"""

from __future__ import annotations

import argparse
import os
import sys

from layersched.cli.options import (
    add_device,
    add_model_args,
    add_sgd,
    add_steps,
    add_threads,
    add_timeout,
    keywords,
    positive_float,
    positive_int,
    seed_number,
)

EXIT_BAD_INPUT, EXIT_FAILED = 2, 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m layersched.run",
        description="Train a model with a "
        "schedule file's per-rank action lists on torch.distributed (gloo on CPUs, "
        "NCCL on GPUs).",
    )
    p.add_argument("schedule", help="schedule file written by 'layersched solve'")
    p.add_argument(
        "--model",
        required=True,
        metavar="SPEC",
        help="model builder, 'path/to/file.py:function' or 'module:function', e.g. examples/models.py:gpt_small",
    )
    add_steps(p, 10, "training steps")
    add_sgd(p, lr=0.01, momentum=0.9)
    p.add_argument(
        "--optimizer",
        default="sgd",
        metavar="NAME",
        help="any torch.optim optimizer by name, any case (adamw, adam, sgd, ...); default sgd with --momentum",
    )
    p.add_argument(
        "--optimizer-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another keyword for the optimizer, e.g. weight_decay=0.1 or betas=(0.9,0.95) (repeatable)",
    )
    p.add_argument(
        "--lr-schedule",
        metavar="NAME",
        help="a torch.optim.lr_scheduler class by name (steplr, cosineannealinglr, ...), stepped after every step",
    )
    p.add_argument(
        "--lr-schedule-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword for the schedule, e.g. step_size=2 or T_max=10 (repeatable)",
    )
    p.add_argument(
        "--clip-grad-norm",
        type=positive_float,
        metavar="MAX",
        help="clip the gradients' norm over all stages to MAX before each step (as torch.nn.utils.clip_grad_norm_)",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="autocast the forward passes to bf16 or fp16 (fp16 with a dynamic loss scale, as torch.amp.GradScaler; "
        "a step with an inf/NaN gradient on any rank is skipped everywhere); default fp32",
    )
    p.add_argument(
        "--loss-scale", type=positive_float, default=2.0**16, metavar="S", help="fp16: the starting loss scale"
    )
    p.add_argument(
        "--seed",
        type=seed_number,
        default=0,
        metavar="N",
        help="the random numbers drawn while training (dropout) start from N + the rank on each rank, so a "
        "run repeats with the same N (default 0); a checkpoint keeps them, so a resumed run draws on",
    )
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="save parameters, optimizer and schedule state at the end into DIR, a torch.distributed.checkpoint "
        "directory (written as DIR.partial, renamed when complete)",
    )
    p.add_argument("--checkpoint-every", type=positive_int, metavar="N", help="also save after every N steps")
    p.add_argument(
        "--resume",
        metavar="DIR",
        help="start from checkpoint DIR, at its step, and run --steps more: the same numbers as a run never stopped",
    )
    p.add_argument("--microbatch-size", type=positive_int, metavar="N", help="passed to the model builder")
    add_model_args(p)
    p.add_argument(
        "--trace",
        metavar="FILE",
        default="run-trace.json",
        help="write the timed actions to FILE (ours, for 'layersched compare') and FILE with "
        ".chrome.json (for https://ui.perfetto.dev); default run-trace.json",
    )
    p.add_argument("--no-trace", action="store_true", help="write no trace files")
    p.add_argument(
        "--check",
        action="store_true",
        help="also train the model in one process on the same micro-batches and print the largest parameter "
        "difference; exit 1 unless every parameter is within rtol 1e-5",
    )
    p.add_argument(
        "--runtime",
        choices=["layersched", "torch"],
        default="layersched",
        help="executor: ours, or torch.distributed.pipelining's (whole steps timed only)",
    )
    p.add_argument(
        "--weight-stream",
        action="store_true",
        help="compute the weight gradients of nn.Linear layers (W) on a second CUDA stream (our runtime only)",
    )
    add_device(p, None, "default: cuda when available")
    add_timeout(p, 300.0, "seconds before a stuck run fails")
    add_threads(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from layersched.describe.config import SpecError
    from layersched.runtime.plan import PlanError

    rank = int(os.environ.get("RANK", "0"))
    try:
        return _run(args)
    except (SpecError, PlanError) as exc:
        if rank == 0:
            print(f"layersched.run: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        from layersched.runtime.launch import RunFailed

        if not isinstance(exc, RunFailed):
            raise
        print(f"layersched.run: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _run(args) -> int:
    from layersched.formats.export import load_schedule
    from layersched.methods.ooo.wstream import weight_stream_stage
    from layersched.runtime.runner import RunConfig
    from layersched.runtime.workload import check_options

    doc = load_schedule(args.schedule)
    options = _model_options(args)
    check_options(args.model, options)  # a misspelt --model-arg: said, not dropped
    cfg = RunConfig(
        doc,
        args.model,
        steps=args.steps,
        lr=args.lr,
        momentum=args.momentum,
        model_options=options,
        runtime=args.runtime,
        stage_factory=weight_stream_stage() if args.weight_stream else None,
        optimizer=args.optimizer,
        optimizer_args=keywords(args.optimizer_arg, "--optimizer-arg", "weight_decay=0.1"),
        lr_schedule=args.lr_schedule,
        lr_schedule_args=keywords(args.lr_schedule_arg, "--lr-schedule-arg", "step_size=2"),
        clip_grad_norm=args.clip_grad_norm,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        precision=args.precision,
        loss_scale=args.loss_scale,
        seed=args.seed,
    )
    if "RANK" in os.environ:
        from layersched.runtime.launch import run_under_torchrun

        results = run_under_torchrun(
            cfg, device=args.device, timeout=args.timeout, threads=args.threads, params=args.check
        )
        if results is None:
            return 0
    else:
        from layersched.runtime.launch import launch_jobs

        results = launch_jobs([cfg], timeout=args.timeout, device=args.device or "cpu", threads=args.threads)[0]
    _report(doc, results, args)
    if args.check:
        from layersched.runtime.runner import check_against_reference

        ok, worst, where = check_against_reference(cfg, results)
        verdict = "pass" if ok else "FAIL"
        print(f"check against one process: largest parameter difference {worst:.3g} ({where}); rtol 1e-5: {verdict}")
        if not ok:
            from layersched.runtime.workload import dropout_layers, load_workload

            if drop := dropout_layers(load_workload(cfg.model, **cfg.model_options)):
                print(
                    f"  the model has dropout ({', '.join(drop[:3])}{', ...' if len(drop) > 3 else ''}): its random "
                    "draws differ from one process's, so --check needs the model with dropout 0"
                )
        return 0 if ok else EXIT_FAILED
    return 0


def _model_options(args) -> dict:
    """``--model-arg KEY=VALUE`` (values read as Python literals, else kept as strings) and
    ``--microbatch-size``."""
    options = keywords(args.model_arg, "--model-arg", "depth=4")
    if args.microbatch_size:
        options["microbatch_size"] = args.microbatch_size
    return options


def _report(doc, results, args) -> None:
    steps = max(len(r.step_times) for r in results)
    replicas = [r.losses for r in results if r.losses is not None]
    print(
        f"{doc.name}: {doc.method}, {doc.pipeline.num_ranks} pipeline ranks x {doc.pipeline.data_parallel} "
        f"replicas, {doc.pipeline.num_microbatches} micro-batches, runtime {args.runtime}"
    )
    print(f"{'step':>5} {'loss':>12} {'time (ms)':>10}")
    first = max(r.first_step for r in results)
    for k in range(steps):
        loss = sum(r[k] for r in replicas) / len(replicas) if replicas else float("nan")
        print(f"{first + k:>5} {loss:>12.6f} {max(r.step_times[k] for r in results) * 1e3:>10.2f}")
    if args.checkpoint:
        print(f"wrote checkpoint {args.checkpoint} (step {first + steps})")
    if args.trace and not args.no_trace:
        from layersched.runtime.trace import trace_document, write_trace

        ours, chrome = write_trace(args.trace, trace_document(doc, results, args.runtime), doc)
        print(f"wrote {ours} and {chrome}")


if __name__ == "__main__":
    sys.exit(main())
