"""Runtime concurrency control (Liu, Li, Kestor and Vetter, IPDPS 2019): how many threads each
operation of a training iteration uses, and which operations run at the same time.

- `perfmodel`: an operation's time on k threads, analytic or fitted from a few profiled counts
  (with its leave-one-out error).
- `opgraph`: the iteration at operation level (forward, backward-input, backward-weight per layer
  and micro-batch; an update per layer) as moldable tasks on one multi-core processor.
- `strategies`: PyTorch's default, the best static setting, the paper's per-operation choice,
  list scheduling and CP-SAT, each validated on the same graph.
- `executor` (*torch*): runs a plan on CPU threads, each with its own thread count; checks the
  gradients against a serial reference and writes the measured timeline.
- `experiment`: ``layersched bench concurrency``.
"""
