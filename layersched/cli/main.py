"""The ``layersched`` command: solve, show, validate and export schedules.

Bad input gets one line naming the file, the field and the fix, and exit status 2 (``--debug``
shows the traceback). Every schedule written or read passes `solvers.validate`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from layersched.cli.options import NEEDS_TORCH, add_quiet, add_time_limit, positive_int, search_seed
from layersched.formats.units import fmt_mem, fmt_time

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

EPILOG = """examples:
  layersched solve problems/zb-1.5b.yaml --schedule 1f1b --out schedule.json
  layersched show schedule.json --plot schedule.svg
  layersched validate schedule.json
  layersched export schedule.json --format torch-csv --out schedule.csv
  layersched export schedule.json --format torchtitan --out pp.toml   (pp.csv beside it)
  layersched preflight schedule.json
"""


def _parser() -> argparse.ArgumentParser:
    from layersched.schedule.templates import template_names
    from solvers import solver_names

    p = argparse.ArgumentParser(
        prog="layersched",
        description="Schedule neural-network training as a task "
        "graph: solve, compare, check and export pipeline schedules.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "solve",
        help="solve a schedule for a problem file and write it as JSON",
        description="Build the task graph of a problem file (model-level or stage-level), "
        "schedule it with a template or a solver, validate it and write the schedule file.",
    )
    s.add_argument("problem", help="problem file (YAML or JSON), e.g. problems/zb-1.5b.yaml")
    how = s.add_mutually_exclusive_group()
    how.add_argument(
        "--schedule",
        metavar="NAME",
        help=f"pipeline template: {', '.join(template_names())} (default: the problem's own)",
    )
    how.add_argument(
        "--solver",
        metavar="NAME",
        help=f"generic solver: {', '.join(n for n in solver_names() if n != 'best')}, or best "
        "(every template, list scheduling, then CP-SAT from the best of them)",
    )
    s.add_argument(
        "--objective",
        choices=["span", "makespan"],
        help="span: steady-state iteration time (largest per-rank span); makespan: one "
        "iteration from time 0 (default: the problem's own)",
    )
    s.add_argument("--microbatches", type=positive_int, metavar="M", help="override the number of micro-batches")
    s.add_argument(
        "--pipeline",
        type=int,
        metavar="P",
        help="override the pipeline ranks of a model-level problem (its layers are split again)",
    )
    s.add_argument(
        "--cuts",
        choices=["layer", "sublayer", "best"],
        help="where a model-level problem is cut into stages: between whole layers, also inside them "
        "(sub-layers), or best: both partitions scheduled, sharing --time-limit, and the faster kept "
        "(default: the problem's training.cuts, else best)",
    )
    add_time_limit(s, 30.0, "solver time limit")
    s.add_argument(
        "--start",
        metavar="FILE",
        help="with --solver best: go on from this schedule file (an earlier run's --out) for the same stages, "
        "ranks and micro-batches: its schedule joins the candidates and seeds the search, so the result is never "
        "slower than it (the same file may be --out)",
    )
    s.add_argument(
        "--seed",
        type=search_seed,
        metavar="N",
        help="with --solver best, cpsat, lns or ils: the search's random seed (default 0). Going on from a "
        "schedule with --start, another seed searches afresh where the same one tends to end where the last "
        "run did",
    )
    s.add_argument("--out", default="schedule.json", help="where to write the schedule (default: schedule.json)")
    add_quiet(s)

    sh = sub.add_parser("show", help="print a schedule: per-rank grid, bubble, peak memory; optionally plot it")
    sh.add_argument("schedule", help="schedule file written by 'layersched solve'")
    sh.add_argument("--plot", metavar="FILE", help="also draw a Gantt chart with memory over time (.svg or .png)")
    sh.add_argument("--width", type=positive_int, default=100, help="characters per rank row in the grid (default 100)")

    v = sub.add_parser(
        "validate",
        help="check a schedule file independently; exit 0 when valid, 2 otherwise",
        description="Rebuild the task graph from the file's pipeline record (its stored edges are not trusted) and "
        "check every task: precedence with transfer delays, one pass at a time per rank, memory within each "
        "rank's capacity; then that the stored metrics match the tasks. Exit 0 when valid; else exit 2 with the "
        "first broken rule, the task it names and how many more there are.",
    )
    v.add_argument("schedule", help="schedule file written by 'layersched solve'")

    e = sub.add_parser("export", help="convert a schedule file to another format")
    e.add_argument("schedule", help="schedule file written by 'layersched solve'")
    e.add_argument(
        "--format",
        choices=["torch-csv", "json", "torchtitan"],
        default="torch-csv",
        help="torch-csv: torch.distributed.pipelining's compute-only CSV (one row per rank); torchtitan: that "
        "CSV and a TOML fragment for torchtitan's job config ([parallelism] and the batch size) that runs it",
    )
    e.add_argument(
        "--out", help="output file (default: the schedule's name with the format's suffix; torchtitan: .toml)"
    )
    e.add_argument(
        "--microbatch-size",
        type=positive_int,
        default=1,
        help="torchtitan: samples per micro-batch (pipeline_parallel_microbatch_size; default 1)",
    )

    pf = sub.add_parser(
        "preflight",
        help="replay torch's offline checks and torchtitan's placement rule on a schedule file",
        description="Check a schedule file as torch and torchtitan will before a run: torch's _validate_schedule, "
        "_add_send_recv and _simulate_comms_compute (a dry run that finds communication deadlocks), then "
        "torchtitan's placement of stages for the schedule name. One line per check; exit 0 when all pass, 1 "
        "when one fails. Needs torch.",
    )
    pf.add_argument("schedule", help="schedule file written by 'layersched solve'")
    pf.add_argument(
        "--torchtitan-schedule",
        metavar="NAME",
        help="the pipeline_parallel_schedule of your torchtitan config (default: the one 'export --format "
        "torchtitan' writes)",
    )

    sub.add_parser("schema", help="print the JSON Schema of the schedule file")
    sub.add_parser("list", help="list the pipeline templates and solvers")
    from layersched.cli.bench import add_commands as add_bench

    COMMANDS.update(add_bench(sub))
    from layersched.cli.frontier import add_commands as add_frontier

    COMMANDS.update(add_frontier(sub))
    from layersched.cli.measure import add_commands

    COMMANDS.update(add_commands(sub))
    from layersched.cli.partition import add_commands as add_partition

    COMMANDS.update(add_partition(sub))
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed its one-line error (or the help): hand back its status
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    try:
        return COMMANDS[args.command](args, console)
    except ModuleNotFoundError as exc:
        if args.debug or (exc.name or "").split(".")[0] != "torch":
            raise
        print(f"layersched {args.command}: error: {NEEDS_TORCH}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"layersched {args.command}: interrupted; nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # one clear line; the traceback only on request
        if args.debug or not _is_user_error(exc):
            raise
        print(f"layersched {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _is_user_error(exc: Exception) -> bool:
    from layersched.describe.config import SpecError
    from layersched.schedule.solve import NoScheduleError
    from layersched.schedule.templates import TemplateError
    from solvers import Deadlock, InvalidSchedule

    return isinstance(exc, SpecError | TemplateError | InvalidSchedule | Deadlock | NoScheduleError | ValueError)


def cmd_solve(args, console: Console) -> int:
    from layersched.describe.config import SpecError, load_problem
    from layersched.formats.export import check_output, save_json, schedule_file
    from layersched.schedule.cuts import choose_cuts, starting_pipeline
    from layersched.schedule.solve import solve_pipeline
    from layersched.schedule.templates import TemplateError
    from solvers import Deadlock, InvalidSchedule

    spec = load_problem(args.problem)
    check_output(args.out)  # before the search, not after it
    if args.pipeline is not None:
        if args.pipeline < 1:
            raise SpecError(f"--pipeline: must be at least 1, got {args.pipeline}")
        if spec.training is None:
            raise SpecError(
                f"--pipeline: {args.problem} gives its stages directly; only a model-level problem "
                "(model, cluster, training) can be split into another number of stages"
            )
        training = type(spec.training).model_validate({**spec.training.model_dump(), "pipeline": args.pipeline})
        spec = spec.model_copy(update={"training": training})
    if args.microbatches is not None and args.microbatches < 1:
        raise SpecError(f"--microbatches: must be at least 1, got {args.microbatches}")

    def adjust(p):
        from dataclasses import replace

        return p if args.microbatches is None else replace(p, num_microbatches=args.microbatches)

    cuts = args.cuts or (spec.training.cuts if spec.training is not None else None)
    pipe = adjust(starting_pipeline(spec, args.problem, cuts))
    solver = args.solver or (None if args.schedule else pipe.default_solver)
    _check_method_names(args, spec)
    options = {}
    if solver is not None:
        options["time_limit"] = _solver_time(args.time_limit, pipe, solver)
    if args.seed is not None:
        if solver not in SEEDED_SOLVERS:
            used = f"--solver {solver}" if solver else f"the template {args.schedule or pipe.default_schedule!r}"
            raise SpecError(
                f"--seed: {used} has no random choices; only --solver {', '.join(SEEDED_SOLVERS)} take a seed"
            )
        options["seed"] = args.seed
    if args.start is not None:  # checked here, to name the file; the time it takes counts in the limit
        began = time.perf_counter()
        options["start"] = _read_start(args.start, pipe, solver, args.objective)
        options["time_limit"] = max(0.0, options["time_limit"] - (time.perf_counter() - began))
    improved: list[float] = []  # seconds since the solve began at which a search found a shorter schedule
    if solver in ("cpsat", "lns", "best"):
        unit = pipe.time_unit
        began = time.perf_counter()
        if not args.quiet:
            console.print(f"solving with {solver} for at most {args.time_limit:g} s (improvements below)")

        def progress(p: dict) -> None:
            # seconds since the solve began: each step of `best` counts its own ``elapsed`` from zero
            improved.append(time.perf_counter() - began)
            if not args.quiet:
                console.print(
                    f"  {improved[-1]:7.1f} s  incumbent {fmt_time(p['incumbent'], unit)}  "
                    f"bound {fmt_time(p['bound'], unit)}  gap {p['gap']:.2%}"
                )

        options["progress"] = progress
    if cuts == "best":
        share = dict(options)  # each partition's: the partitions share the limit
        deadline = time.perf_counter() + options.get("time_limit", 0.0)

        def evaluate(p):
            return solve_pipeline(p, schedule=args.schedule, solver=solver, objective=args.objective, **share)

        def starting(label: str, k: int, n: int) -> None:
            if "time_limit" in options:  # an equal part of what is left (one that ends early leaves more)
                share["time_limit"] = max(deadline - time.perf_counter(), 0.0) / (n - k)
            if "progress" in options:  # the progress lines below it are this partition's
                console.print(f"  cuts: {label}")

        sol, tried = choose_cuts(
            spec, args.problem, evaluate, cuts=cuts, adjust=adjust, climb=solver is None, starting=starting
        )
        pipe = sol.pipe
        if not args.quiet:
            base = next((c.value for c in tried if c.granularity == "layer" and c.value is not None), None)
            for c in tried:
                value = fmt_time(c.value, pipe.time_unit) if c.value is not None else f"none ({c.why})"
                gain = ""
                if base and c.value is not None and c.granularity != "layer":
                    change = (c.value - base) / base
                    gain = f" ({abs(change):.1%} {'more' if change > 0 else 'less'} than whole layers)"
                chosen = " <- chosen" if c.solution is sol else ""
                console.print(f"cuts: {c.label}: {value}{gain}{chosen}")
    else:
        try:
            sol = solve_pipeline(pipe, schedule=args.schedule, solver=solver, objective=args.objective, **options)
        except (InvalidSchedule, Deadlock) as exc:
            if solver is not None:
                raise
            name = args.schedule or pipe.default_schedule
            raise TemplateError(
                f"schedule {name!r} breaks this problem's rules: {exc}. A template's order is fixed; "
                "--solver best searches orders that keep them"
            ) from exc
    doc = schedule_file(sol, source=str(args.problem))
    save_json(doc, args.out)
    if not args.quiet:
        tried = sol.info.get("candidates")
        if tried:
            fits = ", ".join(f"{k} {fmt_time(v, pipe.time_unit)}" for k, v in tried.items() if isinstance(v, int))
            console.print(f"candidates: {fits}; CP-SAT status {sol.info.get('cpsat_status')}")
            for k, v in tried.items():  # a search step skipped, and why (templates that do not apply: not listed)
                if isinstance(v, str) and v.startswith(("not run", "not tried", "not used")):
                    console.print(f"{k}: {v}")
        _summary(doc, console)
        console.print(f"wrote {args.out} (valid; {len(doc.tasks)} tasks, solved in {sol.runtime:.2f} s)")
        late = _still_improving(improved, args.time_limit, doc.metrics, args.out, args.seed or 0)
        if late and not sol.info.get("interrupted"):
            console.print(late)
    if sol.info.get("interrupted"):  # said even with --quiet: the file holds an unfinished search
        m = doc.metrics
        gap = (m["value"] - m["lower_bound"]) / m["value"] if m["value"] else 0.0
        print(
            f"layersched solve: interrupted: wrote the best schedule found so far to {args.out} "
            f"({doc.objective} {fmt_time(m['value'], pipe.time_unit)}, gap {gap:.2%} to the bound)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return 0


SEEDED_SOLVERS = ("best", "cpsat", "lns", "ils")
"""The solvers `solve --seed` applies to: those with random choices (`solvers.cpsat.seed_solver`)."""

STILL_IMPROVING = 0.75
"""`solve` says that more time may pay when the search's last shorter schedule came after this share
of ``--time-limit`` and the result is above its bound. On the interleaved 1.5B row re-cut to p=5,
m=15 (session 54, 2-core VM) `best` stopped at gaps of 0.66% and 1.20% with 60 s, and at 0.05% with
600 s, where it still found shorter schedules at 187, 307, 367 and 487 s."""


def _still_improving(improved: list[float], limit: float, metrics: dict, out: str, seed: int = 0) -> str | None:
    """A line for `solve`'s output where the search still found shorter schedules late in its time
    limit and the result is not proven optimal; else None. ``improved``: the seconds since the solve
    began at which it found them; ``out``: the schedule file written; ``seed``: the run's ``--seed``
    (the line suggests the next one: from the same schedule the same seed tends to end where this
    run did; session 64, docs/measurements.md).

    >>> print(_still_improving([3.0, 50.0], 60, {"value": 101, "lower_bound": 100}, "s.json")[:74])
    still improving: the search found a shorter schedule at 50.0 s of its 60 s
    >>> _still_improving([3.0, 20.0], 60, {"value": 101, "lower_bound": 100}, "s.json") is None  # nothing late
    True
    >>> _still_improving([59.0], 60, {"value": 100, "lower_bound": 100}, "s.json") is None  # proven optimal
    True
    """
    if not improved or metrics["value"] <= metrics["lower_bound"] or improved[-1] < STILL_IMPROVING * limit:
        return None
    gap = (metrics["value"] - metrics["lower_bound"]) / metrics["value"]
    return (
        f"still improving: the search found a shorter schedule at {improved[-1]:.1f} s of its {limit:g} s and "
        f"stopped {gap:.2%} above its bound; a longer --time-limit, or --start {out} --seed {seed + 1} (the "
        "search goes on from that schedule, with another seed), may find a shorter one"
    )


def _read_start(path: str, pipe, solver: str | None, objective: str | None):
    """``--start``: the schedule file's orders and times, checked against ``pipe`` now (`SpecError` naming
    the file and what does not fit), before any search."""
    from layersched.describe.config import SpecError
    from layersched.formats.export import load_schedule
    from layersched.schedule.solve import Start, start_solution

    if solver != "best":  # (so ``options`` has a time limit)
        raise SpecError(
            "--start: only --solver best goes on from a schedule file (its schedule joins the candidates and "
            "seeds the search); add --solver best"
        )
    doc = load_schedule(path)
    times = {t.name: (t.processor, t.start) for t in doc.tasks}  # the file's own timing, where it still holds
    start = Start([list(a) for a in doc.actions], doc.pipeline.split_backward, list(doc.pipeline.stage_to_rank), times)
    try:
        start_solution(pipe, start, objective or pipe.objective)
    except ValueError as exc:  # also InvalidSchedule and Deadlock: the orders break this problem's rules
        raise SpecError(f"--start {path}: {exc}") from None
    return start


def _solver_time(limit: float, pipe, solver: str) -> float:
    """What ``--time-limit`` leaves to ``solver`` once the schedule file is written (see
    `layersched.schedule.budget`); a limit too small for even one schedule is refused before any work,
    with the estimate."""
    from layersched.describe.config import SpecError
    from layersched.schedule.budget import Budget, pipeline_tasks

    budget = Budget(limit, pipeline_tasks(pipe))
    first = {"best": ("graph", "template"), "cpsat": ("graph", "cpsat")}.get(solver, ("graph", "list"))
    need = budget.estimate(*first, "write")
    if need > limit:
        what = {"best": "one template's schedule", "cpsat": "CP-SAT's model"}.get(solver, "the list schedule")
        raise SpecError(
            f"--time-limit {limit:g}: too small for {budget.num_tasks:,} tasks: building the task graph, "
            f"{what} and writing the file take about {need:.0f} s (estimated); give at least "
            f"{math.ceil(need * 1.2)} s, or use fewer micro-batches or stages"
        )
    return limit - budget.estimate("write")


def _check_method_names(args, spec) -> None:
    """Every template or solver named, in the problem file or by an option, is checked before anything
    runs, also one that this run does not use (a typo in the file's ``schedule`` would otherwise go
    unnoticed until a run without ``--solver``); an unknown one is reported with the file and the field
    that names it (an option names itself)."""
    from layersched.describe.config import SpecError
    from layersched.schedule.templates import TemplateError, get_template
    from solvers import solver_names

    section = "pipeline" if spec.pipeline is not None else "training"
    given = spec.pipeline or spec.training
    for where, name in ((f"{args.problem}: {section}.solver", given.solver), ("--solver", args.solver)):
        if name is not None and name not in solver_names():  # best among them
            raise SpecError(f"{where}: unknown solver {name!r}; valid: {', '.join(solver_names())}")
    for where, name in ((f"{args.problem}: {section}.schedule", given.schedule), ("--schedule", args.schedule)):
        if name is None:
            continue
        try:
            get_template(name)
        except (TemplateError, ValueError) as exc:
            raise SpecError(f"{where}: {exc}") from None


def _load_checked(path: str):
    """Load a schedule file and validate it completely: timing, memory, and action lists."""
    from layersched.formats.export import check_actions, check_structure, load_schedule, to_problem
    from layersched.schedule.metrics import schedule_metrics
    from solvers import validate

    doc = load_schedule(path)
    try:
        check_structure(doc)  # the graph the pipeline record describes, not the stored edges
    except ValueError as exc:
        from layersched.describe.config import SpecError

        raise SpecError(f"{path}: {exc}") from None
    problem, schedule = to_problem(doc)
    try:
        validate(problem, schedule)
        check_actions(doc, problem, schedule)
    except ValueError as exc:
        from layersched.describe.config import SpecError

        raise SpecError(f"{path}: {exc}") from None
    return doc, schedule_metrics(problem, schedule, doc.pipeline.num_ranks, doc.objective)


def cmd_show(args, console: Console) -> int:
    doc, metrics = _load_checked(args.schedule)
    doc = doc.model_copy(update={"metrics": {**doc.metrics, **metrics}})
    _summary(doc, console)
    print(_grid(doc, args.width))
    if args.plot:
        from layersched.formats.plot import plot_schedule

        plot_schedule(doc, args.plot)
        console.print(f"wrote {args.plot}")
    return 0


def cmd_validate(args, console: Console) -> int:
    doc, metrics = _load_checked(args.schedule)
    from layersched.describe.config import SpecError

    missing = [k for k in ("value", "span", "makespan", "peak_memory") if k not in doc.metrics]
    if missing:
        raise SpecError(f"{args.schedule}: metrics: {', '.join(missing)} missing; re-export it")
    stale = [k for k in ("value", "span", "makespan", "peak_memory") if doc.metrics[k] != metrics[k]]
    if stale:
        raise SpecError(
            f"{args.schedule}: metrics: {', '.join(stale)} do not match the tasks "
            f"(e.g. {stale[0]} is {doc.metrics[stale[0]]}, recomputed {metrics[stale[0]]}); re-export it"
        )
    console.print(
        f"{args.schedule}: valid ({len(doc.tasks)} tasks, {doc.pipeline.num_ranks} ranks, "
        f"{doc.objective} {fmt_time(metrics['value'], doc.time_unit)})"
    )
    return 0


def cmd_export(args, console: Console) -> int:
    from layersched.formats.export import EXPORT_FORMATS, to_torch_csv, write_text

    doc, _ = _load_checked(args.schedule)
    if args.format == "torchtitan":
        from layersched.formats.torchtitan import TorchtitanError, torchtitan_settings

        toml = Path(args.out or Path(args.schedule).with_suffix(".toml"))
        csv_path = toml.with_suffix(".csv")
        try:
            settings = torchtitan_settings(doc, str(csv_path.resolve()), args.microbatch_size)
        except TorchtitanError as exc:
            from layersched.describe.config import SpecError

            raise SpecError(f"{args.schedule}: {exc}") from None
        write_text(csv_path, to_torch_csv(doc))
        write_text(toml, settings)
        console.print(f"wrote {csv_path} and {toml} (merge it into your torchtitan job config)")
        return 0
    fn, suffix = EXPORT_FORMATS[args.format]
    out = args.out or str(Path(args.schedule).with_suffix(suffix))
    write_text(out, fn(doc))
    console.print(f"wrote {out}")
    return 0


def cmd_preflight(args, console: Console) -> int:
    from layersched.describe.config import SpecError
    from layersched.runtime.preflight import preflight

    doc, _ = _load_checked(args.schedule)
    try:
        checks = preflight(doc, args.torchtitan_schedule)
    except ImportError:
        raise SpecError("preflight runs torch's own checks and needs torch: pip install 'layersched[torch]'") from None
    for c in checks:
        console.print(f"{'pass' if c.ok else 'FAIL'}  {c.name}: {c.detail}", markup=False, highlight=False)
    return 0 if all(c.ok for c in checks) else 1


def cmd_schema(args, console: Console) -> int:
    from layersched.formats.export import schedule_json_schema

    print(json.dumps(schedule_json_schema(), indent=1))
    return 0


def cmd_list(args, console: Console) -> int:
    from layersched.schedule.templates import TEMPLATES
    from solvers import solver_names

    table = Table(title="pipeline templates (--schedule)")
    table.add_column("name")
    table.add_column("backward")
    table.add_column("stages per rank")
    table.add_column("description")
    for name, t in sorted(TEMPLATES.items()):
        lo, hi = t.min_stages_per_rank, t.max_stages_per_rank
        per_rank = str(lo) if lo == hi else f"{lo} or more" if hi is None else f"{lo} to {hi}"
        table.add_row(name, "split I/W" if t.split_backward else "fused", per_rank, t.description)
    console.print(table)
    console.print("generic solvers (--solver): " + ", ".join(n for n in solver_names() if n != "best"))
    console.print(
        "--solver best: every template above, list scheduling and CP-SAT seeded with the best of them, fused and "
        "split backward; keeps the fastest and reports a bound valid for all it searched"
    )
    from layersched.cli.bench import experiment_names
    from layersched.schedule.suite import bundled_suites

    console.print("benchmark suites (bench NAME): " + ", ".join(bundled_suites()))
    console.print("experiments (bench NAME): " + ", ".join(experiment_names()))
    return 0


def _summary(doc, console: Console) -> None:
    m = doc.metrics
    pipe = doc.pipeline
    console.print(
        f"[bold]{doc.name}[/bold]: {doc.method}, {pipe.num_stages} stages on {pipe.num_ranks} ranks, "
        f"{pipe.num_microbatches} micro-batches, {'split' if pipe.split_backward else 'fused'} backward"
    )
    u = doc.time_unit
    console.print(_summary_line(doc.objective, m, u))
    table = Table(show_edge=False)
    for col in ("rank", "work", "bubble", "peak memory", "limit"):
        table.add_column(col, justify="right")
    for r in range(pipe.num_ranks):
        table.add_row(
            str(r),
            fmt_time(m["work"][r], u),
            f"{m['per_rank_bubble'][r]:.4f}",
            fmt_mem(m["peak_memory"][r], doc.memory_unit),
            fmt_mem(m["capacity"][r], doc.memory_unit),
        )
    console.print(table)


OBJECTIVE_NAMES = {
    "span": "iteration time (steady state: the slowest rank's span)",
    "makespan": "iteration time (one iteration from time 0: makespan)",
}


def _summary_line(objective: str, m: dict, unit: str) -> str:
    """Each figure once, named: the objective with its bound and gap, the other objective only where
    it differs, and the bubble rate.

    >>> m = {"value": 10, "span": 10, "makespan": 12, "lower_bound": 8, "bubble_rate": 0.25}
    >>> print(*_summary_line("span", m, "units").split("; "), sep="\\n")
    iteration time (steady state: the slowest rank's span) 10 units, lower bound 8 units, gap 20.00%
    one iteration from time 0 (makespan) 12 units
    bubble rate 0.2500 (idle share of the iteration, mean over ranks)
    """
    gap = (m["value"] - m["lower_bound"]) / m["value"] if m["value"] else 0.0
    parts = [
        f"{OBJECTIVE_NAMES[objective]} {fmt_time(m['value'], unit)}, "
        f"lower bound {fmt_time(m['lower_bound'], unit)}, gap {gap:.2%}"
    ]
    if objective == "span" and m["makespan"] != m["value"]:
        parts.append(f"one iteration from time 0 (makespan) {fmt_time(m['makespan'], unit)}")
    if objective == "makespan" and m["span"] != m["value"]:
        parts.append(f"steady state (slowest rank's span) {fmt_time(m['span'], unit)}")
    parts.append(f"bubble rate {m['bubble_rate']:.4f} (idle share of the iteration, mean over ranks)")
    return "; ".join(parts)


def _grid(doc, width: int) -> str:
    """One text row per processor: each column shows the kind of action running at the column's
    midpoint ('.' when idle)."""
    import numpy as np

    from layersched.schedule.graph import parse_action

    span = max((t.start + t.duration for t in doc.tasks), default=1) or 1
    mid = (np.arange(width) + 0.5) * span / width
    pad = max(len(p.name) for p in doc.processors)
    lines = []
    for q, p in enumerate(doc.processors):
        mine = sorted((t for t in doc.tasks if t.processor == q and t.duration > 0), key=lambda t: t.start)
        starts = np.array([t.start for t in mine])
        k = np.searchsorted(starts, mid, side="right") - 1
        row = [
            "." if kk < 0 or mine[kk].start + mine[kk].duration <= x else parse_action(mine[kk].name)[1]
            for kk, x in zip(k.tolist(), mid.tolist(), strict=False)
        ]
        lines.append(f"{p.name:>{pad}} |{''.join(row)}|")
    return "\n".join(lines)


COMMANDS = {
    "solve": cmd_solve,
    "show": cmd_show,
    "validate": cmd_validate,
    "export": cmd_export,
    "preflight": cmd_preflight,
    "schema": cmd_schema,
    "list": cmd_list,
}

if __name__ == "__main__":
    sys.exit(main())
