"""``layersched bench NAME``: a method's experiment (``layersched.methods.NAME.experiment``) or a
benchmark suite (`layersched.schedule.suite`); a table on screen, a CSV and a plot under ``--out-dir``."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

from layersched.cli.options import add_quiet, add_time_limit
from layersched.describe.config import SpecError
from layersched.formats.report import BenchResult


def add_commands(subparsers: argparse._SubParsersAction) -> dict[str, Callable]:
    b = subparsers.add_parser(
        "bench",
        help="run a benchmark suite or a method's experiment: table, CSV, plot",
        description="Solve each problem of a suite (a bundled one by name, or a path) with each method and print "
        "bubble rate, iteration time, lower bound, gap, peak memory and solve time; or run a method's experiment.",
    )
    b.add_argument(
        "suite",
        help="suite name (e.g. zero-bubble, models), path to a suite file, or an experiment "
        "(a method: layerpipe, ooo, adagrouper, spectrain)",
    )
    b.add_argument("--methods", help="comma-separated methods to run instead of the suite's (templates, solvers, best)")
    add_time_limit(b, None, "time limit per solver run (default: the suite's)")
    b.add_argument("--out-dir", default="bench-out", help="where to write NAME.csv and NAME.png (default bench-out/)")
    b.add_argument(
        "--quick", action="store_true", help="a smaller version of an experiment (fewer sizes, shorter runs)"
    )
    add_quiet(b, "no progress bar")
    return {"bench": cmd_bench}


def cmd_bench(args, console) -> int:
    from rich.progress import Progress

    from layersched.formats.export import check_output
    from layersched.formats.report import rows_table

    check_output(args.out_dir, folder=True)  # before the runs, not after them
    with Progress(console=console, transient=True, disable=args.quiet) as bar:
        task = bar.add_task("bench", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        result = run_bench(
            args.suite,
            Path(args.out_dir),
            time_limit=args.time_limit,
            methods=[m.strip() for m in args.methods.split(",")] if args.methods else None,
            quick=args.quick,
            progress=progress,
        )
    console.print(rows_table(result))
    for section in result.sections:
        console.print(rows_table(section))
    console.print(f"wrote {', '.join(str(f) for f in result.files)}")
    return 0


def _torch_peers() -> dict:
    """torch's own schedules as suite methods (``torch:<name>``), where torch is installed."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return {}
    from layersched.runtime.torch_orders import peers

    return peers()


def experiment_names() -> list[str]:
    """The experiments ``bench NAME`` runs: each method package's ``experiment`` module."""
    import importlib.util
    import pkgutil

    import layersched.methods as methods

    return sorted(
        m.name.replace("_", "-")
        for m in pkgutil.iter_modules(methods.__path__)
        if m.ispkg and importlib.util.find_spec(f"layersched.methods.{m.name}.experiment")
    )


def run_bench(
    name: str,
    out_dir: Path,
    *,
    time_limit: float | None = None,
    methods: list[str] | None = None,
    quick: bool = False,
    progress=None,
) -> BenchResult:
    """Run the experiment or suite called ``name``; write its CSV (and plot) under ``out_dir``."""
    from layersched.formats.export import write_text
    from layersched.formats.report import plot_rows, rows_to_csv
    from layersched.schedule.suite import COLUMNS, find_suite, run_suite

    if name in experiment_names():
        module = f"layersched.methods.{name.replace('-', '_')}.experiment"
        result = importlib.import_module(module).run(out_dir, quick=quick, progress=progress)
    else:
        try:
            path = find_suite(name)
        except SpecError as exc:  # a bare name: it may have meant an experiment
            if Path(name).suffix:
                raise
            raise SpecError(f"{exc}, or an experiment: {', '.join(experiment_names())}") from None
        rows = run_suite(path, time_limit=time_limit, methods=methods, progress=progress, peers=_torch_peers())
        png = out_dir / f"{path.stem}.png"
        plot_rows(rows, png, f"suite {path.stem}: bubble rate per method")
        result = BenchResult(f"suite {path.stem}", rows, COLUMNS, [png])
    csv_path = out_dir / f"{result.title.split()[-1]}.csv"
    write_text(csv_path, rows_to_csv(result.rows, result.columns))
    result.files.insert(0, csv_path)
    for section in result.sections:
        path = out_dir / f"{section.title.split()[-1]}.csv"
        write_text(path, rows_to_csv(section.rows, section.columns))
        result.files.append(path)
    return result
