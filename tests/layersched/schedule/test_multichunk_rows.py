"""benchmarks/multichunk.py: the rows `--rows random` draws, and its verdict against the peers."""

import pytest

from layersched.describe.config import load_problem
from layersched.describe.stages import pipeline_from_spec
from tests.paths import benchmark


@pytest.fixture(scope="module")
def bench():
    with benchmark("multichunk") as module:
        yield module


def test_random_rows_are_distinct_rows_of_the_two_kinds_and_the_same_for_a_seed(bench, tmp_path):
    for sub in "abc":
        (tmp_path / sub).mkdir()
    first = bench.random_rows(tmp_path / "a", seed=3, count=10)
    again = bench.random_rows(tmp_path / "b", seed=3, count=10)
    other = bench.random_rows(tmp_path / "c", seed=4, count=10)
    names = [path.stem for path in first]
    assert len(set(names)) == 10 and names == [path.stem for path in again] and names != [p.stem for p in other]
    for path in first:
        pipe = pipeline_from_spec(load_problem(path))
        v = pipe.num_stages // pipe.num_ranks
        assert 3 <= pipe.num_ranks <= 12 and 2 * pipe.num_ranks <= pipe.num_microbatches <= 4 * pipe.num_ranks + 3
        assert (pipe.placement, v) in {("v", 2), ("loop", 2), ("loop", 3)}
        assert path.stem.startswith("zb-v-6.2b" if pipe.placement == "v" else "zb-interleaved-1.5b")
        held = pipe.capacity / pipe.mem_forward[0]  # stage activations per rank
        assert held in {v * pipe.num_ranks, (3 * v * pipe.num_ranks) // 4, v * pipe.num_ranks + v}


def test_beats_peers_counts_only_the_peers_that_fit(bench):
    listed = [("torch ZBV", "0.0712"), ("torch DualPipeV", "n/a: over the memory limit"), ("V", "0.0697 (published)")]
    assert bench.beats_peers(0.0697, listed) is True
    assert bench.beats_peers(0.06974, listed) is True  # the published 0.0697 is rounded: equal to 4 decimals
    assert bench.beats_peers(0.06976, listed) is False
    assert bench.beats_peers(0.0700, listed) is False
    assert bench.beats_peers(0.5, [("torch", "needs torch"), ("x", "n/a: over the memory limit")]) is None


def test_target_line_counts_each_row_against_the_target_for_its_rank_count(bench):
    gaps = [(4, 0.0), (8, 0.0100), (8, 0.0101), (6, 0.0393), (16, 0.0199), (16, 0.0226), (32, 0.5), (12, 0.02)]
    line = bench.target_line(gaps)
    assert line == "proven gap targets (longest run): p <= 8: within 1% on 2 of 4; p = 16: within 2% on 1 of 2"
    assert bench.target_line([(12, 0.0)]) == "proven gap targets (longest run): no row with a target"
