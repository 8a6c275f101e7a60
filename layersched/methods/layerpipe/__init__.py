"""LayerPipe: sub-layer (inter-layer) cuts that balance the stages, and the backward split into input-
and weight-gradient work (intra-layer), against PipeDream's whole-layer partition.

- `pipeplan`: steady-state pipelines of a partition, simulated per micro-batch.
- `layerpipe`: LayerPipe's partition and plan.
- `pipedream`: the PipeDream baseline.
- `experiment`: ``layersched bench layerpipe``.
"""
