"""``python -m layersched.cli.asyncrun``: SpecTrain's asynchronous 1F1B pipeline with real processes
(`layersched.methods.spectrain.asyncrun`), one row per mode."""

from __future__ import annotations

import argparse
import sys

from layersched.cli.options import NEEDS_TORCH, add_device, add_sgd, add_steps, add_timeout, positive_int


def _parser() -> argparse.ArgumentParser:
    from layersched.methods.spectrain import MODES

    p = argparse.ArgumentParser(
        prog="python -m layersched.cli.asyncrun",
        description="Train a teacher-student MLP as an asynchronous 1F1B pipeline (no flush), one process "
        "per stage, and print per mode the training loss, test loss and accuracy, and the extra weight "
        "memory per stage (stashed versions, SpecTrain's predicted copy).",
        epilog="example: python -m layersched.cli.asyncrun --mode spectrain --mode sync --steps 300",
    )
    p.add_argument(
        "--mode",
        action="append",
        choices=MODES,
        help="sync (pipeline drains per mini-batch), stale (no stashing), stash (PipeDream weight "
        "stashing) or spectrain (SpecTrain weight prediction); repeat for several (default: all four)",
    )
    add_steps(p, 300, "mini-batches to train on")
    p.add_argument("--stages", type=positive_int, default=4, help="pipeline stages, one process each (default: 4)")
    add_sgd(p, lr=0.05, momentum=0.9)
    p.add_argument("--seed", type=int, default=0, help="seed of the task's data and initial weights (default: 0)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="samples per mini-batch (default: 32)")
    add_device(p, "cpu", "cpu (gloo) or cuda (NCCL, one GPU per stage)")
    add_timeout(p, 600.0, "seconds before the run is stopped")
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line: train, then print one row per mode."""
    from rich.console import Console

    from layersched.formats.report import BenchResult, rows_table
    from layersched.methods.spectrain import MODES

    args = _parser().parse_args(argv)
    try:
        from layersched.methods.spectrain.asyncrun import teacher_student, train_async_modes
        from layersched.runtime.launch import RunFailed
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "torch":
            raise
        print(f"asyncrun: error: {NEEDS_TORCH}", file=sys.stderr)
        return 2
    modes = args.mode or list(MODES)
    try:
        runs = train_async_modes(
            modes,
            args.steps,
            num_stages=args.stages,
            lr=args.lr,
            momentum=args.momentum,
            task_options={"seed": args.seed, "batch_size": args.batch_size},
            timeout=args.timeout,
            device=args.device,
        )
    except ValueError as exc:
        print(f"asyncrun: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"asyncrun: run failed: {exc}", file=sys.stderr)
        return 1
    rows = []
    task = teacher_student(seed=args.seed, batch_size=args.batch_size, num_stages=args.stages)
    for mode, run in runs.items():
        test_loss, accuracy = run.evaluate(task)
        tail = run.losses[-max(1, args.steps // 4) :]
        rows.append(
            {
                "mode": mode,
                "train_loss": sum(tail) / len(tail),
                "test_loss": test_loss,
                "test_accuracy": accuracy,
                "lag_per_stage": "/".join(str(r.lag) for r in run.ranks),
                "stash_copies_per_stage": "/".join(str(r.stash_copies) for r in run.ranks),
                "extra_weight_bytes_per_stage": "/".join(str(r.extra_weight_bytes) for r in run.ranks),
                "ms_per_step": 1e3 * max(sum(r.step_times) / len(r.step_times) for r in run.ranks),
            }
        )
    title = f"asynchronous 1F1B, {args.stages} processes, {args.steps} steps, lr {args.lr}, momentum {args.momentum}"
    Console(highlight=False, width=200).print(rows_table(BenchResult(title, rows, tuple(rows[0]), [])))
    print("train_loss: mean over the last quarter of the steps; test loss and accuracy of the final weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
