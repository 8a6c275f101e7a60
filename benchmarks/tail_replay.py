"""Replay one window of `best`'s tail step under other CP-SAT settings, from where `best` began it.

`best`'s tail step (`solvers.lns.improve_tails`; docs/design.md, step 3a) re-solves every rank's
passes from its k-th last forward on, with the rest held. What a window finds in its seconds varies
a lot from run to run, so a change to the step is best judged first on the window itself, many
times, from one start. This script runs `best` on a problem file (``--time-limit`` as `solve`'s)
until its tail step begins, keeps that step's input (the schedule and the proven bound), and then
re-solves the chosen windows from it (`solvers.cpsat.solve_tails`), once per seed and setting:

- ``--subsolvers all`` is CP-SAT's portfolio as `best` runs it: with 2 workers, one full-problem
  subsolver (``default_lp``) and, on the other thread, interleaved neighbourhoods;
  ``scheduling`` leaves out those that know nothing of intervals (`GENERIC_SUBSOLVERS`);
- ``--skews 0,2`` replays each window as `widening_tails` cuts it with each skew (how many forwards
  deeper the rank holding the last stage is cut; by default `best`'s for the row: `TAIL_SKEW`,
  `TAIL_SKEW_WIDE` from 9 ranks on, none below 7 or in a V);
- ``--hints on,off`` replays each window with `best`'s hint (the schedule it starts from) and/or
  without it (`solvers.cpsat.solve_tails`' ``hint=False``, as `best` searches the first half of a
  wide window; `layersched.schedule.solve.TAIL_UNHINTED_TASKS`);
- ``--parameters '{"use_dynamic_precedence_in_disjunctive": true}'`` sets more of CP-SAT's
  parameters, by name (a JSON object; `solvers.cpsat.solve_tails`' ``parameters``) in every replay,
  for a setting `best` does not use (session 67 tried branching on precedences this way);
- ``--first`` solves window 0 first (as `best` cuts it, whatever ``--skews`` says; all subsolvers,
  seed 0, up to ``--seconds``; `best` would also give it a second of CP-SAT's fixed search first)
  and replays the others from its schedule.

It prints one row per window, seed and setting: the span it started from and the span found (with
their gaps to the row's bound), the window's own bound, whether it was proven, the seconds, and how
many solutions each subsolver found (from CP-SAT's log). Session 55's replays used it
(docs/measurements.md).

Usage: python benchmarks/tail_replay.py PROBLEM.yaml [--windows 0,2] [--seconds 15] [--seeds 0,1,2]
                                         [--subsolvers all,scheduling] [--skews 0,2] [--hints on,off]
                                         [--parameters JSON] [--first]
                                         [--time-limit 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from collections import Counter
from itertools import product
from pathlib import Path

from rich.console import Console
from rich.table import Table

import solvers.lns
from layersched.cli.options import non_negative_float, positive_float, whole_number
from layersched.describe.config import SpecError, load_problem
from layersched.describe.stages import pipeline_from_spec
from layersched.schedule import solve
from layersched.schedule.solve import TAIL_FIRST_TASKS, NoScheduleError, solve_pipeline, widening_tails
from solvers import Problem, Schedule
from solvers.cpsat import set_parameters, solve_tails
from solvers.validate import violations

GENERIC_SUBSOLVERS = [
    "graph_arc_lns", "graph_cst_lns", "graph_dec_lns", "graph_var_lns", "rnd_cst_lns", "rnd_var_lns",
    "rins/rens", "feasibility_pump", "ls",
]  # fmt: skip
"""CP-SAT's subsolvers (as its log names them) that know nothing of intervals: neighbourhoods of
random or graph-connected variables and constraints, relaxation-induced ones, the feasibility pump and
local search. ``--subsolvers scheduling`` leaves them out."""

SUBSOLVERS = {"all": [], "scheduling": GENERIC_SUBSOLVERS}


class _Captured(Exception):
    """Raised in place of the tail step, once its input is kept."""


def capture(path: Path, time_limit: float) -> dict | None:
    """`best` on the problem file ``path`` with ``time_limit`` seconds, stopped where its tail step
    would begin: the step's ``problem``, its starting ``schedule``, the proven ``bound``, the
    ``objective``, the step's window ``cuts`` (a function of a schedule and a window's index, as
    `layersched.schedule.solve.widening_tails` gives it), its ``tasks`` and the windows' ``skew``.
    None where `best` ended without a tail step (it proved its schedule optimal before, or the time was
    too short)."""
    kept: dict = {}

    def instead(problem, schedule, cut, **kw):
        kept.update(problem=problem, schedule=schedule, cuts=cut, bound=kw["bound"], objective=kw["objective"])
        raise _Captured

    def windows(tasks, first_tasks=0, skew=0.0):
        kept.update(tasks=tasks, skew=skew)  # the task graph, for windows of another skew, and `best`'s skew
        return real_windows(tasks, first_tasks, skew)

    real, real_windows = solvers.lns.improve_tails, solve.widening_tails
    solvers.lns.improve_tails = instead  # `best` imports it from there when it searches
    solve.widening_tails = windows
    try:
        solve_pipeline(pipeline_from_spec(load_problem(path)), solver="best", time_limit=time_limit)
    except _Captured:
        pass
    finally:
        solvers.lns.improve_tails, solve.widening_tails = real, real_windows
    return kept or None


def replay(
    problem: Problem,
    schedule: Schedule,
    cut,
    seconds: float,
    *,
    objective: str,
    bound: int,
    seed: int,
    ignore: list[str],
    hint: bool = True,
    parameters: dict | None = None,
) -> dict:
    """One window (per-rank ``cut``) re-solved from ``schedule`` for ``seconds`` with CP-SAT's
    ``seed`` and the subsolvers ``ignore`` left out (and ``schedule`` not given as the hint, with
    ``hint=False``; with more of CP-SAT's ``parameters`` where given, as `_parameters` reads them):
    ``found`` (the span found, or the start's where CP-SAT found nothing better), ``schedule``,
    ``free``, ``bound`` (the window's own), ``proven``, ``seconds``, and ``solutions`` (a Counter of
    the subsolvers that found each one, from the log)."""
    lines: list[str] = []
    stats: dict = {}
    t0 = time.perf_counter()
    found, proven = solve_tails(
        problem, schedule, cut, seconds, objective=objective, bound=bound, stats=stats,
        parameters={**(parameters or {}), "random_seed": seed, "ignore_subsolvers": ignore}, log=lines.append,
        hint=hint,
    )  # fmt: skip
    took = time.perf_counter() - t0
    if (
        found is None
        or violations(problem, found, limit=1)
        or found.objective(problem, objective) > schedule.objective(problem, objective)
    ):
        found = schedule
    return {
        "found": found.objective(problem, objective),
        "schedule": found,
        "free": stats["free"],
        "bound": stats["bound"],
        "proven": proven,
        "seconds": took,
        "solutions": found_by(lines),
    }


def found_by(lines: list[str]) -> Counter:
    """How many solutions each CP-SAT subsolver found, from CP-SAT's search log ``lines``: a solution's
    line is "#7  7.10s best:3477236 next:[3468051,3477235] scheduling_resource_windows_lns (d=...)"; the
    name is kept without "_lns" and without what follows it in brackets."""
    solution = (re.match(r"#\d+\s+\S+\s+best:\S+\s+next:\S+\s+([^\s(]+)", line) for line in lines)
    return Counter(m.group(1).removesuffix("_lns") for m in solution if m)


def _windows(text: str) -> list[int]:
    """``"0,2"`` -> ``[0, 2]``: window indices, 0 or more."""
    return [whole_number(x, least=0) for x in text.split(",")]


def _seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``: CP-SAT's ``random_seed`` is a 32-bit signed integer."""
    return [whole_number(x, least=0, most=2**31 - 1) for x in text.split(",")]


def _skews(text: str) -> list[float]:
    """``"0,2"`` -> ``[0.0, 2.0]``: `widening_tails`'s ``skew``, finite, 0 or more."""
    return [non_negative_float(x) for x in text.split(",")]


def _words(text: str, valid, what: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``, each one of ``valid`` (else one line naming ``what`` it is)."""
    words = text.split(",")
    for word in words:
        if word not in valid:
            raise argparse.ArgumentTypeError(f"unknown {what} {word!r}; valid: {', '.join(valid)}")
    return words


def _hints(text: str) -> list[bool]:
    """``"on,off"`` -> ``[True, False]``: with `best`'s hint, without it."""
    return [word == "on" for word in _words(text, ("on", "off"), "hint setting")]


def _settings(text: str) -> list[str]:
    return _words(text, SUBSOLVERS, "setting")


OWN_PARAMETERS = {"random_seed": "--seeds", "ignore_subsolvers": "--subsolvers"}
"""CP-SAT parameters that other options set, and the option that sets each."""


def _parameters(text: str) -> dict:
    """``'{"use_dynamic_precedence_in_disjunctive": true}'`` -> that dict: CP-SAT parameters by name,
    each a field of its ``SatParameters`` with a value it takes (else one line saying which and why);
    not those another option sets (`OWN_PARAMETERS`)."""
    from ortools.sat import sat_parameters_pb2

    try:
        given = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e.msg}): {text!r}") from None
    if not isinstance(given, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object of CP-SAT parameters by name, got {text!r}")
    fields = sat_parameters_pb2.SatParameters.DESCRIPTOR.fields_by_name
    for name, value in given.items():
        if name in OWN_PARAMETERS:
            raise argparse.ArgumentTypeError(f"{name}: set by {OWN_PARAMETERS[name]}")
        if name not in fields:
            raise argparse.ArgumentTypeError(f"{name}: not one of CP-SAT's parameters (ortools' SatParameters)")
        try:  # on a scratch message, as `solve_tails` will set it
            set_parameters(sat_parameters_pb2.SatParameters(), {name: value})
        except (TypeError, ValueError, AttributeError) as e:
            raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a value it takes ({e})") from None
    return given


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", type=Path, help="a problem file (problems/*.yaml, or a row multichunk.py writes)")
    ap.add_argument("--windows", type=_windows, default=[0], help="windows to replay, 0 the first (default 0)")
    ap.add_argument("--seconds", type=positive_float, default=15.0, help="seconds per window (default 15)")
    ap.add_argument("--seeds", type=_seeds, default=[0, 1, 2], help="CP-SAT seeds, one replay each (default 0,1,2)")
    ap.add_argument(
        "--subsolvers", type=_settings, default=["all"], help="all (CP-SAT's portfolio) and/or scheduling (default all)"
    )
    ap.add_argument(
        "--skews",
        type=_skews,
        default=None,
        help="the windows' skew (`widening_tails`; how many forwards deeper the rank of the last stage is cut), "
        "one replay each (default: the one `best` uses on this row)",
    )
    ap.add_argument(
        "--hints",
        type=_hints,
        default=[True],
        help="on (the hint: the schedule the window starts from) and/or off (default on)",
    )
    ap.add_argument(
        "--parameters",
        type=_parameters,
        default={},
        help="more CP-SAT parameters for every replay, a JSON object by name, e.g. "
        "'{\"use_dynamic_precedence_in_disjunctive\": true}' (default none)",
    )
    ap.add_argument("--first", action="store_true", help="solve window 0 first and replay the others from its schedule")
    ap.add_argument(
        "--time-limit",
        type=positive_float,
        default=60.0,
        help="seconds of the `best` run whose tail step is replayed (default 60)",
    )
    args = ap.parse_args()
    if not args.problem.is_file():
        raise SystemExit(f"{args.problem}: no such file")
    console = Console(width=200)
    try:
        kept = capture(args.problem, args.time_limit)
    except SpecError as e:  # its message names the file
        raise SystemExit(str(e)) from None
    except (ValueError, NoScheduleError) as e:
        raise SystemExit(f"{args.problem}: {e}") from None
    if kept is None:
        raise SystemExit(f"{args.problem}: `best` ended before its tail step (proven, or too little time)")
    problem, start, bound, objective = kept["problem"], kept["schedule"], kept["bound"], kept["objective"]

    def gap(value: int) -> str:
        return f"{value:,} ({(value - bound) / value:.2%})"

    console.print(f"{args.problem.name}: the tail step starts at {gap(start.objective(problem, objective))}")
    if args.first:
        first = replay(problem, start, kept["cuts"](start, 0), args.seconds, objective=objective, bound=bound, seed=0,
                       ignore=[], parameters=args.parameters)  # fmt: skip
        start = first["schedule"]
        console.print(f"window 0 first: {gap(first['found'])}, proven: {first['proven']}, {first['seconds']:.1f} s")
    extra = f"; CP-SAT parameters {json.dumps(args.parameters)}" if args.parameters else ""
    table = Table(
        title=f"{args.problem.name}: tail windows replayed, {args.seconds:g} s each; the bound {bound:,}{extra}"
    )
    columns = ("window", "skew", "free", "subsolvers", "hint", "seed", "start", "found", "window's bound", "proven",
               "s")  # fmt: skip
    for col in (*columns, "solutions"):
        table.add_column(col, justify="left" if col in ("subsolvers", "solutions") else "right", overflow="fold")
    began = gap(start.objective(problem, objective))  # every window replays from this schedule
    for k in args.windows:
        for skew in args.skews or [kept["skew"]]:
            cut = widening_tails(kept["tasks"], TAIL_FIRST_TASKS, skew)(start, k)
            if cut is None:
                raise SystemExit(f"--windows: the row has no window {k} (a rank has too few forwards)")
            for setting, hint, seed in product(args.subsolvers, args.hints, args.seeds):
                r = replay(problem, start, cut, args.seconds, objective=objective, bound=bound, seed=seed,
                           ignore=SUBSOLVERS[setting], hint=hint, parameters=args.parameters)  # fmt: skip
                said = f"window {k}, skew {skew:g}, {setting}, hint {'on' if hint else 'off'}, seed {seed}"
                console.print(f"{said}: {gap(r['found'])} in {r['seconds']:.1f} s")
                table.add_row(
                    str(k), f"{skew:g}", f"{r['free']:,}", setting, "on" if hint else "off", str(seed), began,
                    gap(r["found"]), gap(r["bound"]), "yes" if r["proven"] else "no", f"{r['seconds']:.1f}",
                    ", ".join(f"{name} {n}" for name, n in r["solutions"].most_common()),
                )  # fmt: skip
    console.print(table)
    console.print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
