"""Doctests run over the packages; the modules that import torch only where torch is installed."""

import importlib.util

TORCH_MODULES = [
    "layersched/runtime/*",
    "layersched/run.py",
    "layersched/cli/run.py",
    "layersched/methods/adagrouper/switching.py",
    "layersched/methods/concurrency/executor.py",
    "layersched/methods/ooo/dp_order.py",
    "layersched/methods/ooo/wstream.py",
    "layersched/methods/spectrain/asyncpipe.py",
    "layersched/methods/spectrain/asyncrun.py",
    "tests/layersched/runtime/runner_models.py",
    "tests/layersched/runtime/rank_functions.py",
]
collect_ignore_glob = [] if importlib.util.find_spec("torch") else TORCH_MODULES
# examples/ and benchmarks/ are scripts, not test modules
collect_ignore = ["examples", "benchmarks"]
