"""The `solvers` package stands alone: no layersched, pydantic or torch, and ortools only on demand."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_solvers_imports_no_layersched_pydantic_or_torch():
    run(
        "import solvers, solvers.listsched, solvers.cpsat, solvers.lns, sys; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('layersched', 'pydantic', 'torch')]; "
        "assert not bad, bad"
    )


def test_ortools_is_imported_only_by_cpsat():
    run(
        "import solvers, solvers.listsched, sys; from solvers import solve, Problem; "
        "solve(Problem(duration=[1, 2], num_processors=2), 'heft'); "
        "assert 'ortools' not in sys.modules; "
        "import solvers.cpsat; assert 'ortools' in sys.modules"
    )


def test_only_cpsat_imports_ortools():
    pattern = re.compile(r"^\s*(from|import)\s+ortools", re.MULTILINE)
    users = sorted(p.name for p in (ROOT / "solvers").rglob("*.py") if pattern.search(p.read_text()))
    assert users == ["cpsat.py"], users
