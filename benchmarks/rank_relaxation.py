"""Is the proven bound or the schedule the loose side of a gap? Relaxing all but a few ranks tells.

For a set of ranks of a pipeline row, the *relaxation* keeps those ranks' passes and memory limits,
and gives every other pass a processor of its own with no memory limit: there a pass starts as soon
as its inputs are there. Every schedule of the row is one of the relaxation, with the same spans on
the kept ranks (transfers are paid where they were: an edge between two passes of one rank keeps no
delay). So the relaxation's optimum (its largest span over the kept ranks) is a lower bound of the
row, and every bound that reasons about those ranks alone is at most it: with one rank kept, the
warm-up, cool-down and memory-time bounds of `layersched.schedule.bounds`.

The script searches the relaxation (`solvers.lns.improve_coarse` from torch's order, the search that
reached the bound at p=4) and prints the row's analytical bound, the largest kept span found, and
torch's order's on the same ranks. A span found is an upper bound of the relaxation's optimum: where
it meets the analytical bound, no reasoning about those ranks alone can prove more, and the gap of
the row lies in how the other ranks hold them up. It closes only with better schedules or a bound
over more ranks.

``--complete FILE`` asks the other question: given rank 0's order, how close can the rest come?
Rank 0 is held to that order (`with_order`), and list scheduling then the coarse levels search
the other ranks (`complete`). On the p=6 row, rank 0's order from the near-bound orders of
tests/data is completed to 0.02% in about 10 s, from list scheduling's 4.64%; rank 0's order
from `best`'s 60 s schedule or from torch's order is not (docs/measurements.md, session 35).

``--held FILE`` searches from FILE's orders with rank 0 held except one window of its passes at a
time, the other ranks free (`held_steps`; the windows are given: ``--first``, ``--window``,
``--stride``). From `best`'s p=6 orders, windows from the one at passes 49-78 on reach 1.5% in 9 s,
and sweeps through it with longer steps under 1% in 3-4 minutes; but windows placed a few passes
earlier or later move nothing, and sweeps from other places found nothing in 4 minutes, so `best`
does not run them (docs/measurements.md, session 36).

``--tails FILE`` (or ``torch:P``) measures how far `best`'s tail step can go from FILE's orders: its
widening windows (every rank's passes from its last forward, then its second-last, ...), each
re-solved by CP-SAT for up to ``--time-limit`` seconds with the window's own proven bound
(`tail_windows`). From torch's p=6 order the first four windows are proven optimal, the third and
the fourth at 1.67%: with every rank's passes before its 4th-last forward where the third left them,
nothing is shorter. The fifth window's bound is the row's, and CP-SAT finds nothing in it in 120 s
(docs/measurements.md, session 45).

``--row FILE`` relaxes any row (a problem file with a pipeline, e.g. one that `benchmarks/multichunk.py`
writes) instead of the interleaved rows: the search starts from the best of the templates that fit it
(`best_template`), since torch's order needs m to be a multiple of the ranks. On a memory-tight row
whose gap grows with m (interleaved p=5, m=8, two stages per rank, under 7 activations, transfer
2704) rank 0 alone, and ranks 0 and 4, come within 0.24-0.28% of the bound, where `best` stops 1.66%
above it; on the uneven p=5, m=10 row ranks 0 and 4 end at 3.2-3.8%, no lower than `best` on the
whole row (docs/measurements.md, session 79).

Usage: python benchmarks/rank_relaxation.py [--rows 4,6,8 | --row FILE ...] [--keep 0 --keep 0,-1] [--time-limit 120]
       python benchmarks/rank_relaxation.py --complete FILE [--complete torch:6 ...] [--time-limit 30]
       python benchmarks/rank_relaxation.py --held FILE [--first 49] [--window 30] [--stride 15]
                                            [--step 3] [--rounds 1] [--out FILE]
       python benchmarks/rank_relaxation.py --tails FILE|torch:P [--windows 4] [--time-limit 120]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from multichunk import recut
from rich.console import Console
from rich.table import Table

from layersched.cli.options import positive_float
from layersched.describe.config import SpecError, load_problem
from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import check_output, write_text
from layersched.schedule.bounds import pipeline_bounds
from layersched.schedule.graph import compute_orders
from layersched.schedule.solve import complete_orders, solve_pipeline, task_graph
from layersched.schedule.templates import TemplateError, template_names, template_orders
from solvers import Deadlock, InvalidSchedule, Problem, Schedule
from solvers.listsched import list_schedule
from solvers.lns import improve_coarse
from solvers.simulate import time_orders
from solvers.validate import violations

MICROBATCHES = {4: 8, 6: 12, 8: 24, 16: 48}
"""The interleaved rows, ranks -> micro-batches (3 stages per rank): p=8 is the bundled row, p=4 and
p=6 its re-cuts in benchmarks/multichunk.py, p=16 the held-out re-cut to p=16, m=48 (docs/measurements.md,
"Not yet")."""


def relaxation(problem: Problem, keep: list[int]) -> tuple[Problem, np.ndarray]:
    """The relaxation of ``problem`` (every task bound to one processor) that keeps the processors
    ``keep``, and each task's processor there (``keep[i]``'s tasks on processor ``i``)."""
    fixed = problem.fixed_processor()
    if (fixed < 0).any():
        raise ValueError("the relaxation needs every task bound to one processor")
    if len(set(keep)) != len(keep) or not all(0 <= q < problem.num_processors for q in keep):
        raise ValueError(f"keep: expected distinct processors of 0-{problem.num_processors - 1}, got {keep}")
    kept = np.isin(fixed, keep)
    n, others = problem.num_tasks, np.flatnonzero(~kept)
    proc = np.zeros(n, dtype=np.int64)
    for i, q in enumerate(keep):
        proc[fixed == q] = i
    proc[others] = len(keep) + np.arange(len(others))
    allowed = np.zeros((n, len(keep) + len(others)), dtype=bool)
    allowed[np.arange(n), proc] = True
    capacity = np.full(len(keep) + len(others), np.iinfo(np.int64).max // 4)
    capacity[: len(keep)] = problem.capacity[keep]
    u, v = problem.edges[:, 0], problem.edges[:, 1]
    relaxed = Problem(
        duration=problem.duration,
        allowed=allowed,
        edges=problem.edges,
        delay=np.where(fixed[u] == fixed[v], 0, problem.delay),  # paid where it was paid
        mem_delta=np.where(kept, problem.mem_delta, 0),
        capacity=capacity,
    )
    return relaxed, proc


def with_order(problem: Problem, order: list[int], free: tuple[int, int] | None = None) -> Problem:
    """``problem`` with ``order`` (tasks of one processor) enforced: a zero-delay edge from each task to
    the next. With ``free=(a, b)``, ``order[a:b]`` may run in any order among themselves, after
    ``order[:a]`` and before ``order[b:]``. Its schedules are exactly those of ``problem`` that run
    ``order`` so."""
    if len(set(order)) != len(order) or not all(0 <= t < problem.num_tasks for t in order):
        raise ValueError(f"order: expected distinct tasks of 0-{problem.num_tasks - 1}")
    a, b = free if free is not None else (len(order), len(order))
    if not 0 <= a <= b <= len(order):
        raise ValueError(f"free: expected 0 <= a <= b <= {len(order)}, got {free}")
    pre, window, post = order[:a], order[a:b], order[b:]
    pairs = list(zip(pre, pre[1:], strict=False)) + list(zip(post, post[1:], strict=False))
    if pre:
        pairs += [(pre[-1], t) for t in window] or ([(pre[-1], post[0])] if post else [])
    if post:
        pairs += [(t, post[0]) for t in window]
    chain = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return dataclasses.replace(
        problem,
        edges=np.concatenate([problem.edges, chain]),
        delay=np.concatenate([problem.delay, np.zeros(len(chain), dtype=problem.delay.dtype)]),
    )


def complete(tasks, actions: list[str], time_limit: float, bound: int) -> tuple[Schedule, Schedule]:
    """Rank 0 held to ``actions`` (its compute passes, e.g. ``["0F0", ...]``), the rest searched: list
    scheduling on the row with that order enforced (`with_order`), then `improve_coarse` from it.
    Returns (list scheduling's schedule, the one found), both valid on the row itself; KeyError for a
    pass the row has not, ValueError where no schedule runs rank 0 in that order."""
    fixed = with_order(tasks.problem, [tasks.index[a] for a in actions])
    try:
        start = list_schedule(fixed, objective="span")
    except ValueError as e:  # the order runs a pass before one it needs
        raise ValueError(f"rank 0's order cannot run on this row: {e}") from None
    if start.schedule is None:
        raise ValueError(f"list scheduling found no schedule with that order ({start.status})")
    found, _ = improve_coarse(fixed, start.schedule, objective="span", time_limit=time_limit, bound=bound)
    return start.schedule, found


def best_template(pipe, tasks) -> tuple[str, Schedule]:
    """The template of the least span among those that fit ``pipe`` (memory included) on ``tasks``'
    graph (split backward, the row's placement), each as `solve_pipeline` times and validates it: its
    name and schedule. ValueError where none fits."""
    graphs, found = {(True, tuple(pipe.stage_to_rank())): tasks}, []
    for name in template_names():
        try:
            sol = solve_pipeline(pipe, schedule=name, objective="span", graphs=graphs)
        except (TemplateError, InvalidSchedule, Deadlock):  # it does not apply here, or breaks the limit
            continue
        if sol.tasks is tasks:  # not a fused-backward template, nor one of another placement
            found.append((sol.metrics["value"], name, sol.schedule))
    if not found:
        raise ValueError("no template fits this row (its memory limit, or its micro-batches)")
    _, name, schedule = min(found, key=lambda f: f[:2])
    return name, schedule


def rank_order(tasks, schedule: Schedule, rank: int = 0) -> list[int]:
    """The compute passes of ``rank`` in ``schedule``, in start order (`compute_orders`)."""
    return compute_orders(tasks.problem, schedule, rank + 1)[rank]


def held_steps(
    tasks, schedule: Schedule, bound: int, *, window: int, stride: int, first: int, rounds: int, step: float, log
) -> Schedule:
    """Windows of rank 0's compute passes freed one at a time, the rest of rank 0 held in its order
    (`with_order`), every other rank free: for each window (``window`` passes, from pass ``first``
    every ``stride``, ``rounds`` sweeps) the coarse levels search that problem from the current
    schedule for ``step`` seconds, and what they find replaces it where shorter. ``log(line)`` hears
    of each step. The best schedule; valid on the row. ``first`` must be one of rank 0's passes."""
    problem = tasks.problem
    current, value = schedule, schedule.objective(problem, "span")
    passes = len(rank_order(tasks, current))  # the same in every schedule of the row
    for r in range(rounds):
        for a in range(first, max(first + 1, passes - window // 2), stride):
            order = rank_order(tasks, current)
            b = min(passes, a + window)
            t0 = time.perf_counter()
            found, _ = improve_coarse(
                with_order(problem, order, (a, b)), current, objective="span", time_limit=step, bound=bound
            )
            got = found.objective(problem, "span")
            if got < value and not violations(problem, found, limit=1):
                current, value = found, got
            seconds = time.perf_counter() - t0
            log(f"sweep {r + 1}, passes {a}-{b - 1}: {got:,} ({(got - bound) / got:.2%}), {seconds:.1f} s")
            if value <= bound:
                return current
    return current


def tail_windows(tasks, schedule: Schedule, bound: int, *, time_limit: float, windows: int, log) -> list[dict]:
    """The tail step's widening windows (`layersched.schedule.solve.widening_tails`) from
    ``schedule``, from each rank's last forward on (`best` may start one or two forwards earlier,
    `TAIL_FIRST_TASKS`), each re-solved by CP-SAT (`solvers.cpsat.solve_tails`) for up to
    ``time_limit`` seconds and kept where no worse, as in `best`, but with the time given per window
    and every window up to ``windows`` tried, proven or not. One dict per window: ``k``, ``free`` (passes),
    ``start`` and ``found`` (spans), ``bound`` (the window's own: no schedule that keeps every pass
    before the cuts where it is has a shorter span; at least ``bound``), ``proven``, ``seconds``.
    ``log(row)`` hears of each."""
    from layersched.schedule.solve import widening_tails
    from solvers.cpsat import solve_tails

    problem, cuts, rows = tasks.problem, widening_tails(tasks), []
    current = schedule
    for k in range(windows):
        cut = cuts(current, k)
        if cut is None:
            break
        stats: dict = {}
        t0 = time.perf_counter()
        found, proven = solve_tails(problem, current, cut, time_limit, objective="span", bound=bound, stats=stats)
        before = current.objective(problem, "span")
        if found is not None and not violations(problem, found, limit=1):
            if found.objective(problem, "span") <= before:
                current = found
        rows.append(
            {
                "k": k,
                "free": stats["free"],
                "start": before,
                "found": current.objective(problem, "span"),
                "bound": stats["bound"],
                "proven": proven,
                "seconds": time.perf_counter() - t0,
            }
        )
        log(rows[-1])
    return rows


def _row(tmp: str, p: int):
    """The interleaved row with ``p`` ranks (`MICROBATCHES`), split backward: its pipeline, its task
    graph and its proven bound on the span."""
    return _split_row(pipeline_from_spec(load_problem(recut(Path(tmp), "zb-interleaved-1.5b", p, MICROBATCHES[p]))))


def _split_row(pipe):
    """``pipe``, its split-backward task graph at its placement, and its proven bound on the span."""
    rank = pipe.stage_to_rank()
    return pipe, task_graph(pipe, True, rank), max(pipeline_bounds(pipe, rank, "span").values())


def _file_row(path: Path):
    """``--row FILE``: the row of a problem file with a pipeline, split backward, at its placement: its
    label (the file's name), pipeline, task graph and proven bound on the span; else one line naming
    the file."""
    if not path.is_file():
        raise SystemExit(f"--row {path}: no such file")
    try:
        pipe = pipeline_from_spec(load_problem(path))
    except SpecError as e:  # its message names the file
        raise SystemExit(f"--row {e}") from None
    except ValueError as e:  # not a stage-level pipeline, say
        raise SystemExit(f"--row {path}: {e}") from None
    return path.stem, *_split_row(pipe)


def _ints(text: str) -> list[int]:
    """``"0,-1"`` -> ``[0, -1]``, for argparse."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


def _orders(flag: str, path: Path) -> tuple[list[list[str]], int]:
    """The per-rank ``actions`` of the JSON file ``path`` (a schedule file's, tests/data's) and its
    rank count, one of the rows'; else one line naming ``flag`` and the file."""
    try:
        actions = json.loads(path.read_text())["actions"]
        return actions, _ranks(flag, path, len(actions))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{flag} {path}: expected a JSON file with per-rank 'actions' ({e})") from None


def _ranks(flag: str, path: Path, ranks: int | str) -> int:
    """``ranks`` as one of the rows' rank counts; else one line naming ``flag`` and ``path``."""
    try:
        p = int(ranks)
    except ValueError:
        raise SystemExit(f"{flag} {path}: expected torch:P with P a rank count, got {path}") from None
    if p not in MICROBATCHES:
        raise SystemExit(f"{flag} {path}: {p} ranks; the rows have {', '.join(map(str, MICROBATCHES))}")
    return p


def _given(flag: str, path: Path, tmp: str):
    """The row named by ``path`` and its orders: a JSON file's per-rank ``actions`` (`_orders`), or
    ``torch:P`` for torch's interleaved zero-bubble order of the p=P row. Returns the row's task
    graph, its proven bound, the orders and the rank count."""
    torch = str(path).startswith("torch:")
    actions, p = (None, _ranks(flag, path, str(path)[6:])) if torch else _orders(flag, path)
    pipe, tasks, bound = _row(tmp, p)
    return tasks, bound, template_orders("interleaved-zb", pipe) if torch else actions, p


def _complete(files: list[Path], time_limit: float, console: Console) -> None:
    """``--complete``: for each file, the row of its rank count with rank 0 held to its order."""
    table = Table(title=f"1.5B interleaved rows, rank 0 held to a given order: improve_coarse {time_limit:g} s")
    for col in ("row", "rank 0's order from", "our bound", "list scheduling", "span found", "gap"):
        table.add_column(col, justify="left" if col in ("row", "rank 0's order from") else "right", overflow="fold")
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            tasks, bound, actions, p = _given("--complete", path, tmp)
            t0 = time.perf_counter()
            try:
                start, found = complete(tasks, actions[0], time_limit, bound)
            except KeyError as e:
                raise SystemExit(f"--complete {path}: the p={p} row has no pass {e}") from None
            except ValueError as e:
                raise SystemExit(f"--complete {path}: {e}") from None
            problem = tasks.problem
            if violations(problem, start, limit=1) or violations(problem, found, limit=1):
                raise SystemExit(f"--complete {path}: a schedule it gave is not valid")
            span = found.objective(problem, "span")
            console.print(f"{path.name}: {span:,} against {bound:,} ({time.perf_counter() - t0:.0f} s)")
            table.add_row(
                f"p={p}, m={MICROBATCHES[p]}",
                path.name,
                f"{bound:,}",
                f"{start.objective(problem, 'span'):,}",
                f"{span:,}",
                f"{(span - bound) / span:.2%}",
            )
    console.print(table)
    console.print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


def _timed(flag: str, path: Path, tasks, actions: list[list[str]], p: int) -> Schedule:
    """``actions`` (per-rank orders) timed on the row of ``p`` ranks at their earliest starts; else
    one line naming ``flag`` and ``path``: a pass the row has not, a deadlock, or over the memory."""
    try:
        start = time_orders(tasks.problem, complete_orders(tasks, actions))
    except KeyError as e:
        raise SystemExit(f"{flag} {path}: the p={p} row has no pass {e}") from None
    except ValueError as e:  # a deadlock: an order that runs a pass before one it needs
        raise SystemExit(f"{flag} {path}: its orders cannot run on the row ({e})") from None
    if violations(tasks.problem, start, limit=1):
        raise SystemExit(f"{flag} {path}: its orders break the row's memory limit")
    return start


def _tails(path: Path, args, console: Console) -> None:
    """``--tails``: the tail step's windows (`tail_windows`) from the orders of ``path`` (or torch's)."""
    with tempfile.TemporaryDirectory() as tmp:
        tasks, bound, actions, p = _given("--tails", path, tmp)
    start = _timed("--tails", path, tasks, actions, p)

    def gap(span: int) -> str:
        return f"{span:,} ({(span - bound) / span:.2%})"

    table = Table(
        title=f"p={p}, m={MICROBATCHES[p]} from {path.name}: the tail step's windows, up to {args.time_limit:g} s "
        f"each; the row's bound {bound:,}"
    )
    for col in ("freed from forward", "free passes", "start", "found", "proven", "window's bound", "seconds"):
        table.add_column(col, justify="right")
    log = lambda r: console.print(f"window {r['k']}: {gap(r['found'])}, {r['seconds']:.1f} s")  # noqa: E731
    for r in tail_windows(tasks, start, bound, time_limit=args.time_limit, windows=args.windows, log=log):
        table.add_row(
            f"{r['k'] + 1}. last",
            f"{r['free']:,}",
            gap(r["start"]),
            gap(r["found"]),
            "yes" if r["proven"] else "no",
            gap(r["bound"]),
            f"{r['seconds']:.1f}",
        )
    console.print(table)
    console.print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


def _held(path: Path, args, console: Console) -> None:
    """``--held``: held steps (`held_steps`) from the orders of ``path``, on the row of its rank count."""
    actions, p = _orders("--held", path)
    with tempfile.TemporaryDirectory() as tmp:
        pipe, tasks, bound = _row(tmp, p)
    problem = tasks.problem
    start = _timed("--held", path, tasks, actions, p)
    passes = len(rank_order(tasks, start))
    if args.first >= passes:
        raise SystemExit(f"--first {args.first}: rank 0 has {passes} passes (0-{passes - 1})")
    t0 = time.perf_counter()
    found = held_steps(
        tasks,
        start,
        bound,
        window=args.window,
        stride=args.stride,
        first=args.first,
        rounds=args.rounds,
        step=args.step,
        log=console.print,
    )
    before, after = start.objective(problem, "span"), found.objective(problem, "span")
    table = Table(title=f"held steps on rank 0: windows of {args.window} passes, {args.step:g} s each")
    for col in ("row", "from", "our bound", "start", "found", "gap", "seconds"):
        table.add_column(col, justify="left" if col in ("row", "from") else "right", overflow="fold")
    table.add_row(
        f"p={p}, m={MICROBATCHES[p]}",
        path.name,
        f"{bound:,}",
        f"{before:,} ({(before - bound) / before:.2%})",
        f"{after:,}",
        f"{(after - bound) / after:.2%}",
        f"{time.perf_counter() - t0:.0f}",
    )
    console.print(table)
    console.print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    if args.out:
        orders = [[tasks.names[t] for t in order] for order in compute_orders(problem, found, p)]
        about = f"held steps (benchmarks/rank_relaxation.py --held) from {path.name}: span {after}, bound {bound}"
        write_text(args.out, json.dumps({"about": about, "actions": orders}) + "\n")  # whole or not at all


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=_ints, default=[4, 6, 8], help="interleaved rows by rank count, of 4, 6, 8, 16")
    ap.add_argument(
        "--row",
        metavar="FILE",
        type=Path,
        action="append",
        help="instead of --rows: a problem file with a pipeline (any row), searched from the best template "
        "that fits it (`best_template`); repeatable",
    )
    ap.add_argument(
        "--keep",
        type=_ints,
        action="append",
        help="ranks kept together, e.g. 0,-1 (-1: the last); repeat for more sets (default: 0, the slowest)",
    )
    ap.add_argument("--time-limit", type=positive_float, default=120.0, help="seconds of search per set of ranks")
    ap.add_argument(
        "--complete",
        metavar="FILE",
        type=Path,
        action="append",
        help="instead: hold rank 0 to the order of FILE's first rank (a schedule file's or tests/data's "
        "'actions'; torch:P for torch's interleaved zero-bubble order of the p=P row) and search the rest "
        "of the row with that many ranks (`complete`); repeatable",
    )
    ap.add_argument(
        "--held",
        metavar="FILE",
        type=Path,
        help="instead: held steps from FILE's orders (`held_steps`): windows of rank 0's passes freed one at a "
        "time, the rest of rank 0 held, the other ranks free",
    )
    ap.add_argument(
        "--tails",
        metavar="FILE",
        type=Path,
        help="instead: the tail step's widening windows from FILE's orders (torch:P for torch's order of the "
        "p=P row), each re-solved by CP-SAT for up to --time-limit seconds, with its own proven bound (`tail_windows`)",
    )
    ap.add_argument("--windows", type=int, default=4, help="--tails: windows to try (default 4)")
    ap.add_argument("--window", type=int, default=30, help="--held: passes of rank 0 per window (default 30)")
    ap.add_argument("--stride", type=int, default=15, help="--held: passes from one window to the next (default 15)")
    ap.add_argument("--first", type=int, default=19, help="--held: the first window's first pass (default 19)")
    ap.add_argument("--rounds", type=int, default=1, help="--held: sweeps over rank 0 (default 1)")
    ap.add_argument("--step", type=positive_float, default=3.0, help="--held: seconds per window (default 3)")
    ap.add_argument("--out", type=Path, help="--held: write the orders found there (JSON, per-rank 'actions')")
    args = ap.parse_args()
    console = Console(width=160)  # whole rows also when written to a file
    if args.held:
        for name in ("window", "stride", "rounds"):
            if getattr(args, name) < 1:
                raise SystemExit(f"--{name}: expected a positive count, got {getattr(args, name)}")
        if args.first < 0:
            raise SystemExit(f"--first: expected a pass number of 0 or more, got {args.first}")
        if args.out:
            try:
                check_output(args.out)  # before the search, not after it
            except ValueError as e:
                raise SystemExit(f"--out: {e}") from None
        _held(args.held, args, console)
        return
    if args.complete:
        _complete(args.complete, args.time_limit, console)
        return
    if args.tails:
        if args.windows < 1:
            raise SystemExit(f"--windows: expected a positive count, got {args.windows}")
        _tails(args.tails, args, console)
        return
    sets = args.keep or [[0]]
    given_rows = [_file_row(path) for path in args.row or []]  # every file checked before any search
    start_from = "the best template" if given_rows else "torch's order"
    table = Table(title=f"rows relaxed to a few ranks: improve_coarse {args.time_limit:g} s from {start_from}")
    for col in ("row", "kept", "our bound", "span found", start_from, "found / bound"):
        table.add_column(col, justify="right" if col != "row" else "left")
    with tempfile.TemporaryDirectory() as tmp:
        if not given_rows:
            for p in args.rows:
                if p not in MICROBATCHES:
                    raise SystemExit(f"--rows: {p} is not one of the rows ({', '.join(map(str, MICROBATCHES))})")
        rows = given_rows or [(f"p={p}, m={MICROBATCHES[p]}", *_row(tmp, p)) for p in args.rows]
        for label, pipe, tasks, bound in rows:
            problem, p = tasks.problem, pipe.num_ranks
            if given_rows:
                try:
                    name, origin = best_template(pipe, tasks)
                except ValueError as e:
                    raise SystemExit(f"--row {label}: {e}") from None
                label = f"{label} ({name})"
            else:
                origin = time_orders(problem, complete_orders(tasks, template_orders("interleaved-zb", pipe)))
            for given in sets:
                if not all(-p <= q < p for q in given):
                    raise SystemExit(f"--keep {given}: the p={p} row has ranks 0-{p - 1} (or -1 to -{p})")
                keep = sorted({q % p for q in given})
                relaxed, proc = relaxation(problem, keep)
                start = time_orders(relaxed, Schedule(processor=proc, start=origin.start).orders(relaxed))
                t0 = time.perf_counter()
                found, _ = improve_coarse(relaxed, start, objective="span", time_limit=args.time_limit, bound=bound)
                if violations(relaxed, found, limit=1):  # improve_coarse keeps valid schedules only
                    raise SystemExit(f"{label}, ranks {keep}: the schedule found is not valid")
                span = int(found.spans(relaxed)[: len(keep)].max())  # the kept ranks are processors 0 .. len(keep)-1
                table.add_row(
                    label,
                    ",".join(map(str, keep)),
                    f"{bound:,}",
                    f"{span:,}",
                    f"{int(origin.spans(problem)[keep].max()):,}",
                    f"{span / bound:.4f}",
                )
                console.print(f"{label}, ranks {keep}: {span:,} against {bound:,} ({time.perf_counter() - t0:.0f} s)")
    console.print(table)
    console.print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
