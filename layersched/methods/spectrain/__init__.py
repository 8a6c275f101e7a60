"""SpecTrain: asynchronous 1F1B with stale, stashed or predicted weights.

- `asyncpipe`: the single-process emulation (version lags, weight prediction, convergence).
- `asyncrun` (*torch*): the same with real processes (``python -m layersched.cli.asyncrun``).
- `experiment`: ``layersched bench spectrain``.
"""

MODES = ("sync", "stale", "stash", "spectrain")
"""The weight-version modes of `asyncpipe` and `asyncrun` (defined here, without torch, so that
``python -m layersched.cli.asyncrun --help`` works where torch is not installed)."""
