"""``layersched partition``: assign a model's layers or sub-layers to processors and print the stages.

Example
-------
>>> import argparse
>>> sub = argparse.ArgumentParser().add_subparsers(dest="command")
>>> sorted(add_commands(sub))
['partition']
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from layersched.cli.options import add_time_limit, positive_int


def add_commands(subparsers: argparse._SubParsersAction) -> dict[str, Callable]:
    """Add ``partition`` to ``subparsers``; the command function by name."""
    p = subparsers.add_parser(
        "partition",
        help="split a model's layers or sub-layers onto processors, slowest processor as fast as possible",
        description="Partition a model-level problem onto P processors: the bottleneck time per micro-batch "
        "(transfers across cuts included), a lower bound, and each processor's items, time and memory "
        "(weights, optimizer state and the activations the 1F1B schedule keeps).",
    )
    p.add_argument("problem", help="model-level problem file, e.g. problems/bert-large-v100.yaml")
    p.add_argument(
        "--processors", "-P", type=positive_int, help="processors (default: the problem's training.pipeline)"
    )
    p.add_argument(
        "--method",
        choices=["layerpipe", "layerpipe-sync", "pipedream"],
        default="layerpipe",
        help="layerpipe: sub-layers, split backward, asynchronous (default); layerpipe-sync: with a flush "
        "per iteration; pipedream: whole layers, PipeDream's partitioner, weight stashing",
    )
    p.add_argument("--granularity", choices=["sublayer", "layer"], default="sublayer", help="LayerPipe's items")
    p.add_argument(
        "--solver",
        choices=["dp", "cpsat"],
        default="dp",
        help="dp: exact contiguous dynamic program; cpsat: any assignment (non-contiguous), from the DP's split",
    )
    add_time_limit(p, 10.0, "CP-SAT time limit")
    return {"partition": cmd_partition}


def cmd_partition(args, console) -> int:
    from rich.table import Table

    from layersched.describe.config import SpecError, load_problem
    from layersched.methods.layerpipe.layerpipe import plan_layerpipe
    from layersched.methods.layerpipe.pipedream import plan_pipedream
    from layersched.methods.layerpipe.pipeplan import Setting

    spec = load_problem(args.problem)
    setting = Setting.from_spec(spec, args.problem)
    P = args.processors or spec.training.pipeline
    if P < 1:
        raise SpecError(f"--processors: must be at least 1, got {P}")
    if args.method == "pipedream":
        plan = plan_pipedream(setting, P)
    else:
        mode = "sync" if args.method == "layerpipe-sync" else "async"
        plan = plan_layerpipe(
            setting, P, mode=mode, granularity=args.granularity, solver=args.solver, time_limit=args.time_limit
        )
    part, names = plan.partition, plan.items.names
    table = Table(title=f"{spec.name}: {plan.method} on {P} processors")
    for c in ("processor", "items", "first", "last", "time ms", "memory GiB"):
        table.add_column(c, justify="left" if c in ("first", "last") else "right")
    for p, idx in enumerate(part.parts):
        first, last = (names[idx[0]], names[idx[-1]]) if idx else ("", "")
        table.add_row(
            str(p), str(len(idx)), first, last, f"{part.stage_time[p] * 1e3:.3f}", f"{plan.memory[p] / 2**30:.2f}"
        )
    console.print(table)
    over = [p for p in range(P) if plan.memory[p] > plan.capacity]
    console.print(
        f"time per micro-batch {plan.time_per_microbatch * 1e3:.3f} ms (bottleneck {part.bottleneck * 1e3:.3f} ms, "
        f"lower bound {part.lower_bound * 1e3:.3f} ms, {part.status}); imbalance {plan.imbalance:.3f}; "
        f"memory limit {plan.capacity / 2**30:.1f} GiB" + (f", exceeded on {over}" if over else "")
    )
    return 0
