"""The scripts in examples/ run as their docstrings say (they are there to be copied, so they must work)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import ROOT


def test_run_pipeline_example_profiles_schedules_runs_and_compares(tmp_path):
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_pipeline.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    losses = next(line for line in lines if line.startswith("losses: "))
    assert len(losses.removeprefix("losses: ").strip("[]").split(",")) == 10
    assert any(line.startswith("iteration") for line in lines)
    assert (tmp_path / "schedule.json").exists() and (tmp_path / "run-trace.chrome.json").exists()
