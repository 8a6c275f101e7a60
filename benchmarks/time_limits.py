"""Does ``--time-limit`` hold for the whole command? Two tables.

1. Seconds per task of each step around a solver (`layersched.schedule.budget.SECONDS_PER_TASK`
   holds the slowest rate seen here, rounded up): the task graph, a fixed-pattern template, the
   greedy template, list scheduling, the schedule file.
2. Wall time of ``layersched solve --solver S --time-limit L`` as a subprocess (Python start,
   imports and reading the problem included), for every solver, against ``L + SETUP_SECONDS``.

Usage: python benchmarks/time_limits.py [--runs 3] [--microbatches 64 256 1024] [--limits 10 30]
(64 stages each; about 15 minutes with the defaults on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import save_json, schedule_file
from layersched.schedule.budget import SECONDS_PER_TASK, SETUP_SECONDS
from layersched.schedule.solve import solve_pipeline, task_graph
from solvers import get_solver

STAGES = 64


def spec(m: int) -> dict:
    return {
        "name": f"p{STAGES}x{m}",
        "pipeline": {"stages": STAGES, "microbatches": m, "forward": 2, "backward_input": 2, "backward_weight": 1,
                     "transfer": 1},
    }  # fmt: skip


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def step_rates(ms: list[int], runs: int, console: Console) -> None:
    table = Table(title="seconds per task (µs), min / median / max over runs; budget rate in brackets")
    table.add_column("tasks", justify="right")
    for step in ("graph", "template", "greedy", "list", "write"):
        table.add_column(f"{step} [{SECONDS_PER_TASK[step] * 1e6:.0f}]", justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        for m in ms:
            pipe = pipeline_from_spec(ProblemSpec.model_validate(spec(m)))
            cols: dict[str, list[float]] = {k: [] for k in ("graph", "template", "greedy", "list", "write")}
            n = 0
            for _ in range(runs):
                graphs: dict = {}
                dt, tasks = timed(lambda: task_graph(pipe, True, pipe.stage_to_rank(), graphs))  # noqa: B023
                n = tasks.problem.num_tasks
                cols["graph"].append(dt)
                dt, sol = timed(lambda: solve_pipeline(pipe, schedule="ooo", graphs=graphs))  # noqa: B023
                cols["template"].append(dt)
                cols["greedy"].append(timed(lambda: solve_pipeline(pipe, schedule="zb-greedy", graphs=graphs))[0])  # noqa: B023
                cols["list"].append(timed(lambda: get_solver("list")(tasks.problem, objective="span"))[0])  # noqa: B023
                out = Path(tmp) / "s.json"
                cols["write"].append(timed(lambda: save_json(schedule_file(sol), out))[0])  # noqa: B023
            table.add_row(f"{n:,}", *(spread([x / n * 1e6 for x in cols[k]]) for k in cols))
    console.print(table)


def command_walls(ms: list[int], limits: list[float], runs: int, console: Console) -> None:
    title = f"solve --time-limit L: wall seconds (min / median / max of {runs}), allowance {SETUP_SECONDS:g} s"
    table = Table(title=title)
    for col in ("problem", "solver", "L", "wall", "within L + allowance", "outcome"):
        table.add_column(col)
    with tempfile.TemporaryDirectory() as tmp:
        for m in ms:
            path = Path(tmp) / f"p{m}.json"
            path.write_text(json.dumps(spec(m)))
            for limit in limits:
                for solver in ("best", "list", "heft", "lns", "cpsat"):
                    walls, outcome = [], ""
                    for _ in range(runs):
                        cmd = [sys.executable, "-m", "layersched.cli", "solve", str(path), "--solver", solver,
                               "--time-limit", f"{limit:g}", "--out", str(Path(tmp) / "s.json"), "--quiet"]  # fmt: skip
                        dt, r = timed(lambda: subprocess.run(cmd, capture_output=True, text=True))  # noqa: B023
                        walls.append(dt)
                        outcome = "schedule written" if r.returncode == 0 else r.stderr.strip().splitlines()[-1][:90]
                    ok = max(walls) <= limit + SETUP_SECONDS
                    table.add_row(f"{STAGES}x{m}", solver, f"{limit:g}", spread(walls), "yes" if ok else "NO", outcome)
                    console.print(f"  {STAGES}x{m} {solver} L={limit:g}: {spread(walls)}")
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--microbatches", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--limits", type=float, nargs="+", default=[10, 30])
    ap.add_argument("--walls", type=int, nargs="*", default=[1024, 4096], help="micro-batches for the wall table")
    args = ap.parse_args()
    console = Console(width=200)
    cpu = platform.processor() or platform.machine()
    console.print(f"machine: {platform.node()}, {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    step_rates(args.microbatches, args.runs, console)
    command_walls(args.walls, args.limits, args.runs, console)


if __name__ == "__main__":
    main()
