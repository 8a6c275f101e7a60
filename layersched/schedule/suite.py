"""Benchmark suites: every template and solver on a list of problems, one row per run.

``layersched bench NAME`` (`layersched.cli.bench`) runs a method's experiment or a suite; this module
runs suites. The bundled ones ship with the package (``problems/suites/`` in the repository).

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

import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from layersched.describe.config import (
    NoBool,
    ProblemSpec,
    SpecError,
    Strict,
    bundled_problems,
    load_problem,
    load_spec,
    read_data,
)

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
    """A problem of a suite: its file (relative to the suite file), the memory limits to run it under
    (factors of its own), and published figures to print beside ours. A plain path is short for
    ``{path: ...}``."""

    path: str
    memory_factors: list[Annotated[float, Field(gt=0), NoBool]] = [1.0]
    published: dict[str, Annotated[float, NoBool]] = Field(
        default_factory=dict, description="published bubble rates to print beside ours, by label"
    )

    @model_validator(mode="before")
    @classmethod
    def _a_path_alone(cls, data):
        return {"path": data} if isinstance(data, str) else data


class SuiteSpec(Strict):
    name: str
    description: str = ""
    problems: list[SuiteProblem] = Field(min_length=1)
    methods: list[str] = Field(min_length=1)
    objective: str | None = None
    time_limit: Annotated[float, Field(gt=0), NoBool] = 60.0


def find_suite(name_or_path: str) -> Path:
    """A suite by path (any file that exists, or a name ending in .yaml/.yml/.json), else a bundled
    suite by name (`bundled_suites`), found from any working directory."""
    path = Path(name_or_path)
    if path.is_file() or path.suffix in (".yaml", ".yml", ".json"):
        if not path.is_file():
            raise SpecError(f"{name_or_path}: no such suite file")
        return path
    known = bundled_suites()
    if name_or_path not in known:
        raise SpecError(
            f"no suite {name_or_path!r} (bundled: {', '.join(known) or 'none'}); give a path to a suite file"
        )
    return known[name_or_path]


def bundled_suites() -> dict[str, Path]:
    """The suites that ship with layersched, by name."""
    return {p.stem: p for p in sorted((bundled_problems() / "suites").glob("*.yaml"))}


def _is_template(name: str) -> bool:
    from layersched.schedule.templates import get_template

    try:
        get_template(name)
    except ValueError:
        return False
    return True


def _is_peer(name: str) -> bool:
    """Another tool's schedule (``torch:<name>``), given to `run_suite` as a peer."""
    return name.startswith("torch:")


def check_methods(path: Path, methods: list[str], peers: dict | None = None) -> None:
    """`SpecError` naming the first method that is neither a template, a solver, ``best`` nor a peer
    (one of ``peers`` when given, else any ``torch:<name>``: what torch knows is checked where torch is)."""
    from layersched.schedule.templates import template_names
    from solvers import solver_names

    for m in methods:
        if not (_is_template(m) or m in solver_names() or (m in peers if peers else _is_peer(m))):
            valid = sorted({*template_names(), *solver_names(), *(peers or {})})
            raise SpecError(f"{path}: methods: unknown method {m!r}; valid: {', '.join(valid)}")


def run_suite(
    path: Path,
    *,
    time_limit: float | None = None,
    methods: list[str] | None = None,
    progress=None,
    peers: dict | None = None,
) -> list[dict]:
    """Solve every (problem, memory factor, method) of the suite; one row per run. A method that
    cannot apply (template preconditions, memory) gives a row with its reason in ``status``.

    ``peers`` maps a method name to a function of the pipeline that gives another tool's schedule
    as (per-rank compute orders, split backward, stage-to-rank), e.g. torch's schedules
    (`layersched.runtime.torch_orders.peers`); its `TemplateError` is the reason it does not apply.
    Peers are timed and validated like templates. A suite that names a peer not given gets a row
    saying so."""
    from layersched.schedule.cuts import starting_pipeline
    from layersched.schedule.solve import solve_orders, solve_pipeline
    from layersched.schedule.templates import TemplateError
    from solvers import Deadlock, InvalidSchedule

    data = read_data(path)
    if isinstance(data, dict) and "problems" not in data and ({"pipeline", "model"} & set(data)):
        raise SpecError(
            f"{path}: a problem file, not a suite; solve it with 'layersched solve', or name it under a suite "
            "file's problems: (see problems/suites/)"
        )
    suite = load_spec(path, SuiteSpec, data)
    peers = peers or {}
    methods = methods or suite.methods
    check_methods(path, methods, peers)  # without torch (no peers) a torch method's row says what it needs
    limit = time_limit or suite.time_limit
    jobs = [(prob, f, m) for prob in suite.problems for f in prob.memory_factors for m in methods]
    rows = []
    for k, (prob, factor, method) in enumerate(jobs):
        spec: ProblemSpec = load_problem(path.parent / prob.path)
        pipe = starting_pipeline(spec, prob.path)
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
            if _is_peer(method):
                if method not in peers:
                    raise TemplateError(f"{method} needs torch: pip install 'layersched[torch]'")
                orders, split, stage_to_rank = peers[method](pipe)
                sol = solve_orders(
                    pipe,
                    orders,
                    split_backward=split,
                    stage_to_rank=stage_to_rank,
                    method=method,
                    objective=suite.objective,
                )
            else:
                sol = solve_pipeline(pipe, objective=suite.objective, **kw)
        except (TemplateError, InvalidSchedule, Deadlock, RuntimeError) as exc:
            row.update(status=f"n/a: {str(exc).splitlines()[0][:80]}", solve_s=round(time.perf_counter() - t0, 2))
            rows.append(row)
            continue
        if sol.info.get("interrupted"):
            raise KeyboardInterrupt  # Ctrl-C: no table of half-finished runs
        m = sol.metrics
        status = sol.result.status if sol.result is not None else ("peer" if _is_peer(method) else "template")
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
