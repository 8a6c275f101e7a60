"""Describe: a model, a cluster and a training setting (or a stage-level shortcut) -> per-stage costs.

- `config`: the problem file's pydantic models and loading (one error line naming file and field).
- `costmodel`: FLOPs and bytes per layer -> seconds on a device.
- `partition`: exact contiguous partition of layers into stages.
- `stages`: the `Pipeline` of per-stage costs that the scheduling layer consumes.
"""
