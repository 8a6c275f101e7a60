"""benchmarks/periodic_probe.py: the least period of a periodic schedule, and the schedules it makes."""

import numpy as np
import pytest

from layersched.describe.stages import Pipeline
from tests.paths import benchmark

pytest.importorskip("ortools")

with benchmark("periodic_probe") as PROBE:
    pass


def pipeline(S, ranks, *, F=2, I=2, W=1, transfer=1, m=5, mem=10, freed_by_w=0, capacity=None, placement="loop"):
    ints = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    zero = np.zeros(S, dtype=np.int64)
    return Pipeline(
        "t",
        ranks,
        m,
        ints([F] * S),
        ints([I] * S),
        ints([W] * S),
        ints([transfer] * (S - 1)),
        ints([mem] * S),
        ints([freed_by_w] * S),
        capacity,
        zero,
        zero,
        time_unit="unit",
        memory_unit="unit",
        placement=placement,
    )


def least_period(pipe, per=1, top=40):
    """The least period per micro-batch the model finds feasible, each one below it proven infeasible."""
    for period in range(1, top):
        status, template, _ = PROBE.periodic_model(pipe, period, per, time_limit=10)
        if template is not None:
            return period, template
        assert status == "INFEASIBLE", (period, status)
    raise AssertionError("no period found")


def test_without_memory_pressure_the_period_is_the_busiest_ranks_work():
    """One stage per rank, each rank's F + I + W = 5 and room for every micro-batch in flight: a rank
    can run one micro-batch's passes back to back every 5."""
    pipe = pipeline(3, 3, capacity=None)
    period, template = least_period(pipe)
    assert period == 5
    sol = PROBE.expand(pipe, template, period, 1)  # validated
    assert sol.metrics["value"] <= (pipe.num_microbatches - 1) * period + max(template.values()) + 2


@pytest.mark.parametrize(
    "freed_by_w, least",
    [
        # one activation fits: each micro-batch holds it from F(0)'s start to I(0)'s end, the chain
        # F0 2 + transfer 1 + F1 2 + I1 2 + transfer 1 + I0 2 = 10, so micro-batches follow 10 apart
        (0, 10),
        # W frees 4 of the 10: that part is held until W(0) ends, 11 after F(0)'s start; a period of
        # 10 would hold 4 of the last micro-batch beside all 10 of the next
        (4, 11),
    ],
)
def test_memory_held_for_a_chain_sets_the_period(freed_by_w, least):
    pipe = pipeline(2, 2, mem=10, freed_by_w=freed_by_w, capacity=10)
    period, template = least_period(pipe)
    assert period == least
    PROBE.expand(pipe, template, period, 1)  # validated: the memory limit holds at every time


def test_several_stages_per_rank_and_micro_batches_per_period():
    """Interleaved, 2 ranks with 2 stages each, under 4 stage activations: whatever period is found
    least, with 1 or 2 micro-batches per period, none is shorter than a rank's work and each template
    repeated is a valid schedule of 5 micro-batches."""
    pipe = pipeline(4, 2, mem=10, freed_by_w=3, capacity=40)
    one, template = least_period(pipe)
    assert one >= 10  # a rank's F + I + W for two stages
    PROBE.expand(pipe, template, one, 1)
    status, template, _ = PROBE.periodic_model(pipe, one, 2, time_limit=10)
    assert template is not None, status  # a 1-periodic template repeated twice is one of 2
    PROBE.expand(pipe, template, one, 2)


def test_the_script_prints_its_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(PROBE, "speed", lambda: None)
    monkeypatch.setattr(PROBE, "describe", lambda _: "not measured")
    problem = tmp_path / "p.yaml"
    problem.write_text(
        "name: t\npipeline:\n  stages: 3\n  microbatches: 4\n  forward: 2\n  backward_input: 2\n"
        "  backward_weight: 1\n  transfer: 1\n  memory_forward: 10\n  memory_limit: 50\n"
    )
    PROBE.main([str(problem), "4", "5", "--time-limit", "5"])
    out = capsys.readouterr().out
    assert "works 5 per micro-batch" in out
    rows = [line.split() for line in out.splitlines() if line.strip().split(" ")[0] in ("4", "5")]
    assert rows[0][:2] == ["4", "INFEASIBLE"] and rows[1][1] in ("OPTIMAL", "FEASIBLE")
