"""``layersched frontier PROBLEM``: the best schedule at each per-rank memory limit, from the least
feasible to where the bubble stops falling, with its proven bound; templates marked beside it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from layersched.cli.options import add_quiet, add_time_limit, positive_int, two_or_more


def add_commands(subparsers: argparse._SubParsersAction) -> dict[str, Callable]:
    f = subparsers.add_parser(
        "frontier",
        help="sweep the memory limit: best schedule, bubble and proven bound at each; table, CSV, plot",
        description="Solve the problem with --solver best under a range of per-rank memory limits, from the "
        "least under which any schedule fits to where more memory stops helping, and print each point's "
        "iteration time, bubble rate, proven lower bound and gap. The templates without a limit (1F1B, "
        "ZB-H1, ZB-H2, ZB-V, ...) are listed and plotted at their own peak memory.",
    )
    f.add_argument("problem", help="problem file (YAML or JSON), e.g. problems/zb-1.5b.yaml")
    f.add_argument(
        "--points",
        type=two_or_more,
        default=8,
        metavar="N",
        help="evenly spaced memory limits to try, from the least that fits to the best template's peak; "
        "each template's own peak memory between them is tried too (default 8)",
    )
    add_time_limit(f, 10.0, "solver time limit per point")
    f.add_argument("--microbatches", type=positive_int, metavar="M", help="override the number of micro-batches")
    f.add_argument(
        "--cuts",
        choices=["layer", "sublayer"],
        help="a model-level problem's stages: cut between whole layers, or also inside them. The sweep is of "
        "one partition (default: whole layers, or sub-layers where whole layers make too few stages); "
        "'solve' with cuts: best schedules both and keeps the faster",
    )
    f.add_argument(
        "--out-dir",
        default="bench-out",
        help="where to write NAME-frontier.csv and .png (NAME-CUTS-frontier with --cuts; default bench-out/)",
    )
    add_quiet(f, "no line per point while it runs")
    return {"frontier": cmd_frontier}


def cmd_frontier(args, console) -> int:
    from dataclasses import replace

    from rich.table import Table

    from layersched.describe.config import load_problem
    from layersched.formats.export import check_output, write_text
    from layersched.formats.plot import plot_frontier
    from layersched.formats.report import rows_to_csv
    from layersched.formats.units import fmt_mem, fmt_time
    from layersched.schedule.cuts import starting_cuts
    from layersched.schedule.frontier import frontier

    spec = load_problem(args.problem)
    pipe, made = starting_cuts(spec, args.problem, args.cuts)
    # the sweep is of one partition: say which, and where the other one is
    where = {"layer": " cut between whole layers", "sublayer": " cut inside layers"}.get(made, "")
    other = ""
    if made == "layer" and not args.cuts and spec.training.cuts == "best":
        other = "; --cuts sublayer sweeps the cuts inside layers, which 'solve' also tries"
    if args.microbatches:
        pipe = replace(pipe, num_microbatches=args.microbatches)
    check_output(args.out_dir, folder=True)  # before the sweep, not after it
    t, m = pipe.time_unit, pipe.memory_unit
    if not args.quiet:
        console.print(
            f"{pipe.name}{where}: sweeping {args.points} memory limits and the templates' own peaks, "
            f"best for at most {args.time_limit:g} s each ({_seconds(args.points * args.time_limit)} for the "
            f"{args.points} limits)"
        )

    def progress(p) -> None:
        if not args.quiet:
            console.print(
                f"  limit {fmt_mem(p.limit, m)}: {fmt_time(p.value, t)}, bubble {p.bubble_rate:.4f}, "
                f"bound {fmt_time(p.lower_bound, t)} (gap {p.gap:.2%}, {p.status})"
            )

    front = frontier(pipe, points=args.points, time_limit=args.time_limit, progress=progress)
    table = Table(title=f"{pipe.name}: memory-bubble frontier ({front.objective})")
    for col in ("schedule", "memory limit", "peak memory", front.objective, "bubble rate", "lower bound", "gap"):
        table.add_column(col, justify="left" if col == "schedule" else "right")
    rows = []
    for p in [*front.points, *front.templates]:
        table.add_row(
            p.label if p.limit is not None else f"{p.label} (no limit)",
            fmt_mem(p.limit, m),
            fmt_mem(p.peak_memory, m),
            fmt_time(p.value, t),
            f"{p.bubble_rate:.4f}",
            fmt_time(p.lower_bound, t),
            f"{p.gap:.2%}",
        )
        rows.append({**p.__dict__, "gap": round(p.gap, 6)})
    console.print(table)
    console.print(
        f"no schedule{' with these cuts' if made else ''} at any memory limit is faster than "
        f"{fmt_time(front.floor, t)} (the bound without a limit){other}"
    )
    out = Path(args.out_dir)
    columns = ("label", "limit", "peak_memory", "value", "bubble_rate", "lower_bound", "gap", "status")
    stem = f"{pipe.name}-{args.cuts}" if args.cuts else pipe.name  # the two partitions' files side by side
    csv_path = out / f"{stem}-frontier.csv"
    write_text(csv_path, rows_to_csv(rows, columns))
    png = plot_frontier(front, out / f"{stem}-frontier.png")
    console.print(f"wrote {csv_path}, {png}")
    return 0


def _seconds(s: float) -> str:
    """A span of seconds in the largest unit that keeps it readable: 80 s, 13 min, 4.2 h, 11.6 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if s >= 2 * size:
            return f"{s / size:.{0 if unit == 'min' else 1}f} {unit}"
    return f"{s:g} s"
