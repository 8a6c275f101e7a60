"""Where things are, for every test module at any depth: the repository, its data and examples."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PROBLEMS = ROOT / "problems"
EXAMPLES = ROOT / "examples"
