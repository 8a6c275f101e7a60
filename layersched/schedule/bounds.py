"""Memory-aware lower bounds for pipelines: forced idle time in warm-up and cool-down per rank.

For a pipeline with one stage per rank (stage r on rank r), micro-batches may be taken in order on
every stage without loss (see `layersched.schedule.solve.symmetry_chains`). On rank r:

- **Warm-up.** From the start of ``F(r,0)`` to the start of ``I(r,0)`` lies at least the round trip
  ``F_r + sum_{s>r} (F_s + I_s) + 2 sum_{s>=r} c_s``. Nothing is freed before the first ``I``, so at
  most ``k = capacity // mem_F`` forwards fit in that window; the rest of it is idle.
- **Cool-down.** From the end of ``F(r,m-1)`` to the start of ``I(r,m-1)`` lies at least the round
  trip minus ``F_r``. Only the ``a`` backward-for-inputs still pending (each followed by its ``W``)
  and ``b`` pending weight gradients can fill it, with ``a mem_F + b mem_W + mem_F <= capacity``
  when ``F(r,m-1)`` starts; the rest is idle.

When ``m > k`` the two windows are disjoint, so ``span_r >= work_r + idle_warm + idle_cool``. Under
Zero Bubble's 1p limit this bound equals the ZB-H1 schedule's iteration time: it proves ZB-H1 optimal
there.

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> from layersched.describe.stages import pipeline_from_spec
>>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 4, "microbatches": 8, "forward": 2, "backward_input": 2, "backward_weight": 1,
...     "memory_forward": 4, "memory_freed_by_weight": 1, "memory_limit": 16}}))
>>> pipeline_bounds(pipe, [0, 1, 2, 3], "span")
{'pipeline_idle': 48}
"""

from __future__ import annotations

import numpy as np

from layersched.describe.stages import Pipeline


def _best_fill(a_max: int, budget: int, mem_f: int, mem_w: int, val_a: int, val_b: int, b_max: int) -> int:
    """max a*val_a + b*val_b with a*mem_f + b*mem_w <= budget, 0 <= a <= a_max, 0 <= a + b <= b_max."""
    best = 0
    for a in range(0, a_max + 1):
        rest = budget - a * mem_f
        if rest < 0:
            break
        b = b_max - a if mem_w == 0 else min(b_max - a, rest // mem_w)
        best = max(best, a * val_a + max(b, 0) * val_b)
    return best


def pipeline_bounds(pipe: Pipeline, stage_to_rank: list[int], objective: str) -> dict[str, int]:
    """Lower bounds that use the pipeline's structure and memory; empty where they do not apply
    (several stages per rank, or another placement)."""
    S, R, m = pipe.num_stages, pipe.num_ranks, pipe.num_microbatches
    if S != R or list(stage_to_rank) != list(range(S)):
        return {}
    F, I, W = (np.asarray(x, dtype=np.int64) for x in (pipe.forward, pipe.backward_input, pipe.backward_weight))
    if pipe.backward is not None:  # a fused backward may cost less than I + W: bound by the cheaper
        B = np.asarray(pipe.backward, dtype=np.int64)
        I, W = np.minimum(I, B), np.minimum(I + W, B) - np.minimum(I, B)
    c = np.asarray(pipe.transfer, dtype=np.int64)
    mem_f, mem_w = pipe.mem_forward, pipe.mem_freed_by_weight
    best_span, best_makespan = 0, 0
    for r in range(R):
        work = m * int(F[r] + I[r] + W[r]) + int(pipe.optimizer[r])
        trip = int(F[r:].sum() + I[r + 1 :].sum() + 2 * c[r:].sum())
        if pipe.capacity is None or mem_f[r] <= 0:
            k = m
        else:
            k = min(m, int(pipe.capacity // mem_f[r]))
        idle = max(0, trip - k * int(F[r]))
        if m > k:
            budget = int(pipe.capacity) - int(mem_f[r])
            fill = _best_fill(
                min(m - 1, budget // int(mem_f[r])),
                budget,
                int(mem_f[r]),
                int(mem_w[r]),
                int(I[r] + W[r]),
                int(W[r]),
                m - 1,
            )
            idle += max(0, trip - int(F[r]) - fill)
        head = int(F[:r].sum() + c[:r].sum())
        best_span = max(best_span, work + idle)
        best_makespan = max(best_makespan, head + work + idle)
    return {"pipeline_idle": best_span if objective == "span" else best_makespan}
