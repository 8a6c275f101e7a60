"""benchmarks/machine_speed.py: its CP-SAT workload does the same work every run, so only its wall
time can differ between machines or days."""

import pytest

from solvers.listsched import list_schedule
from solvers.validate import violations
from tests.paths import benchmark


@pytest.fixture(scope="module")
def bench():
    with benchmark("machine_speed") as module:
        yield module


def test_the_cpsat_workload_ends_at_the_same_schedule_each_run_and_not_below_the_work(bench):
    runs = [bench.cpsat_seconds(deterministic=0.05) for _ in range(2)]  # stopped early: 0.5 s each
    values = {value for _, value in runs}
    assert len(values) == 1, f"one worker with a fixed seed and deterministic time gave {sorted(values)}"
    assert values.pop() >= bench.job_shop_lower_bound() > 0
    assert all(seconds > 0 for seconds, _ in runs)


def test_the_job_shop_is_the_same_every_call_and_visits_each_machine_once_per_job(bench):
    jobs = bench.jobs()
    assert jobs == bench.jobs()
    assert len(jobs) == bench.JOBS
    assert all(sorted(m for m, _ in job) == list(range(bench.MACHINES)) for job in jobs)


def test_the_python_workload_is_a_fixed_valid_problem(bench):
    a, b = (bench.random_layered_problem(bench.LAYERED_TASKS) for _ in range(2))
    assert a.num_tasks == bench.LAYERED_TASKS
    assert (a.duration == b.duration).all() and (a.edges == b.edges).all()
    result = list_schedule(a)
    assert result.schedule is not None and not violations(a, result.schedule, limit=1)
    assert bench.python_seconds(a) > 0
    line = bench.describe({"cpsat_s": 2.5, "cpsat_value": [910], "python_s": 0.12, "versions": "Python 3.11.7"})
    assert line == "CP-SAT 2.50 s (ends at 910), Python 120 ms (Python 3.11.7)"
