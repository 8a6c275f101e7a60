"""Doctests run over the packages; the torch runtime's modules only where torch is installed."""

import importlib.util

collect_ignore_glob = (
    []
    if importlib.util.find_spec("torch")
    else ["layersched/runtime/*", "layersched/run.py", "tests/layersched/runner_models.py"]
)
# examples/ and benchmarks/ are scripts, not test modules
collect_ignore = ["examples", "benchmarks"]
