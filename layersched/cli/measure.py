"""The runtime's ``layersched`` commands: ``profile`` (a model into a problem file) and ``compare``
(a measured run beside its schedule). torch is imported only when ``profile`` runs.

Example
-------
>>> import argparse
>>> sub = argparse.ArgumentParser().add_subparsers(dest="command")
>>> sorted(add_commands(sub))
['compare', 'profile']
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from layersched.cli.options import add_device, add_model_args, add_threads, keywords, positive_int


def add_commands(subparsers: argparse._SubParsersAction) -> dict[str, Callable]:
    """Add ``profile`` and ``compare`` to ``subparsers``; the command functions by name."""
    p = subparsers.add_parser(
        "profile",
        help="measure a torch model layer by layer and write a problem file",
        description="Time every layer's forward, backward for inputs, backward for weights, fused "
        "backward and optimizer step (as the runner runs them), measure activation and parameter memory, "
        "this machine, the link between two local ranks and the runner's own cost per action kind (two "
        "short two-rank runs, 1f1b-split and 1f1b), and write a model-level problem file.",
    )
    p.add_argument(
        "model",
        help="model builder, 'path/to/file.py:function' or 'module:function', e.g. examples/models.py:gpt_small",
    )
    p.add_argument("--microbatch", type=positive_int, required=True, metavar="N", help="micro-batch size")
    p.add_argument("--out", required=True, help="problem file to write (YAML)")
    p.add_argument(
        "--microbatches", type=positive_int, default=8, metavar="M", help="micro-batches per step (default 8)"
    )
    p.add_argument("--pipeline", type=positive_int, default=2, metavar="P", help="pipeline ranks (default 2)")
    p.add_argument("--data-parallel", type=positive_int, default=1, metavar="D", help="replicas (default 1)")
    p.add_argument("--schedule", default="1f1b", help="the problem's default schedule (default 1f1b)")
    p.add_argument("--repeat", type=positive_int, default=10, help="timed repetitions per layer; the median is kept")
    add_device(p, "cpu", "where to time the layers (default cpu)")
    add_threads(p, "torch threads, as in a run (default 1)")
    p.add_argument(
        "--link",
        choices=["measure", "estimate"],
        default="measure",
        help="measure the link and the runner's cost per action on two local ranks (a few seconds), or "
        "estimate the link from the memory bandwidth and leave the runner's cost out",
    )
    p.add_argument("--name", help="problem name (default: the model's name with -profiled)")
    add_model_args(p)  # the same keywords as the run's, so that the profile is of the model that runs

    c = subparsers.add_parser(
        "compare",
        help="predicted vs measured action times of a run",
        description="Mean duration per action kind and per iteration, predicted by the schedule file and "
        "measured in a run's trace (written by 'python -m layersched.run', run-trace.json by default).",
    )
    c.add_argument("schedule", help="schedule file the run executed")
    c.add_argument("trace", help="the run's trace (our JSON, not the .chrome.json)")
    c.add_argument("--all-steps", action="store_true", help="include the first (warm-up) step")
    return {"profile": cmd_profile, "compare": cmd_compare}


def cmd_profile(args, console) -> int:
    from layersched.describe.config import load_problem
    from layersched.formats.export import check_output
    from layersched.runtime.profiler import problem_from_profile, profile, write_problem
    from layersched.runtime.workload import check_options

    check_output(args.out)  # before the timing runs, not after them
    options = keywords(args.model_arg, "--model-arg", "depth=4")
    check_options(args.model, options)  # a misspelt key: said, not dropped
    prof = profile(
        args.model,
        args.microbatch,
        repeat=args.repeat,
        device=args.device,
        threads=args.threads,
        link="measure" if args.link == "measure" else None,
        num_microbatches=args.microbatches,
        model_options=options,
    )
    spec = problem_from_profile(
        prof,
        microbatches=args.microbatches,
        pipeline=args.pipeline,
        data_parallel=args.data_parallel,
        schedule=args.schedule,
        name=args.name,
    )
    write_problem(spec, args.out)
    load_problem(args.out)  # what was written must read back
    from rich.table import Table

    table = Table(
        title=f"{prof['model']} at micro-batch {args.microbatch} ({prof['dtype']}, {args.device})", show_edge=False
    )
    for col in ("layer", "F (ms)", "I (ms)", "W (ms)", "B (ms)", "activations", "kept for W", "params", "output"):
        table.add_column(col, justify="right")
    times = ("forward", "backward_input", "backward_weight", "backward")
    sizes = ("activation_bytes", "kept_for_weight_grad", "param_bytes", "output_bytes")
    for layer in (leaf for top in prof["layers"] for leaf in top.get("sublayers", [top])):  # sub-layers, named
        table.add_row(layer["name"], *(f"{layer[k] * 1e3:.3f}" for k in times), *(str(layer[k]) for k in sizes))
    console.print(table)
    link = prof.get("link")
    if link:
        console.print(f"link: {link['latency'] * 1e6:.1f} us + bytes / {link['bandwidth'] / 1e9:.2f} GB/s")
    overhead = prof["device"].get("action_overhead")
    if overhead:
        each = overhead if isinstance(overhead, dict) else dict.fromkeys("FIWB", overhead)
        figures = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in each.items())
        console.print(f"runner, per action beyond its layers: {figures}")
    ranks = args.pipeline * args.data_parallel
    cores = os.cpu_count() or 1
    if args.device == "cpu" and ranks * args.threads > cores:
        console.print(
            f"[yellow]warning:[/] {ranks} ranks x {args.threads} thread(s) on {cores} CPU cores: the problem "
            "counts every rank as a device of its own, so a run of it on this machine will take longer "
            "than predicted"
        )
    console.print(f"wrote {args.out}")
    return 0


def cmd_compare(args, console) -> int:
    from rich.table import Table

    from layersched.runtime.trace import compare

    cmp = compare(args.schedule, args.trace, skip_first=not args.all_steps)
    table = Table(title=f"{args.schedule} vs {args.trace}", show_edge=False)
    for col in ("", "predicted (ms)", "measured (ms)", "measured/predicted", "count (p/m)"):
        table.add_column(col, justify="right")
    for row in cmp.rows:
        means = ("-" if v is None else f"{v * 1e3:.4f}" for v in (row.predicted, row.measured))
        table.add_row(
            row.what,
            *means,
            "-" if row.ratio is None else f"{row.ratio:.3f}",
            f"{row.predicted_count}/{row.measured_count}",
        )
    console.print(table)
    console.print(cmp.to_text().splitlines()[-1])
    return 0
