"""Solvers by name. A solver is a plain function ``solver(problem, /, **options) -> Result``.

`solve` looks the name up, runs it and passes the schedule through `validate` before returning, so
no caller ever sees an unchecked schedule.

Example
-------
>>> from solvers import Problem, solve
>>> solve(Problem(duration=[1, 2], num_processors=2), "list").objective
2
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from solvers.problem import Problem, Result
from solvers.validate import validate

# name -> "module:function"; modules are imported on first use (cpsat needs ortools)
_SOLVERS: dict[str, str] = {
    "list": "solvers.listsched:list_schedule",
    "heft": "solvers.listsched:heft",
    "cpop": "solvers.heuristics:cpop",
    "peft": "solvers.heuristics:peft",
    "fcp": "solvers.heuristics:fcp",
    "best": "solvers.heuristics:best",
    "cpsat": "solvers.cpsat:cpsat",
    "lns": "solvers.lns:cpsat_lns",
    "ils": "solvers.ils:ils",
}


def solver_names() -> list[str]:
    return sorted(_SOLVERS)


def register(name: str, target: str | Callable) -> None:
    """Add a solver under ``name``: a function or a ``"module:function"`` string."""
    _SOLVERS[name] = target  # type: ignore[assignment]


def get_solver(name: str) -> Callable[..., Result]:
    """The solver function called ``name``; ``ValueError`` listing the valid names otherwise."""
    try:
        target = _SOLVERS[name]
    except KeyError:
        raise ValueError(f"unknown solver {name!r}; valid: {', '.join(solver_names())}") from None
    if callable(target):
        return target
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def solve(problem: Problem, solver: str = "list", /, **options) -> Result:
    """Run the solver called ``solver`` and validate its schedule."""
    result = get_solver(solver)(problem, **options)
    if result.schedule is not None:
        validate(problem, result.schedule)
    return result
