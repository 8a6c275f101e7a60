"""Which rank holds each pipeline stage: ``loop``, ``v`` or an explicit list.

Interleaved schedules put stage s on rank s mod R (loop); ZB-V and DualPipeV go down the ranks and
back up (v), so that rank r holds stages r and 2R-1-r and the last stage sits beside the first.
"""

from __future__ import annotations

import numpy as np


def placement(num_stages: int, num_ranks: int, style: str | list[int] | tuple[int, ...] = "loop") -> list[int]:
    """Rank of each stage. ``loop``: stage s on rank s mod R (plain and interleaved pipelines);
    ``v``: down then back up (rank r holds stages r and 2R-1-r, as in ZB-V and DualPipeV); or an
    explicit list, one rank per stage, each rank holding the same number of stages.

    >>> placement(4, 2), placement(4, 2, "v"), placement(4, 2, [0, 1, 1, 0])
    ([0, 1, 0, 1], [0, 1, 1, 0], [0, 1, 1, 0])
    """
    if num_stages % num_ranks:
        raise ValueError(f"{num_stages} stages cannot be spread evenly over {num_ranks} ranks")
    if not isinstance(style, str):
        ranks = [int(r) for r in style]
        if len(ranks) != num_stages:
            raise ValueError(f"placement lists {len(ranks)} ranks for {num_stages} stages; give one rank per stage")
        bad = [r for r in ranks if not 0 <= r < num_ranks]
        if bad:
            raise ValueError(f"placement names rank {bad[0]}; ranks are 0 to {num_ranks - 1}")
        per = np.bincount(ranks, minlength=num_ranks)
        if per.min() != per.max():
            raise ValueError(
                f"placement puts {per.max()} stages on rank {int(per.argmax())} but {per.min()} on rank "
                f"{int(per.argmin())}; every rank holds {num_stages // num_ranks}"
            )
        return ranks
    if style == "loop":
        return [s % num_ranks for s in range(num_stages)]
    if style == "v":
        return [
            s % num_ranks if (s // num_ranks) % 2 == 0 else num_ranks - 1 - s % num_ranks for s in range(num_stages)
        ]
    raise ValueError(f"unknown placement {style!r}; valid: loop, v, or a list with one rank per stage")
