"""How much a compiled core would gain: HEFT's and FCP's placement loops compiled with numba, against ours.

Issue #19 asks for `best` at least 100 times faster than saga's HEFT from 100 to 5,000 tasks. Our
solvers are Python: `best` runs about a dozen placement loops and then polishes, and at 100 tasks
saga's HEFT takes 30-155 ms. This probe measures the first step of a compiled core before anyone
builds it: `solvers.listsched._insert` (the loop behind `heft`, `cpop`, `peft` and their variants)
written again over flat arrays (`insert_loop`), compiled by numba, and timed beside ours on the
instances of `solvers_bench.py`. Each schedule it makes is compared with ours, task by task.

`insert_loop` is all of `_insert` but its time limit: affinity groups, allowed processors, CPoP's
pinned processors, PEFT's extra costs, HEFT's tie orders, uniform or per-processor durations
(``Problem.unrelated``) and link factors; like `_insert`, it is for problems without memory
limits. Without numba the same function runs as plain Python (the tests check it against `_insert`
that way, on random problems); `main` needs numba (``pip install '.[compiled]'``) and times plain
HEFT. `fcp_loop` is `solvers.heuristics._fcp_place` so (the loop behind `fcp`, its variants and
`fcp_ends`, either rule); ``--loop fcp`` or ``--loop fcp-ends`` times it instead. ``--loop
heft-call`` times HEFT end to end instead: its upward rank (`rank_loop`) and placement in one
compiled call (`heft_call`), plus the Python that builds its inputs (`call_inputs`), against our
whole `heft` call and saga's HEFT's times in session 43's table (`end_to_end`); ``--loop fcp-call``
and ``--loop fcp-ends-call`` the same for `fcp` and `fcp_ends` (`fcp_call`, `fcp_call_inputs`).

Columns: our priority (upward rank, or FCP's) and the loop's inputs (``rank``, ``prep``; Python, run once per schedule
either way), our loop and the compiled one (medians over ``--repeats`` timings, with their min-max,
after one untimed call that compiles it or loads it from numba's cache), their ratio, and whether
every schedule was the same. Medians over ``--seeds`` instances per class.

Usage: python benchmarks/compiled_probe.py [--sizes 100,1000,5000] [--processors 4,8,32] [--seeds 3]
                                            [--repeats 10]
                                            [--loop heft|fcp|fcp-ends|heft-call|fcp-call|fcp-ends-call]
"""

from __future__ import annotations

import argparse
import heapq
import platform
import statistics
import sys
import time

import numpy as np

from layersched.cli.options import whole_number
from solvers import Problem
from solvers.graph import csr
from solvers.heuristics import _fcp_place, fcp_priority
from solvers.listsched import (
    MAX_GAPS,
    _insert,
    _mean_link,
    adjacency_arrays,
    effective_allowed,
    has_memory_limits,
    upward_rank,
)


def bisect_right(row, m, x):
    """Where ``x`` goes in the sorted ``row[:m]``, after any equal to it (`bisect.bisect_right`)."""
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) // 2
        if row[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def arrival(t, q, pptr, psrc, pdel, proc, end, lnk):
    """When task ``t``'s data is on processor ``q`` (`solvers.listsched._arrival`): its predecessors'
    ends, plus each edge's delay (times the link factor, where ``lnk`` is not empty) where the
    predecessor ran elsewhere."""
    arrive = np.int64(0)
    for k in range(pptr[t], pptr[t + 1]):
        u = psrc[k]
        pu = proc[u]
        if pu == q:
            c = end[u]
        elif lnk.shape[0] > 0:
            c = end[u] + pdel[k] * lnk[pu, q]
        else:
            c = end[u] + pdel[k]
        if c > arrive:
            arrive = c
    return arrive


def insert_loop(
    n, P, pptr, psrc, pdel, sptr, stgt, indeg0, dur, don, lnk, allowed, group, keys, pinned, extra, tie, max_gaps
):
    """`solvers.listsched._insert` over flat arrays (`loop_inputs`, then ``keys`` the priorities and
    `loop_options`; ``max_gaps`` its `MAX_GAPS`): the ready task of highest key (ties: lower index)
    goes to its group's processor once the group has one, else to its only allowed processor, else
    to its ``pinned`` one (>= 0), else to the allowed processor where it finishes first (plus
    ``extra[t, q]`` where given; ties: the earlier finish, the earlier start, the least ``tie[q]``,
    the lower index), into the earliest idle gap there that holds it after its data arrives.
    Where links are uniform (no ``lnk``), when the data is on each processor is found for all of them
    in O(predecessors + P), as `_insert` does: the latest message (end plus delay) is there
    everywhere but on its own processor, where the latest of the local ends and the other messages
    is. Returns ``(processor, start)`` per task."""
    indeg = indeg0.copy()
    gs = np.zeros((P, max_gaps + 1), np.int64)  # each processor's idle gaps by time: starts, ends
    ge = np.zeros((P, max_gaps + 1), np.int64)
    ng = np.zeros(P, np.int64)
    tail = np.zeros(P, np.int64)  # when each processor's last task ends
    proc = np.full(n, -1, np.int64)
    start = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    ready = [(-keys[0], np.int64(0))]  # typed for numba, then emptied
    ready.pop()
    for t in range(n):
        if indeg[t] == 0:
            ready.append((-keys[t], np.int64(t)))
    heapq.heapify(ready)
    het = don.shape[0] > 0
    costs = extra.shape[0] > 0
    uniform = lnk.shape[0] == 0  # one delay per edge between any two processors
    gproc = np.full(max(0, group.max() + 1) if n else 0, -1, np.int64)  # each group's processor, once it has one
    while len(ready) > 0:
        _, t = heapq.heappop(ready)
        only = -1  # a single candidate processor, or -1: every allowed one
        if group[t] >= 0 and gproc[group[t]] >= 0:
            only = gproc[group[t]]
        else:
            count = 0
            for q in range(P):
                if allowed[t, q]:
                    count += 1
                    only = q
            if count > 1:
                only = pinned[t]
        if uniform:  # `_insert`'s equal links: the data is on every processor but top_q by top, on top_q by other
            top, top_q, other = np.int64(0), -1, np.int64(0)
            for k in range(pptr[t], pptr[t + 1]):
                u = psrc[k]
                if end[u] + pdel[k] > top:
                    top, top_q = end[u] + pdel[k], proc[u]
            for k in range(pptr[t], pptr[t + 1]):
                u = psrc[k]
                c = end[u] if proc[u] == top_q else end[u] + pdel[k]
                if c > other:
                    other = c
        bc, bf, bs, bq = 0.0, np.int64(-1), np.int64(-1), np.int64(-1)
        for q in range(P):
            if (only >= 0 and q != only) or (only < 0 and not allowed[t, q]):
                continue
            if uniform:
                arrive = other if q == top_q else top
            else:
                arrive = arrival(t, q, pptr, psrc, pdel, proc, end, lnk)
            d = don[t, q] if het else dur[t]
            tq = tail[q]
            m = ng[q]
            if arrive >= tq:
                s = arrive
            elif m == 0 or ge[q, m - 1] <= arrive:
                s = tq
            else:  # `_earliest_gap`: the first gap not over by `arrive` that holds it, else the tail
                lo = bisect_right(ge[q], m, arrive)
                s = -1
                if lo < m:
                    first = gs[q, lo] if gs[q, lo] > arrive else arrive
                    if first + d <= ge[q, lo]:
                        s = first
                    else:
                        for kk in range(lo + 1, m):
                            if ge[q, kk] - gs[q, kk] >= d:
                                s = gs[q, kk]
                                break
                if s < 0:
                    s = arrive if arrive > tq else tq
            f = s + d
            c = f + extra[t, q] if costs and only < 0 else 0.0
            if bq < 0 or (c, f, s, tie[q]) < (bc, bf, bs, tie[bq]):
                bc, bf, bs, bq = c, f, s, q
        q, s, f = bq, bs, bf
        m = ng[q]  # `_occupy`
        if s >= tail[q]:  # after its last task: a new gap before it where it waits
            if s > tail[q]:
                gs[q, m] = tail[q]
                ge[q, m] = s
                m += 1
            if f > tail[q]:
                tail[q] = f
        else:  # inside a gap: split in two, empty halves dropped
            i = bisect_right(gs[q], m, s) - 1
            a, b = gs[q, i], ge[q, i]
            if s > a and b > f:
                for kk in range(m, i + 1, -1):
                    gs[q, kk] = gs[q, kk - 1]
                    ge[q, kk] = ge[q, kk - 1]
                ge[q, i] = s
                gs[q, i + 1] = f
                ge[q, i + 1] = b
                m += 1
            elif s > a:
                ge[q, i] = s
            elif b > f:
                gs[q, i] = f
            else:
                for kk in range(i, m - 1):
                    gs[q, kk] = gs[q, kk + 1]
                    ge[q, kk] = ge[q, kk + 1]
                m -= 1
        if m > max_gaps:  # the oldest gap is no longer offered
            for kk in range(m - 1):
                gs[q, kk] = gs[q, kk + 1]
                ge[q, kk] = ge[q, kk + 1]
            m -= 1
        ng[q] = m
        proc[t], start[t], end[t] = q, s, f
        if group[t] >= 0 and gproc[group[t]] < 0:
            gproc[group[t]] = q
        for k in range(sptr[t], sptr[t + 1]):
            v = stgt[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (-keys[v], np.int64(v)))
    return proc, start


def enqueue(ready, fifo, tail, P, keys, t):
    """`fcp_loop`'s ready task ``t``: into the heap ``ready`` while it holds fewer than ``P`` tasks,
    else at ``fifo[tail]`` to wait its turn. Returns the new ``tail``."""
    if len(ready) < P:
        heapq.heappush(ready, (-keys[t], np.int64(t)))
        return tail
    fifo[tail] = t
    return tail + 1


def fcp_loop(n, P, pptr, psrc, pdel, sptr, stgt, indeg0, dur, don, lnk, allowed, group, keys, ends):
    """`solvers.heuristics._fcp_place` over flat arrays (`loop_inputs`, then ``keys`` the priorities,
    ``ends`` `fcp_ends`'s rule): at most P ready tasks compete by key (ties: lower index), later ones
    wait in arrival order; each is appended to its group's processor once the group has one, else to
    the allowed processor that comes idle first (on unequal processors: where it would end first once
    idle; ties: lower index) or to the one its last message comes from (``ends``: of the predecessor
    that ends last), whichever lets it finish first (``ends``: start first, the first keeping ties).
    Returns ``(processor, start)`` per task."""
    indeg = indeg0.copy()
    idle = np.zeros(P, np.int64)  # when each processor's last task ends
    proc = np.full(n, -1, np.int64)
    start = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    ready = [(-keys[0], np.int64(0))]  # at most P tasks by key; typed for numba, then emptied
    ready.pop()
    fifo = np.zeros(n, np.int64)  # the others, in the order they became ready
    head = tail = 0
    het = don.shape[0] > 0
    links = lnk.shape[0] > 0
    gproc = np.full(max(0, group.max() + 1) if n else 0, -1, np.int64)
    for t in range(n):
        if indeg[t] == 0:
            tail = enqueue(ready, fifo, tail, P, keys, t)
    for _ in range(n):
        _, t = heapq.heappop(ready)
        if head < tail:
            u = fifo[head]
            head += 1
            heapq.heappush(ready, (-keys[u], u))
        second = -1
        if group[t] >= 0 and gproc[group[t]] >= 0:
            first = gproc[group[t]]
        else:
            first, least = -1, np.int64(0)
            for q in range(P):
                if allowed[t, q]:
                    v = idle[q] + don[t, q] if het else idle[q]
                    if first < 0 or v < least:
                        first, least = q, v
            last, enabling = np.int64(-1), -1
            for k in range(pptr[t], pptr[t + 1]):
                u = psrc[k]
                if ends:
                    c = end[u]
                elif links:
                    c = end[u] + pdel[k] * lnk[proc[u], first]
                else:
                    c = end[u] + pdel[k]
                if c > last:
                    last, enabling = c, proc[u]
            if enabling >= 0 and enabling != first and allowed[t, enabling]:
                second = enabling
        bq, bf, bs = -1, np.int64(0), np.int64(0)
        for i in range(2):
            q = first if i == 0 else second
            if q < 0:
                continue
            arrive = arrival(t, q, pptr, psrc, pdel, proc, end, lnk)
            s = idle[q] if idle[q] > arrive else arrive
            f = s + (don[t, q] if het else dur[t])
            if ends:
                better = bq < 0 or (f < bf if het else s < bs)
            else:
                better = bq < 0 or (f, s, q) < (bf, bs, bq)
            if better:
                bq, bf, bs = q, f, s
        proc[t], start[t], end[t] = bq, bs, bf
        idle[bq] = bf
        if group[t] >= 0 and gproc[group[t]] < 0:
            gproc[group[t]] = bq
        for k in range(sptr[t], sptr[t + 1]):
            v = stgt[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                tail = enqueue(ready, fifo, tail, P, keys, v)
    return proc, start


def rank_loop(
    n, P, src, dst, delay, dur, don, allowed, group, mean_link, transfer_weight, sptr, stgt, sedge, indeg0, full
):
    """`solvers.listsched.upward_rank` over flat arrays (`rank_inputs`, then ``transfer_weight``, then
    `loop_inputs`'s successor lists with each one's edge index ``sedge``): each task's mean duration
    over its allowed processors plus the longest path after it, an edge weighing its delay times
    the chance that its tasks land apart (0 inside a group) times ``mean_link``, in 1/64 steps.
    With ``full``, FCP's priority (`solvers.heuristics.fcp_priority`): every delay counted in full."""
    count = np.zeros(n, np.int64)
    mean = np.zeros(n, np.int64)  # `mean_durations`
    for t in range(n):
        total = np.int64(0)
        for q in range(P):
            if allowed[t, q]:
                count[t] += 1
                if don.shape[0] > 0:
                    total += don[t, q]
        if don.shape[0] > 0:
            mean[t] = np.int64(np.rint(total * 64 / max(count[t], 1)))
        else:
            mean[t] = dur[t] * 64
    weight = np.zeros(len(src), np.int64)  # `mean_delays`, times ``transfer_weight``
    for e in range(len(src)):
        if full:
            weight[e] = np.int64(np.rint(delay[e] * (mean_link * transfer_weight * 64)))
            continue
        u, v = src[e], dst[e]
        common = 0
        for q in range(P):
            if allowed[u, q] and allowed[v, q]:
                common += 1
        differ = 1.0 - common / (count[u] * count[v])
        if group[u] >= 0 and group[u] == group[v]:
            differ = 0.0
        w = np.rint(delay[e] * differ * mean_link * 64)
        if transfer_weight != 1:
            w = np.rint(w * transfer_weight)
        weight[e] = np.int64(w)
    order = np.zeros(n, np.int64)  # a topological order (Kahn's), then the longest paths backwards
    indeg = indeg0.copy()
    size = 0
    for t in range(n):
        if indeg[t] == 0:
            order[size] = t
            size += 1
    i = 0
    while i < size:
        t = order[i]
        i += 1
        for k in range(sptr[t], sptr[t + 1]):
            v = stgt[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                order[size] = v
                size += 1
    rank = np.zeros(n, np.int64)
    for i in range(n - 1, -1, -1):
        t = order[i]
        tail = np.int64(0)
        for k in range(sptr[t], sptr[t + 1]):
            c = rank[stgt[k]] + weight[sedge[k]]
            if c > tail:
                tail = c
        rank[t] = tail + mean[t]
    return rank


def rank_inputs(problem: Problem, inputs: tuple | None = None) -> tuple:
    """`rank_loop`'s arguments before ``transfer_weight``: the edges as arrays, the delays, and from
    `loop_inputs` (``inputs``, when already built) the durations, per-processor durations, allowed
    processors and groups; then the mean link factor between two different processors."""
    n, P, _, _, _, _, _, _, dur, don, _, allowed, group = loop_inputs(problem) if inputs is None else inputs
    src, dst = (np.ascontiguousarray(problem.edges[:, i], dtype=np.int64) for i in (0, 1))
    return n, P, src, dst, problem.delay.astype(np.int64), dur, don, allowed, group, _mean_link(problem)


def successor_edges(problem: Problem) -> np.ndarray:
    """For each entry of the successor lists of `loop_inputs` (``sptr``, ``stgt``), its edge's index
    in ``problem.edges``."""
    return csr(problem.num_tasks, problem.edges[:, 0], problem.edges[:, 1])[2].astype(np.int64)


def heft_call(
    n, P, src, dst, delay, dur, don, allowed, group, mean_link, transfer_weight, sedge,
    pptr, psrc, pdel, sptr, stgt, indeg0, lnk, pinned, extra, tie, max_gaps,
):  # fmt: skip
    """HEFT in one call: `rank_loop` (arguments as `rank_inputs`, ``transfer_weight``,
    `successor_edges`), then `insert_loop` with that rank (`loop_inputs`' edges, the link factors,
    `loop_options`, ``max_gaps``). Returns ``(processor, start)`` per task, as `heft` places them."""
    keys = rank_loop(n, P, src, dst, delay, dur, don, allowed, group, mean_link, transfer_weight, sptr, stgt, sedge,
                     indeg0, False).astype(np.float64)  # fmt: skip
    return insert_loop(
        n, P, pptr, psrc, pdel, sptr, stgt, indeg0, dur, don, lnk, allowed, group, keys, pinned, extra, tie, max_gaps
    )


def _call_head(problem: Problem, transfer_weight: float) -> tuple:
    """The arguments `heft_call` and `fcp_call` share, `loop_inputs` built once."""
    inputs = loop_inputs(problem)
    _, _, pptr, psrc, pdel, sptr, stgt, indeg, _, _, lnk, _, _ = inputs
    return (*rank_inputs(problem, inputs), transfer_weight, successor_edges(problem), pptr, psrc, pdel, sptr, stgt,
            indeg, lnk)  # fmt: skip


def call_inputs(problem: Problem, transfer_weight: float = 1.0) -> tuple:
    """`heft_call`'s arguments for ``problem`` (no memory limits), HEFT's own options."""
    return (*_call_head(problem, transfer_weight), *loop_options(problem), MAX_GAPS)


def fcp_call(
    n, P, src, dst, delay, dur, don, allowed, group, mean_link, transfer_weight, sedge,
    pptr, psrc, pdel, sptr, stgt, indeg0, lnk, ends,
):  # fmt: skip
    """FCP in one call: its priority (`rank_loop` with ``full``), then `fcp_loop` (``ends``: saga's
    rule). Arguments as `fcp_call_inputs`; returns ``(processor, start)`` per task."""
    keys = rank_loop(n, P, src, dst, delay, dur, don, allowed, group, mean_link, transfer_weight, sptr, stgt, sedge,
                     indeg0, True).astype(np.float64)  # fmt: skip
    return fcp_loop(n, P, pptr, psrc, pdel, sptr, stgt, indeg0, dur, don, lnk, allowed, group, keys, ends)


def fcp_call_inputs(problem: Problem, transfer_weight: float = 1.0, ends: bool = False) -> tuple:
    """`fcp_call`'s arguments for ``problem`` (no memory limits)."""
    return (*_call_head(problem, transfer_weight), ends)


def loop_inputs(problem: Problem) -> tuple:
    """`insert_loop`'s arguments before ``keys``: sizes, the edges as `_insert` reads them
    (`solvers.listsched.adjacency_arrays`), durations, per-processor durations and link factors
    (empty where the problem has none), the allowed processors (`solvers.listsched.effective_allowed`)
    and the affinity groups. `ValueError` for a problem with memory limits, where `heft` places
    tasks as list scheduling does."""
    if has_memory_limits(problem):
        raise ValueError("insert_loop covers problems without memory limits (heft places those as list scheduling)")
    edges = [a.astype(np.int64, copy=False) for a in adjacency_arrays(problem)]  # one type for numba
    none = np.zeros((0, 0), np.int64)
    don = problem.duration_on.astype(np.int64) if problem.duration_on is not None else none
    lnk = problem.link_matrix() if problem.link is not None else none
    duration, group = problem.duration.astype(np.int64), problem.group.astype(np.int64)
    return problem.num_tasks, problem.num_processors, *edges, duration, don, lnk, effective_allowed(problem), group


def loop_options(problem: Problem, pinned=None, extra=None, ties=None) -> tuple:
    """`insert_loop`'s ``pinned``, ``extra`` and ``tie`` as `_insert` takes them (None: none; ``ties``
    None: by index), as arrays."""
    n, P = problem.num_tasks, problem.num_processors
    pin = np.full(n, -1, np.int64) if pinned is None else np.asarray(pinned, np.int64)
    cost = np.zeros((0, 0), np.float64) if extra is None else np.asarray(extra, np.float64)
    tie = np.arange(P, dtype=np.int64) if ties is None else np.asarray(ties, np.int64)
    return pin, cost, tie


WIDTHS = ["12", ">6", ">3", ">6", ">6", ">7", ">17", ">8", ">15", ">6", ""]
"""The table's columns' format widths."""


def _timed(f, repeats: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return times, out


def _list(text: str) -> list[int]:
    return [whole_number(x, least=1) for x in text.split(",")]


def _count(text: str) -> int:
    return whole_number(text, least=1)


def _saga_heft_ms() -> dict:
    """saga's HEFT's median milliseconds per class in session 43's table (another day, another speed
    of the VM: a ratio against it is a rough one)."""
    import pathlib

    path = pathlib.Path(__file__).parent / "results" / "solvers_saga_heft025-2core-vm.txt"
    times = {}
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) > 15 and f[0] in ("layered", "erdos", "layered-het", "erdos-het"):
            times[f[0], int(f[1].replace(",", "")), int(f[2])] = float(f[11]) * 1e3
    return times


def end_to_end(args, call, inputs_of, ours_of, instance, numba_version: str) -> None:
    """``--loop heft-call`` (``fcp-call``, ``fcp-ends-call``): our solver's whole call (``ours_of``:
    checks, priority, placement, bound, result) against ``inputs_of`` (Python) plus ``call``
    compiled, and saga's HEFT from session 43's table."""
    t = time.perf_counter()
    p, _ = instance("layered", 100, 4, 0)
    call(*inputs_of(p))
    first = time.perf_counter() - t
    versions = f"{platform.python_implementation()} {platform.python_version()}, numba {numba_version}"
    name = args.loop.removesuffix("-call")
    print(f"# {name} end to end; {platform.node()}, {versions}, numpy {np.__version__}; first call {first:.2f} s")
    print(f"# medians over {args.seeds} instances of each one's median of {args.repeats} timings (ms)")
    saga = _saga_heft_ms()
    head = ["class", "tasks", "P", f"our {name}", "inputs", "call", "compiled", "ratio", "same"]
    head += ["saga HEFT", "saga/compiled"]
    widths = ["12", ">6", ">3", ">9", ">7", ">7", ">9", ">6", ">5", ">10", ">14"]
    print(" ".join(f"{h:{w}}" for h, w in zip(head, widths, strict=True)))
    for kind, het in (("layered", False), ("erdos", False), ("layered", True), ("erdos", True)):
        for n in args.sizes:
            for P in args.processors:
                ours, prep, fast, same = [], [], [], True
                for seed in range(args.seeds):
                    p, _ = instance(kind, n, P, seed, hetero=het)
                    times, result = _timed(lambda p=p: ours_of(p), args.repeats)
                    ours.append(statistics.median(times))
                    times, inputs = _timed(lambda p=p: inputs_of(p), args.repeats)
                    prep.append(statistics.median(times))
                    times, (proc, start) = _timed(lambda i=inputs: call(*i), args.repeats)
                    fast.append(statistics.median(times))
                    same &= np.array_equal(proc, result.schedule.processor)
                    same &= np.array_equal(start, result.schedule.start)
                name = kind + ("-het" if het else "")
                o, i, c = (statistics.median(x) * 1e3 for x in (ours, prep, fast))
                s = saga.get((name, n, P))
                cells = [name, f"{n:,}", P, f"{o:.3f}", f"{i:.3f}", f"{c:.3f}", f"{i + c:.3f}"]
                cells += [f"{o / (i + c):.0f}", same]
                cells += [f"{s:.0f}" if s else "-", f"{s / (i + c):.0f}" if s else "-"]
                print(" ".join(f"{str(x):{w}}" for x, w in zip(cells, widths, strict=True)), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=_list, default=[100, 1000, 5000], help="tasks per instance (default 100,1000,5000)")
    ap.add_argument("--processors", type=_list, default=[4, 8, 32], help="processors (default 4,8,32)")
    ap.add_argument("--seeds", type=_count, default=3, help="instances per class (default 3)")
    ap.add_argument("--repeats", type=_count, default=10, help="timings per loop (default 10)")
    ap.add_argument(
        "--loop",
        choices=["heft", "fcp", "fcp-ends", "heft-call", "fcp-call", "fcp-ends-call"],
        default="heft",
        help="which loop: HEFT's insertion (`insert_loop`, default) or FCP's (`fcp_loop`, the paper's or saga's rule); "
        "heft-call (fcp-call, fcp-ends-call): HEFT (FCP) end to end, its priority and placement in one compiled call "
        "(`heft_call`, `fcp_call`), against our `heft` (`fcp`, `fcp_ends`)",
    )
    args = ap.parse_args()
    try:
        import numba
    except ImportError:
        sys.exit("compiled_probe.py needs numba: pip install '.[compiled]'")
    from solvers_bench import instance

    # compiled first: numba compiles the loops' calls to the module's functions by name
    global bisect_right, arrival, enqueue
    bisect_right = numba.njit(cache=True)(bisect_right)
    arrival = numba.njit(cache=True)(arrival)
    enqueue = numba.njit(cache=True)(enqueue)
    if args.loop.endswith("-call"):
        from solvers.heuristics import fcp, fcp_ends
        from solvers.listsched import heft

        global insert_loop, fcp_loop, rank_loop
        insert_loop, fcp_loop, rank_loop = (numba.njit(cache=True)(f) for f in (insert_loop, fcp_loop, rank_loop))
        if args.loop == "heft-call":
            call, inputs_of, ours_of = heft_call, call_inputs, heft
        else:
            ends = args.loop == "fcp-ends-call"

            def inputs_of(p):
                return fcp_call_inputs(p, 1.0, ends)

            call, ours_of = fcp_call, fcp_ends if ends else fcp
        end_to_end(args, numba.njit(cache=True)(call), inputs_of, ours_of, instance, numba.__version__)
        return
    ends = args.loop == "fcp-ends"
    if args.loop == "heft":
        loop = numba.njit(cache=True)(insert_loop)

        def priority(p, allowed):
            return upward_rank(p, allowed)

        def ours(p, allowed, keys):
            return _insert(p, allowed, keys)[0]

        def compiled(inputs, keys, p):
            return loop(*inputs, keys, *loop_options(p), MAX_GAPS)
    else:
        loop = numba.njit(cache=True)(fcp_loop)

        def priority(p, allowed):
            return fcp_priority(p, allowed)

        def ours(p, allowed, keys):
            return _fcp_place(p, allowed, keys, float("inf"), ends)

        def compiled(inputs, keys, p):
            return loop(*inputs, keys, ends)

    t = time.perf_counter()
    p, _ = instance("layered", 100, 4, 0)
    compiled(loop_inputs(p), priority(p, effective_allowed(p)).astype(np.float64), p)
    first = time.perf_counter() - t
    versions = f"{platform.python_implementation()} {platform.python_version()}, numba {numba.__version__}"
    versions += f", numpy {np.__version__}"
    print(f"# {args.loop}'s loop; {platform.node()}, {versions}; first call {first:.2f} s (compiles, or reads a cache)")
    print(
        f"# medians over {args.seeds} instances of each one's median of {args.repeats} timings (ms); min-max of those"
    )
    head = ["class", "tasks", "P", "rank", "prep", "ours", "(min-max)", "compiled", "(min-max)", "ratio", "same"]
    print(" ".join(f"{h:{w}}" for h, w in zip(head, WIDTHS, strict=True)))
    for kind, het in (("layered", False), ("erdos", False), ("layered", True), ("erdos", True)):
        for n in args.sizes:
            for P in args.processors:
                rank, prep, slow, fast, same = [], [], [], [], True
                for seed in range(args.seeds):
                    p, _ = instance(kind, n, P, seed, hetero=het)
                    allowed = effective_allowed(p)
                    times, keys = _timed(lambda p=p, allowed=allowed: priority(p, allowed), args.repeats)
                    rank.append(statistics.median(times))
                    times, inputs = _timed(lambda p=p: loop_inputs(p), args.repeats)
                    prep.append(statistics.median(times))
                    times, schedule = _timed(lambda p=p, a=allowed, k=keys: ours(p, a, k), args.repeats)
                    slow.append(statistics.median(times))
                    k64 = keys.astype(np.float64)
                    times, (proc, start) = _timed(lambda i=inputs, k=k64, p=p: compiled(i, k, p), args.repeats)
                    fast.append(statistics.median(times))
                    same &= np.array_equal(proc, schedule.processor) and np.array_equal(start, schedule.start)

                def ms(xs):
                    return statistics.median(xs) * 1e3

                spread = [f"({min(x) * 1e3:.3f}-{max(x) * 1e3:.3f})" for x in (slow, fast)]
                cells = [kind + ("-het" if het else ""), f"{n:,}", P, f"{ms(rank):.2f}", f"{ms(prep):.2f}"]
                cells += [
                    f"{ms(slow):.2f}",
                    spread[0],
                    f"{ms(fast):.3f}",
                    spread[1],
                    f"{ms(slow) / ms(fast):.0f}",
                    same,
                ]
                print(" ".join(f"{str(c):{w}}" for c, w in zip(cells, WIDTHS, strict=True)), flush=True)


if __name__ == "__main__":
    main()
