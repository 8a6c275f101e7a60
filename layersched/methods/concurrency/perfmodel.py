"""Performance models: an operation's time as a function of the threads it runs with.

Two sources, each with ``time(k)`` (seconds on ``k`` threads) and ``best_threads(cores)``. The
fitted one has the form ``t(k) = a + b / k + c (k - 1)``: ``a`` the serial part (launch, the
framework's bookkeeping), ``b`` the work that divides among threads, ``c`` the fork/join cost of each
extra thread.

- `AnalyticModel`: from the cost model's FLOPs and bytes of an operation on a `CpuSpec` (roofline
  per thread, memory bandwidth shared by the socket), with a fixed launch and fork/join cost.
- `fit`: least squares (non-negative) on a few profiled thread counts, with the leave-one-out error
  of each point: the model's prediction error on a count it did not see.

>>> m = fit({1: 10.0, 2: 5.6, 4: 3.4, 8: 2.6})
>>> round(m.time(4), 2), {k: round(e, 3) for k, e in m.loo_errors.items()}
(3.44, {1: 0.03, 2: 0.015, 4: 0.025, 8: 0.115})
>>> m = ThreadModel(a=1.0, b=8.0, c=0.5)
>>> [round(m.time(k), 2) for k in (1, 2, 4)], m.best_threads(8)
([9.0, 5.5, 4.5], 4)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ThreadModel:
    """``t(k) = a + b / k + c (k - 1)`` seconds; ``loo_errors`` (relative, per profiled count) when fitted."""

    a: float
    b: float
    c: float
    loo_errors: dict[int, float] = field(default_factory=dict)

    def time(self, k: int) -> float:
        return self.a + self.b / k + self.c * (k - 1)

    def best_threads(self, cores: int) -> int:
        """The thread count in 1..``cores`` with the least predicted time (the fewest on ties)."""
        return min(range(1, cores + 1), key=lambda k: (self.time(k), k))

    @property
    def loo_error(self) -> float | None:
        """Mean absolute relative leave-one-out error (None when not fitted or too few points)."""
        return float(np.mean(list(self.loo_errors.values()))) if self.loo_errors else None


def _nnls3(ks: np.ndarray, ts: np.ndarray) -> tuple[float, float, float]:
    """Non-negative least squares for (a, b, c) by trying every subset of the three terms that keeps
    ``a`` or ``b`` (a model that is zero on one thread predicts nothing)."""
    columns = np.stack([np.ones_like(ks), 1.0 / ks, ks - 1.0], axis=1)
    best, coef = None, (float(ts.mean()), 0.0, 0.0)
    for r in range(1, 4):
        for subset in itertools.combinations(range(3), r):
            if len(ks) < len(subset) or 2 in subset and len(subset) == 1:
                continue
            x, *_ = np.linalg.lstsq(columns[:, subset], ts, rcond=None)
            if (x < -1e-15).any():
                continue
            full = np.zeros(3)
            full[list(subset)] = np.clip(x, 0.0, None)
            err = float(np.sum((columns @ full - ts) ** 2))
            if best is None or err < best - 1e-18:
                best, coef = err, tuple(float(v) for v in full)
    return coef  # type: ignore[return-value]


def fit(samples: dict[int, float]) -> ThreadModel:
    """The model fitted to measured ``{threads: seconds}``; with three or more counts, the
    leave-one-out relative error of each (fitted on the others, predicted there)."""
    if not samples:
        raise ValueError("fit: no samples")
    if any(k < 1 or not np.isfinite(t) or t < 0 for k, t in samples.items()):
        raise ValueError(f"fit: thread counts must be at least 1 and times finite and non-negative, got {samples}")
    ks = np.array(sorted(samples), dtype=float)
    ts = np.array([samples[int(k)] for k in ks])
    a, b, c = _nnls3(ks, ts)
    loo = {}
    if len(ks) >= 3:
        for i in range(len(ks)):
            keep = np.arange(len(ks)) != i
            m = ThreadModel(*_nnls3(ks[keep], ts[keep]))
            loo[int(ks[i])] = float(abs(m.time(int(ks[i])) - ts[i]) / ts[i]) if ts[i] > 0 else 0.0
    return ThreadModel(a, b, c, loo)


@dataclass(frozen=True)
class CpuSpec:
    """A multi-core CPU for the analytic model: per-core FLOP rate and bandwidth, the socket's
    bandwidth (shared by all threads), the cost of launching an operation and of each extra thread."""

    name: str
    cores: int
    core_flops: float = 40e9  # FLOP/s per core reached by a good kernel (AVX2 FMA at ~2.5 GHz, ~50%)
    core_bandwidth: float = 10e9  # bytes/s one core streams
    memory_bandwidth: float = 100e9  # bytes/s of the socket
    launch: float = 5e-6  # s per operation (framework dispatch)
    fork_join: float = 1.5e-6  # s per extra thread (OpenMP team start and barrier)


CPUS = {
    2: CpuSpec("2-core VM", 2, memory_bandwidth=15e9),
    16: CpuSpec("16-core socket", 16, memory_bandwidth=80e9),
    64: CpuSpec("64-core socket", 64, memory_bandwidth=200e9),
}
"""The machines of `layersched bench concurrency`'s simulated table (assumed figures, not measured)."""


GRAIN = 32768
"""PyTorch's ``at::internal::GRAIN_SIZE``: an element-wise loop over fewer elements runs on one thread."""


@dataclass(frozen=True)
class AnalyticModel:
    """The analytic time of an operation of ``flops`` FLOPs moving ``moved`` bytes on ``cpu``: the
    launch, the slower of compute and memory traffic split over ``k`` threads (the socket's
    bandwidth caps the traffic), and ``fork_join`` per extra thread; one thread whatever ``k`` for an
    operation on fewer than `GRAIN` values."""

    flops: float
    moved: float
    cpu: CpuSpec
    values: float | None = None  # elements the operation touches; below `GRAIN` it runs on one thread

    def time(self, k: int) -> float:
        cpu = self.cpu
        if self.values is not None and self.values < GRAIN:
            k = 1  # PyTorch does not split such an operation, whatever the thread setting
        compute = self.flops / (k * cpu.core_flops)
        memory = self.moved / min(k * cpu.core_bandwidth, cpu.memory_bandwidth)
        return cpu.launch + max(compute, memory) + cpu.fork_join * (k - 1)

    def best_threads(self, cores: int) -> int:
        return min(range(1, cores + 1), key=lambda k: (self.time(k), k))
