"""Contiguous partition of a layer sequence into stages, balancing the slowest stage.

Example
-------
>>> contiguous_partition([4, 1, 1, 2, 2], 2)
[[0, 1], [2, 3, 4]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def contiguous_partition(costs: Sequence[float], parts: int) -> list[list[int]]:
    """Split ``costs`` into ``parts`` non-empty contiguous runs minimising the largest run's sum.

    Exact: binary search over the candidate bottleneck values (the sums of contiguous runs), each
    tested greedily, O(n log n) after the prefix sums. Ties keep earlier stages as full as possible.
    """
    n = len(costs)
    if parts < 1:
        raise ValueError("parts must be at least 1")
    if n < parts:
        raise ValueError(f"cannot split {n} layers into {parts} stages: at least {parts} layers are needed")
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(costs, dtype=float))])

    def cuts_for(limit: float) -> list[int] | None:
        # greedy: extend each stage while it stays under the limit and enough layers remain
        cuts, lo = [], 0
        for stage in range(parts - 1):
            hi = int(np.searchsorted(prefix, prefix[lo] + limit, side="right")) - 1
            hi = min(hi, n - (parts - 1 - stage))
            if hi <= lo:
                return None
            cuts.append(hi)
            lo = hi
        return cuts if prefix[n] - prefix[lo] <= limit + 1e-12 * max(1.0, limit) else None

    candidates = np.unique((prefix[None, :] - prefix[:, None])[np.triu_indices(n + 1, 1)])
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cuts_for(float(candidates[mid])) is None:
            lo = mid + 1
        else:
            hi = mid
    cuts = cuts_for(float(candidates[lo]))
    assert cuts is not None
    bounds = [0, *cuts, n]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(parts)]
