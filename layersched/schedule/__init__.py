"""Schedule: per-stage costs -> task graph -> one validated schedule.

- `graph`: the training task graph (networkx) and its lowering to a `solvers.Problem`; action names.
- `templates`: the known pipeline schedules (GPipe, 1F1B, Zero Bubble, interleaved, V, kFkB, ...).
- `greedy`: a memory-bounded greedy for any placement with several stages per rank (``chunk-greedy``).
- `bounds`: memory-aware pipeline lower bounds.
- `solve`: a template or a generic solver, or ``best`` of all of them, validated, with its bound.
- `frontier`: the best schedule and its bound at each per-rank memory limit.
- `metrics`: what a schedule costs (iteration time, bubble, work and peak memory per rank).
- `suite`: benchmark suites (every method on a list of problems).
"""
