"""Where things are, for every test module at any depth: the repository, its data and examples; and
a script of benchmarks/ loaded as a module."""

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PROBLEMS = ROOT / "problems"
EXAMPLES = ROOT / "examples"
BENCHMARKS = ROOT / "benchmarks"


@contextmanager
def benchmark(name: str) -> Iterator:
    """The script ``benchmarks/<name>.py`` as a module, with benchmarks/ on ``sys.path`` while it is
    in use (the scripts import one another: rank_relaxation imports multichunk)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))
