"""Benchmarks: suites (every template and solver on a list of problems) and experiments.

``layersched bench NAME`` runs the experiment ``layersched/experiments/NAME.py`` when there is one
(its ``run(out_dir, *, quick, progress) -> BenchResult``), else the suite ``problems/suites/NAME.yaml``.
Either way the result is a table on screen, a CSV and a plot.

A suite file (``problems/suites/NAME.yaml``) lists problem files (relative to the suite), optional
memory-limit factors (``2`` means twice the problem's limit, Zero Bubble's "2p"), and the methods:
template names, generic solvers (``list``, ``cpsat``, ...) or ``best``.

Example suite
-------------
.. code-block:: yaml

    name: zero-bubble
    problems:
      - {path: ../zb-1.5b.yaml, memory_factors: [1, 2]}
    methods: [1f1b, zb-h1, best]
    time_limit: 60
"""

from __future__ import annotations

import csv
import importlib
import io
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated

from pydantic import Field

from layersched.describe.config import ProblemSpec, SpecError, Strict, bundled_problems, load_problem, load_spec
from layersched.describe.stages import pipeline_from_spec


@dataclass
class BenchResult:
    """Rows of a benchmark, the columns to show (in order) and the files written."""

    title: str
    rows: list[dict]
    columns: tuple[str, ...]
    files: list[Path] = field(default_factory=list)


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
    from layersched.export import write_text

    if name in experiment_names():
        module = f"layersched.experiments.{name.replace('-', '_')}"
        result = importlib.import_module(module).run(out_dir, quick=quick, progress=progress)
    else:
        path = find_suite(name)
        rows = run_suite(path, time_limit=time_limit, methods=methods, progress=progress)
        png = out_dir / f"{path.stem}.png"
        out_dir.mkdir(parents=True, exist_ok=True)
        plot_rows(rows, png, f"suite {path.stem}: bubble rate per method")
        result = BenchResult(f"suite {path.stem}", rows, COLUMNS, [png])
    csv_path = out_dir / f"{result.title.split()[-1]}.csv"
    write_text(csv_path, rows_to_csv(result.rows, result.columns))
    result.files.insert(0, csv_path)
    return result


def rows_table(result: BenchResult):
    """A rich table of the rows: rates with 4 decimals, gaps as percentages, long text cut."""
    from rich.table import Table

    table = Table(title=result.title)
    for c in result.columns:
        text = c in ("problem", "method", "status", "model", "schedule")
        table.add_column(
            c.replace("_", " "),
            justify="left" if text else "right",
            no_wrap=True,
            max_width=48 if c == "status" else None,
            overflow="ellipsis",
        )
    for r in result.rows:
        table.add_row(*(_cell(c, r.get(c)) for c in result.columns))
    return table


def _cell(column: str, v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and ("rate" in column or column == "published"):
        return f"{v:.4f}"
    if isinstance(v, float) and column == "gap":
        return f"{v:.2%}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


COLUMNS = (
    "problem",
    "memory",
    "method",
    "status",
    "objective",
    "value",
    "bubble_rate",
    "lower_bound",
    "gap",
    "peak_memory",
    "solve_s",
    "published",
)


class SuiteProblem(Strict):
    path: str
    memory_factors: list[Annotated[float, Field(gt=0)]] = [1.0]
    published: dict[str, float] = Field(
        default_factory=dict, description="published bubble rates to print beside ours, by label"
    )


class SuiteSpec(Strict):
    name: str
    description: str = ""
    problems: list[SuiteProblem] = Field(min_length=1)
    methods: list[str] = Field(min_length=1)
    objective: str | None = None
    time_limit: Annotated[float, Field(gt=0)] = 60.0


def find_suite(name_or_path: str) -> Path:
    """A suite by path (any file that exists, or a name ending in .yaml/.yml/.json), else a bundled
    suite by name (``layersched list`` shows them), found from any working directory."""
    path = Path(name_or_path)
    if path.is_file() or path.suffix in (".yaml", ".yml", ".json"):
        if not path.is_file():
            raise SpecError(f"{name_or_path}: no such suite file")
        return path
    known = bundled_suites()
    if name_or_path not in known:
        raise SpecError(
            f"no suite or experiment {name_or_path!r} (suites: {', '.join(known) or 'none'}; experiments: "
            f"{', '.join(experiment_names())}); give one of these names or a path to a suite file"
        )
    return known[name_or_path]


def bundled_suites() -> dict[str, Path]:
    """The suites that ship with layersched, by name."""
    return {p.stem: p for p in sorted((bundled_problems() / "suites").glob("*.yaml"))}


def experiment_names() -> list[str]:
    """The experiments ``bench NAME`` runs (modules of ``layersched.experiments``)."""
    import pkgutil

    import layersched.experiments as ex

    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(ex.__path__) if not m.name.startswith("_"))


def _is_template(name: str) -> bool:
    from layersched.schedule.templates import get_template

    try:
        get_template(name)
    except ValueError:
        return False
    return True


def check_methods(path: Path, methods: list[str]) -> None:
    """`SpecError` naming the first method that is neither a template, a solver nor ``best``."""
    from layersched.schedule.templates import template_names
    from solvers import solver_names

    for m in methods:
        if not (_is_template(m) or m in solver_names() or m == "best"):
            valid = sorted([*template_names(), *solver_names(), "best"])
            raise SpecError(f"{path}: methods: unknown method {m!r}; valid: {', '.join(valid)}")


def run_suite(
    path: Path, *, time_limit: float | None = None, methods: list[str] | None = None, progress=None
) -> list[dict]:
    """Solve every (problem, memory factor, method) of the suite; one row per run. A method that
    cannot apply (template preconditions, memory) gives a row with its reason in ``status``."""
    from layersched.schedule.solve import solve_pipeline
    from layersched.schedule.templates import TemplateError
    from solvers import Deadlock, InvalidSchedule

    suite = load_spec(path, SuiteSpec)
    check_methods(path, methods or suite.methods)
    limit = time_limit or suite.time_limit
    jobs = [(prob, f, m) for prob in suite.problems for f in prob.memory_factors for m in (methods or suite.methods)]
    rows = []
    for k, (prob, factor, method) in enumerate(jobs):
        spec: ProblemSpec = load_problem(path.parent / prob.path)
        pipe = pipeline_from_spec(spec, prob.path)
        if pipe.capacity is not None and factor != 1:
            pipe = replace(pipe, capacity=int(pipe.capacity * factor))
        label = f"{factor:g}x"
        if progress:
            progress(k, len(jobs), f"{spec.name} {label} {method}")
        kw = {"schedule": method} if _is_template(method) else {"solver": method}
        if method in ("best", "cpsat", "lns"):
            kw["time_limit"] = limit
        t0 = time.perf_counter()
        row = {"problem": spec.name, "memory": label, "method": method, "published": prob.published.get(label)}
        try:
            sol = solve_pipeline(pipe, objective=suite.objective, **kw)
        except (TemplateError, InvalidSchedule, Deadlock, RuntimeError) as exc:
            row.update(status=f"n/a: {str(exc).splitlines()[0][:80]}", solve_s=round(time.perf_counter() - t0, 2))
            rows.append(row)
            continue
        m = sol.metrics
        status = sol.result.status if sol.result is not None else "template"
        row.update(
            status=status,
            objective=sol.objective,
            value=m["value"],
            bubble_rate=m["bubble_rate"],
            lower_bound=m["lower_bound"],
            gap=round((m["value"] - m["lower_bound"]) / m["value"], 6),
            peak_memory=max(m["peak_memory"][: pipe.num_ranks]),
            solve_s=round(time.perf_counter() - t0, 2),
        )
        rows.append(row)
    if progress:
        progress(len(jobs), len(jobs), "done")
    return rows


def rows_to_csv(rows: list[dict], columns: tuple[str, ...] | None = None) -> str:
    columns = columns or COLUMNS
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c) for c in columns})
    return buf.getvalue()


def plot_rows(rows: list[dict], path: Path, title: str) -> None:
    """Bubble rate per method, grouped by problem and memory limit (published values as markers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    groups = list(dict.fromkeys((r["problem"], r["memory"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) * max(1, len(methods)) * 0.35 + 3), 4))
    for j, method in enumerate(methods):
        vals = [
            next(
                (r.get("bubble_rate") for r in rows if (r["problem"], r["memory"]) == g and r["method"] == method), None
            )
            for g in groups
        ]
        x = np.arange(len(groups)) + j * width
        ax.bar(x, [v if v is not None else 0 for v in vals], width, label=method)
    pub = [
        next(
            (r["published"] for r in rows if (r["problem"], r["memory"]) == g and r.get("published") is not None), None
        )
        for g in groups
    ]
    if any(p is not None for p in pub):
        xs = [i + 0.4 - width / 2 for i, p in enumerate(pub) if p is not None]
        ax.scatter(xs, [p for p in pub if p is not None], marker="_", s=600, color="black", label="published", zorder=3)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, [f"{p}\n{m}" for p, m in groups], fontsize=8)
    ax.set_ylabel("bubble rate")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    """Write a matplotlib figure to ``path`` (format from its suffix, PNG by default) atomically, and
    close it."""
    import matplotlib.pyplot as plt

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
        tmp.replace(path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
