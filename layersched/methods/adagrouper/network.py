"""Networks whose bandwidth varies over time, and the timing of a schedule's orders under them.

A `BandwidthTrace` gives the available bandwidth as a fraction of the nominal one (the one the
pipeline's ``transfer`` times assume), piecewise constant over time. A transfer whose nominal time is
``d`` (its bytes at full bandwidth) and that starts at ``t`` ends when the integral of the bandwidth
from ``t`` reaches ``d`` (`BandwidthTrace.transfer_end`). Traces come from samples (measured, or
read from a CSV file of ``time,bandwidth`` rows) or are generated: constant, periodic on/off
preemption with a duty cycle, or random (Markov) on/off preemption.

`time_orders_under` is `solvers.time_orders` with time-varying transfer delays: every task starts
when its rank is free and each predecessor's output has arrived, a transfer leaving at the end of
its producer and taking as long as the trace says from then on. Transfers do not contend with each
other for the link (each sees the trace's bandwidth). Because the bandwidth never exceeds the
nominal one, every delay is at least the nominal delay, so the timed schedule passes
`solvers.validate` for the nominal problem (the tests check it).

Example
-------
>>> tr = on_off(period=100, duty=0.5, low=0.25)
>>> tr.at(10), tr.at(60)
(1.0, 0.25)
>>> tr.transfer_end(40, 20)   # 10 at full speed, then 10 more at a quarter speed: 40 ticks
90
>>> round(tr.mean(0, 100), 3)
0.625
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from solvers import Problem, Schedule
from solvers.simulate import time_orders


@dataclass(frozen=True)
class BandwidthTrace:
    """Bandwidth over time as a fraction of the nominal one, piecewise constant.

    Parameters
    ----------
    times : (n,) int
        Start of each segment; ``times[0] == 0``, strictly increasing.
    bandwidth : (n,) float
        Bandwidth fraction of each segment, in ``(0, 1]``.
    period : int, optional
        The trace repeats with this period (``> times[-1]``); without it the last segment lasts forever.
    name : str
        A label for tables and plots.

    Example
    -------
    >>> BandwidthTrace(np.array([0, 5]), np.array([1.0, 0.5]), period=10).at(17)
    0.5
    """

    times: np.ndarray
    bandwidth: np.ndarray
    period: int | None = None
    name: str = "trace"

    def __post_init__(self) -> None:
        t = np.asarray(self.times, dtype=np.int64)
        b = np.asarray(self.bandwidth, dtype=float)
        if t.ndim != 1 or len(t) == 0 or len(t) != len(b) or t[0] != 0 or (np.diff(t) <= 0).any():
            raise ValueError(f"trace {self.name}: times must start at 0 and increase, one bandwidth per time")
        if not ((b > 0) & (b <= 1)).all():
            raise ValueError(f"trace {self.name}: bandwidth fractions must lie in (0, 1]; got {b.min()}..{b.max()}")
        if self.period is not None and self.period <= t[-1]:
            raise ValueError(f"trace {self.name}: period {self.period} must exceed the last segment start {t[-1]}")
        object.__setattr__(self, "times", t)
        object.__setattr__(self, "bandwidth", b)

    def _segment(self, t: float) -> tuple[int, float, float]:
        """Index of the segment holding ``t``, its bandwidth, and the time at which it ends."""
        base = 0.0
        if self.period is not None:
            base = (t // self.period) * self.period
            t -= base
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        if i + 1 < len(self.times):
            end = base + self.times[i + 1]
        else:
            end = base + self.period if self.period is not None else math.inf
        return i, float(self.bandwidth[i]), end

    def at(self, t: float) -> float:
        """Bandwidth fraction at time ``t``."""
        return self._segment(t)[1]

    def transfer_end(self, t: int, work: int) -> int:
        """End of a transfer starting at ``t`` that needs ``work`` ticks at full bandwidth (rounded up)."""
        now, left = float(t), float(work)
        while left > 1e-9:
            _, b, end = self._segment(now)
            if (end - now) * b >= left:
                now += left / b
                break
            left -= (end - now) * b
            now = end
        return int(math.ceil(now - 1e-9))

    def mean(self, t0: float, t1: float) -> float:
        """Time-averaged bandwidth fraction over ``[t0, t1]`` (the value at ``t0`` when empty)."""
        if t1 <= t0:
            return self.at(t0)
        now, acc = float(t0), 0.0
        while now < t1:
            _, b, end = self._segment(now)
            step = min(end, t1) - now
            acc += b * step
            now += step
        return float(acc / (t1 - t0))


def constant(bandwidth: float = 1.0, name: str | None = None) -> BandwidthTrace:
    """A network that always offers ``bandwidth`` (a fraction of nominal).

    >>> constant(0.5).transfer_end(0, 10)
    20
    """
    return BandwidthTrace(np.array([0]), np.array([bandwidth]), None, name or f"constant {bandwidth:g}")


def on_off(period: int, duty: float, low: float, phase: int = 0, name: str | None = None) -> BandwidthTrace:
    """Periodic preemption: full bandwidth, then for a ``duty`` fraction of every ``period`` only ``low``.

    ``phase`` shifts the preempted window (it starts at ``(1 - duty) * period + phase`` mod period).

    >>> on_off(10, 0.3, 0.1).times.tolist()
    [0, 7]
    """
    if not 0 < duty < 1:
        raise ValueError(f"duty cycle must lie in (0, 1), got {duty}")
    off_start, off_len = (round((1 - duty) * period) + phase) % period, round(duty * period)
    edges = sorted({0, off_start, (off_start + off_len) % period})
    bw = [low if (t - off_start) % period < off_len else 1.0 for t in edges]
    label = name or f"on/off duty {duty:g} period {period} low {low:g}"
    return BandwidthTrace(np.array(edges), np.array(bw), period, label)


def markov_on_off(
    mean_on: float, mean_off: float, low: float, horizon: int, seed: int = 0, name: str | None = None
) -> BandwidthTrace:
    """Random preemption: alternating full and ``low`` bandwidth with exponential durations of means
    ``mean_on`` and ``mean_off``, up to ``horizon`` (then full bandwidth).

    >>> tr = markov_on_off(100, 50, 0.2, 10_000, seed=1)
    >>> set(tr.bandwidth.tolist()) == {1.0, 0.2}
    True
    """
    rng = np.random.default_rng(seed)
    times, bw, t, on = [0], [1.0], 0, True
    while t < horizon:
        t += max(1, int(rng.exponential(mean_on if on else mean_off)))
        on = not on
        times.append(t)
        bw.append(1.0 if on else low)
    return BandwidthTrace(np.array(times), np.array(bw), None, name or f"markov on {mean_on:g} off {mean_off:g}")


def from_samples(
    times: Sequence[float], bandwidth: Sequence[float], *, nominal: float | None = None, name: str = "measured"
) -> BandwidthTrace:
    """A trace from measured samples (bandwidth in any unit; divided by ``nominal``, by default the
    largest sample). Times are rounded to integers and shifted to start at 0.

    >>> from_samples([5, 7, 9], [10.0, 5.0, 10.0]).bandwidth.tolist()
    [1.0, 0.5, 1.0]
    """
    t = np.round(np.asarray(times, dtype=float) - float(times[0])).astype(np.int64)
    b = np.asarray(bandwidth, dtype=float)
    return BandwidthTrace(t, b / (nominal or b.max()), None, name)


def load_trace(path: str | Path, *, time_scale: float = 1.0) -> BandwidthTrace:
    """A measured trace from a CSV file with a header and ``time,bandwidth`` rows; times are multiplied
    by ``time_scale`` (say, seconds to the pipeline's nanoseconds)."""
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return from_samples(data[:, 0] * time_scale, data[:, 1], name=Path(path).stem)


@dataclass(frozen=True)
class TracedRun:
    """Orders timed under a trace: the schedule (times relative to ``t0``), and for every transfer
    edge its nominal and actual delay (what a runner's transfer timings would report)."""

    schedule: Schedule
    nominal: np.ndarray
    actual: np.ndarray

    def bandwidth_estimate(self) -> float:
        """Effective bandwidth fraction seen by the transfers: nominal time over actual time."""
        return float(self.nominal.sum() / self.actual.sum()) if self.actual.sum() else 1.0


def time_orders_under(
    problem: Problem, orders: Sequence[Sequence[int]], trace: BandwidthTrace, t0: int = 0
) -> TracedRun:
    """Earliest-start timing of per-processor ``orders`` when the transfers follow ``trace`` from ``t0``.

    Example
    -------
    >>> p = Problem(duration=[2, 3], num_processors=2, edges=[[0, 1]], delay=[4])
    >>> time_orders_under(p, [[0], [1]], constant(0.5)).schedule.start.tolist()
    [0, 10]
    """
    actual = np.zeros(len(problem.edges), dtype=np.int64)
    delay = problem.delay.tolist()

    def arrival(e: int, end: int) -> int:
        arrive = trace.transfer_end(t0 + end, delay[e]) - t0
        actual[e] = arrive - end
        return arrive

    sched = time_orders(problem, orders, arrival)
    proc, src, dst = sched.processor, problem.edges[:, 0], problem.edges[:, 1]
    cross = (proc[src] != proc[dst]) & (problem.delay > 0)
    return TracedRun(sched, problem.delay[cross], actual[cross])
