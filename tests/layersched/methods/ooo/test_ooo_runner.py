"""The data-parallel runner applies out-of-order backward orders and matches the reference."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from layersched.methods.ooo import dataparallel as dp  # noqa: E402
from layersched.methods.ooo.dp_order import check_order, train_data_parallel  # noqa: E402
from layersched.runtime.runner import train_reference  # noqa: E402

MODEL = "examples/models.py:mlp"
LAYERS = 8  # the mlp's default depth


def test_check_order_rejects_missing_and_early_items():
    check_order(dp.reverse_first_k(LAYERS, 5), LAYERS)
    with pytest.raises(ValueError, match="missing \\('I', 0\\)"):
        check_order(dp.reverse_first_k(LAYERS, 0)[:-2], LAYERS)
    with pytest.raises(ValueError, match="comes later"):
        check_order([("I", 1), ("W", 0), ("W", 1), ("I", 0)][::-1], 2)


def _cpsat_orders() -> list[list[tuple[str, int]]]:
    """Per-iteration orders of CP-SAT's schedule for eight uneven layers (started from the best k)."""
    rng = np.random.default_rng(0)
    costs = dp.LayerCosts(
        tuple(map(str, range(LAYERS))), *(rng.integers(1, 20, LAYERS) for _ in range(4)), rng.integers(1, 5000, LAYERS)
    )
    _, best = dp.best_k(costs, dp.Network(2, 1e11, 0.0), iterations=2)
    found, _ = dp.search_order(best, time_limit=2)
    return dp.backward_orders(found)


CASES = {
    "reverse": lambda: [dp.reverse_first_k(LAYERS, 0)],
    "first-k": lambda: [dp.reverse_first_k(LAYERS, 5)],
    "all-deferred": lambda: [dp.reverse_first_k(LAYERS, LAYERS)],
    "cpsat": _cpsat_orders,
    # one order per step: CP-SAT's, a lagging and shuffled one, all weight gradients deferred
    "mixed": lambda: [_cpsat_orders()[0], LAGGING, dp.reverse_first_k(LAYERS, LAYERS)],
}
LAGGING = [("I", 7), ("I", 6), ("W", 7), ("I", 5), ("W", 6), ("I", 4), ("I", 3), ("W", 4), ("W", 5)] + [
    ("I", 2),
    ("W", 3),
    ("I", 1),
    ("I", 0),
    ("W", 2),
    ("W", 0),
    ("W", 1),
]


@pytest.mark.parametrize("label", [pytest.param(c, marks=() if c == "mixed" else pytest.mark.slow) for c in CASES])
def test_out_of_order_data_parallel_equals_the_single_process_reference(label):
    steps, replicas = 3, 2
    ref, ref_losses = train_reference(MODEL, num_microbatches=replicas, steps=steps)
    orders = CASES[label]()
    results = train_data_parallel(MODEL, orders, replicas, steps=steps)
    assert [r.rank for r in results] == [0, 1]
    for r in results:
        assert sorted(r.params) == sorted(ref)
        for name, value in r.params.items():
            torch.testing.assert_close(
                value, ref[name], rtol=1e-5, atol=1e-12, msg=lambda m, n=name: f"{label} {n}: {m}"
            )
    losses = [sum(x) for x in zip(*(r.losses for r in results), strict=True)]
    assert losses == pytest.approx(ref_losses, rel=1e-9)
