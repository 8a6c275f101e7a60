"""A memory-bounded greedy for any placement and any number of stages per rank.

Zero Bubble's heuristic (`templates.zb_greedy`) assumes one stage per rank. This one simulates the
whole pipeline instead: the rank that can act earliest acts next, on what has arrived by then:

1. a backward for inputs (``I``) first: it feeds the rank below and frees memory;
2. else a forward (``F``), while memory allows. With ``reserve="all"`` a micro-batch *reserves* the
   activations of all its stages on a rank when its first forward there starts, so its later
   forwards always fit and no rank can fill its memory with micro-batches that cannot finish: no
   deadlock at any limit of at least `Pipeline.least_memory`. Lighter rules (``"oldest"``: keep room
   for the oldest micro-batch still forwarding on the rank; ``"none"``: only the pass's own room)
   fit more forwards but can stall; a variant that stalls is dropped;
3. else a weight pass (``W``), which fills the gap and frees memory.

Variants order the ready passes by micro-batch then stage (``depth``: finish what is in flight), by
stage then micro-batch (``breadth``), or in groups of as many micro-batches as ranks, stage by stage
within a group (``grouped``: Megatron's interleaving), and put ``I`` before or after ``F``;
`chunk_greedy` keeps the fastest variant. `paced_greedy` lets micro-batches into the pipeline a
searched pace apart, for limits under which they would otherwise queue holding their memory.

Three helpers serve templates that choose among orders (`templates.interleaved_zb_mem`): `replay`
times fixed per-rank orders, `peaks` gives their peak memory, and `follow` keeps each rank's
sequences of forwards and ``I`` passes but switches between them as the passes are timed, within a
memory limit.

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> from layersched.describe.stages import pipeline_from_spec
>>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 4, "stages_per_rank": 2, "placement": "v", "microbatches": 4, "forward": 2,
...     "backward_input": 2, "backward_weight": 1, "memory_forward": 1, "memory_freed_by_weight": 0,
...     "memory_limit": 4}}))
>>> orders = chunk_greedy(pipe)
>>> [len(o) for o in orders], orders[0][:3]
([24, 24], ['0F0', '0F1', '0F2'])
"""

from __future__ import annotations

import heapq
from itertools import product

import numpy as np

from layersched.describe.stages import Pipeline
from layersched.schedule.graph import parse_action


class _Flow:
    """Pass durations (action overhead included), per-rank stages and memory of a pipeline, and when
    each pass's input is there, from the ends of the passes timed so far."""

    def __init__(self, pipe: Pipeline) -> None:
        self.S, self.m, self.R = pipe.num_stages, pipe.num_microbatches, pipe.num_ranks
        self.rank = pipe.stage_to_rank()
        self.dur = pipe.pass_durations()
        mf, mw = pipe.mem_forward.tolist(), pipe.mem_freed_by_weight.tolist()
        self.mf = mf
        self.delta = {"F": mf, "I": [w - f for f, w in zip(mf, mw, strict=True)], "W": [-w for w in mw]}
        self.c = pipe.transfer.tolist()
        self.mine = [[s for s in range(self.S) if self.rank[s] == r] for r in range(self.R)]
        self.end: dict[tuple[str, int, int], int] = {}

    def fed(self, k: str, s: int) -> int:
        """The rank whose next pass may get its input from pass ``k`` of stage ``s``: the next stage's
        forward, the stage below's ``I``, or this stage's own ``I`` or ``W``. Once that pass is timed,
        only two ranks' next decisions can change: the rank that ran it, and this one."""
        if k == "F" and s + 1 < self.S:
            return self.rank[s + 1]
        if k == "I" and s > 0:
            return self.rank[s - 1]
        return self.rank[s]

    def arrival(self, k: str, s: int, i: int) -> int | None:
        """When the input of pass ``k`` of micro-batch ``i`` on stage ``s`` is there (None: not yet)."""
        end, rank, c, S = self.end, self.rank, self.c, self.S
        if k == "F":
            if s == 0:
                return 0
            e = end.get(("F", s - 1, i))
            return None if e is None else e + (c[s - 1] if rank[s - 1] != rank[s] else 0)
        if k == "I":
            if s == S - 1:
                return end.get(("F", s, i))
            e = end.get(("I", s + 1, i))
            return None if e is None else e + (c[s] if rank[s + 1] != rank[s] else 0)
        return end.get(("I", s, i))


class _Earliest:
    """The rank that acts next in a simulation: the least (time, rank) among the ranks' current
    decisions. A heap of (time, rank), where an entry is dropped once its rank has decided anew."""

    def __init__(self, times: list[int | None]) -> None:
        self.time = list(times)  # each rank's current decision time (None: nothing it can time yet)
        self.heap = [(t, r) for r, t in enumerate(times) if t is not None]
        heapq.heapify(self.heap)

    def set(self, r: int, t: int | None) -> None:
        """Rank ``r`` decided anew: its next pass at ``t`` (None: nothing it can time yet)."""
        self.time[r] = t
        if t is not None:
            heapq.heappush(self.heap, (t, r))

    def pop(self) -> tuple[int, int] | None:
        """(time, rank) of the rank that acts next, or None when no rank can act."""
        heap, time = self.heap, self.time
        while heap and time[heap[0][1]] != heap[0][0]:
            heapq.heappop(heap)  # that rank decided anew since
        return heapq.heappop(heap) if heap else None


def replay(pipe: Pipeline, orders: list[list[str]]) -> int | None:
    """The steady-state span (the largest per-rank span of the compute passes) of fixed per-rank
    orders timed at their earliest starts, or None when they deadlock. Memory is not checked. A quick
    measure for templates that choose among orders; the task graph's timing has the last word."""
    flow = _Flow(pipe)
    todo = [[parse_action(a) for a in order] for order in orders]
    pos, free, first = [0] * len(todo), [0] * len(todo), [None] * len(todo)
    moved = True
    while moved:
        moved = False
        for r, acts in enumerate(todo):
            while pos[r] < len(acts):
                s, k, i = acts[pos[r]]
                t = flow.arrival(k, s, i)
                if t is None:
                    break
                t = max(t, free[r])
                first[r] = t if first[r] is None else first[r]
                flow.end[k, s, i] = free[r] = t + flow.dur[k][s]
                pos[r], moved = pos[r] + 1, True
    if any(p < len(acts) for p, acts in zip(pos, todo, strict=True)):
        return None
    return max(free[r] - first[r] for r in range(len(todo)) if first[r] is not None)


def peaks(pipe: Pipeline, orders: list[list[str]]) -> list[int]:
    """Each rank's peak memory running its order: a rank's memory changes only by its own passes."""
    delta, out = _Flow(pipe).delta, []
    for order in orders:
        held = peak = 0
        for a in order:
            s, k, _ = parse_action(a)
            held += delta[k][s]
            peak = max(peak, held)
        out.append(peak)
    return out


def fit_memory(pipe: Pipeline, orders: list[list[str]], cap: float) -> list[list[str]] | None:
    """``orders`` with weight passes moved earlier, just as far as each rank's memory needs to stay
    within ``cap`` (unchanged where it does), or None when that is not enough.

    A ``W`` frees what its ``I`` left (Zero Bubble's ``32h`` per layer), so a template whose ``W``
    passes trail their ``I`` passes can pass a limit only because of them. Walking each rank's order,
    before a forward that would not fit, the ``W`` passes owed run first, oldest first, until it
    fits; a ``W`` already run is dropped from its old place. Nothing else moves, and a ``W`` only
    moves earlier (after its ``I``, on the same rank), so no dependency breaks.

    >>> from layersched.describe.config import ProblemSpec
    >>> from layersched.describe.stages import pipeline_from_spec
    >>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
    ...     "stages": 1, "microbatches": 3, "forward": 1, "backward_input": 1, "backward_weight": 1,
    ...     "memory_forward": 4, "memory_freed_by_weight": 2}}))
    >>> order = ["0F0", "0I0", "0F1", "0I1", "0F2", "0I2", "0W0", "0W1", "0W2"]
    >>> peaks(pipe, [order])
    [8]
    >>> fit_memory(pipe, [order], 6)
    [['0F0', '0I0', '0F1', '0I1', '0W0', '0F2', '0I2', '0W1', '0W2']]
    >>> fit_memory(pipe, [order], 3) is None
    True
    """
    delta, out = _Flow(pipe).delta, []
    for order in orders:
        held, owed, row = 0, [], []
        for a in order:
            s, k, i = parse_action(a)
            if k == "W":
                if (s, i) in owed:  # else it ran earlier, where a forward needed its room
                    owed.remove((s, i))
                    row.append(a)
                    held += delta["W"][s]
                continue
            if k == "F":
                while held + delta["F"][s] > cap and owed:
                    ws, wi = owed.pop(0)
                    row.append(f"{ws}W{wi}")
                    held += delta["W"][ws]
                if held + delta["F"][s] > cap:
                    return None
            row.append(a)
            held += delta[k][s]
            if k == "I":
                owed.append((s, i))
        out.append(row)
    return out


def simulate(
    pipe: Pipeline, cap: float, *, order: str, backward_first: bool, reserve: str = "all", pace: int = 0
) -> tuple[list[list[str]], int] | None:
    """Per-rank compute orders of one greedy variant and their steady-state span (each pass starts as
    early as its rank and input allow: the earliest-start timing of these orders), or None when the
    variant cannot go on. Memory never exceeds ``cap``: each ``reserve`` rule admits a forward only
    where it fits (with ``"all"``, every later forward of a micro-batch is covered by its reservation).
    With ``pace``, micro-batch ``i`` enters the pipeline (its first stage's forward) no earlier than
    ``i * pace`` (`paced_greedy`)."""
    flow = _Flow(pipe)
    S, m, R = flow.S, flow.m, flow.R
    dur, mf, mine, end, arrival = flow.dur, flow.mf, flow.mine, flow.end, flow.arrival
    first_stage = [min(st) for st in mine]
    footprint = [sum(mf[s] for s in st) for st in mine]
    nxt = {k: [0] * S for k in "FIW"}  # next micro-batch of each kind per stage (micro-batch order)
    free, mem, reserves, first = [0] * R, [0] * R, [0] * R, [None] * R
    todo_here: list[dict[int, int]] = [{} for _ in range(R)]  # micro-batch -> activations still to come here
    orders: list[list[str]] = [[] for _ in range(R)]
    kind_rank = {"I": 0, "F": 1, "W": 2} if backward_first else {"F": 0, "I": 1, "W": 2}
    priority = {  # within a kind: the variant's ordering; ``way`` is the direction the pass travels
        "depth": lambda i, s, way: (i, -s),
        "breadth": lambda i, s, way: (way, i),
        "grouped": lambda i, s, way: (i // R, way, i),
    }[order]

    def fits(r: int, s: int, i: int) -> bool:
        if reserve == "none":  # only the pass's own room: may stall (the variant is then dropped)
            return mem[r] + mf[s] <= cap
        if reserve == "all":
            if s == first_stage[r]:  # a new micro-batch on this rank reserves all its stages here
                return mem[r] + reserves[r] + footprint[r] <= cap
            return True  # reserved when its first forward here started
        # "oldest": the oldest micro-batch still forwarding here takes its own room; any other forward
        # leaves room for that one's remaining forwards here
        left = dict(todo_here[r])
        left.setdefault(i, footprint[r])
        waiting = [j for j, need in left.items() if need > 0]
        oldest = min(waiting) if waiting else i  # none waiting: nothing to keep room for (no memory per forward)
        left[i] -= mf[s]
        return mem[r] + mf[s] + (left[oldest] if oldest != i else 0) <= cap

    def choice(r: int):
        """(time, rank, pass) of rank r's next decision, the pass being (start, priority, kind, stage):
        the first by priority among the passes whose input is known and that can start earliest;
        None when nothing of r's can be timed yet. No two passes of a rank share a priority, so that
        is the least (start, priority)."""
        best = None
        for s in mine[r]:
            for k in "FIW":
                i = nxt[k][s]
                if i >= m:
                    continue
                a = arrival(k, s, i)
                if a is None:
                    continue
                start = max(free[r], a, i * pace if k == "F" and s == 0 else 0)
                if (best is not None and start > best[0]) or (k == "F" and not fits(r, s, i)):
                    continue
                x = (start, (kind_rank[k], *priority(i, s, -s if k == "I" else s)), k, s)
                if best is None or x < best:
                    best = x
        return None if best is None else (best[0], r, best)

    # a pass changes only its own rank's state and the input of the next pass of its micro-batch, so
    # each step re-decides those ranks alone (the others' choices cannot have changed)
    chosen = [choice(r) for r in range(R)]
    earliest = _Earliest([None if c is None else c[0] for c in chosen])
    todo = 3 * S * m
    while todo:
        acts = earliest.pop()
        if acts is None:
            return None  # nothing can move: memory holds only what cannot finish
        t, r = acts
        _, _, (_, _, k, s) = chosen[r]
        i = nxt[k][s]
        end[(k, s, i)] = free[r] = t + dur[k][s]
        first[r] = t if first[r] is None else first[r]
        nxt[k][s] += 1
        if k == "F":
            reserves[r] += (footprint[r] if s == first_stage[r] else 0) - mf[s]
            todo_here[r][i] = todo_here[r].get(i, footprint[r]) - mf[s]
            if todo_here[r][i] == 0:
                del todo_here[r][i]
        mem[r] += flow.delta[k][s]
        orders[r].append(f"{s}{k}{i}")
        todo -= 1
        for q in {r, flow.fed(k, s)}:  # only these ranks' next decisions can have changed
            chosen[q] = choice(q)
            earliest.set(q, None if chosen[q] is None else chosen[q][0])
    return orders, max(free[r] - first[r] for r in range(R))


def follow(
    pipe: Pipeline,
    forwards: list[list[tuple[int, int]]],
    backwards: list[list[tuple[int, int]]],
    warm: list[int],
    lag: list[int],
    cap: float,
) -> tuple[list[list[str]], int] | None:
    """Per-rank orders that keep each rank's sequences of forwards and ``I`` passes ((stage,
    micro-batch) pairs, in turn) but decide when to switch between them as the passes are timed.

    Rank ``r`` runs ``warm[r]`` forwards, then alternates a forward with an ``I``, except that it runs
    the other kind first when the one due must wait longer for its input, or is a forward that does
    not fit in ``cap``; its ``W`` passes trail its ``I`` passes by ``lag[r]`` and the last ones close
    its order. The rank that can act earliest acts next, so nothing waits on a pass that cannot come:
    the result is None only when every rank waits (memory full of passes that cannot go on), with
    their steady-state span otherwise."""
    flow = _Flow(pipe)
    R = len(forwards)
    fpos, ipos, free, mem = [0] * R, [0] * R, [0] * R, [0] * R
    owed: list[list[tuple[int, int]]] = [[] for _ in range(R)]
    forward_due = [True] * R
    orders: list[list[str]] = [[] for _ in range(R)]
    first: list[int | None] = [None] * R
    left = sum(3 * len(f) for f in forwards)

    def choice(r: int):
        """(pass, r) that rank r runs next and when, or None when nothing of r's can be timed yet."""
        if owed[r] and (len(owed[r]) > lag[r] or ipos[r] == len(backwards[r])):
            s, i = owed[r][0]
            return (free[r], "W", s, i), r
        ready = {}
        if fpos[r] < len(forwards[r]):
            s, i = forwards[r][fpos[r]]
            t = flow.arrival("F", s, i)
            if t is not None and mem[r] + flow.mf[s] <= cap:
                ready["F"] = (max(t, free[r]), "F", s, i)
        if fpos[r] >= warm[r] and ipos[r] < len(backwards[r]):
            s, i = backwards[r][ipos[r]]
            t = flow.arrival("I", s, i)
            if t is not None:
                ready["I"] = (max(t, free[r]), "I", s, i)
        if not ready:
            return None
        due = "F" if forward_due[r] or fpos[r] < warm[r] else "I"
        soonest = min(ready.values())
        return (ready[due] if due in ready and ready[due][0] <= soonest[0] else soonest), r

    chosen = [choice(r) for r in range(R)]
    earliest = _Earliest([None if c is None else c[0][0] for c in chosen])
    while left:
        acts = earliest.pop()
        if acts is None:
            return None
        t, r = acts
        (_, k, s, i), _ = chosen[r]
        first[r] = t if first[r] is None else first[r]
        flow.end[k, s, i] = free[r] = t + flow.dur[k][s]
        mem[r] += flow.delta[k][s]
        orders[r].append(f"{s}{k}{i}")
        left -= 1
        if k == "F":
            fpos[r] += 1
            forward_due[r] = False
        elif k == "I":
            ipos[r] += 1
            owed[r].append((s, i))
            forward_due[r] = True
        else:
            owed[r].pop(0)
        for q in {r, flow.fed(k, s)}:  # only these ranks' next decisions can have changed
            chosen[q] = choice(q)
            earliest.set(q, None if chosen[q] is None else chosen[q][0][0])
    return orders, max(free[r] - first[r] for r in range(R) if first[r] is not None)


def simulation_steps(pipe: Pipeline) -> int:
    """Passes times ranks: the measure of a greedy search's size that the templates' time estimates
    (`Template.seconds_per_step`) and `MAX_WORK` use. A simulation picks, for every pass, the earliest
    of every rank's next decision, and re-decides only the rank that acted and the rank it fed."""
    return 3 * pipe.num_stages * pipe.num_microbatches * pipe.num_ranks


MAX_WORK = 250_000
"""`simulation_steps` that `chunk_greedy` takes on, for each of its 18 variants. Measured on the 2-core
machine since each step re-decides only the ranks it changed (before, every rank for every pass): the
1.5B interleaved row at p=16, m=48 (110,592 steps) 2.2 s, was 12.3 s; at p=24, m=48 (248,832) 3.5 s;
the V row at p=24, m=48 (165,888) 1.5 s, was 15.4 s; and 12,288 passes on 64 ranks (786,432, over the
limit) 5.0 s, was 61 s. Per step the time falls as ranks grow (3.4e-5 s at p=12, 6.4e-6 at p=64).
Session 41 measured the same code slower (4.9, 7.5 and 3.5 s on the first three rows), then made a
rank's decision one pass over its passes (the least start and priority, a forward's memory rule
checked only where it could be chosen) and the choice among ranks a heap: 2.9, 4.3 and 1.9 s (min of
3 runs each; the same orders on 600 random pipelines and five rows, every variant)."""


def chunk_greedy(pipe: Pipeline) -> list[list[str]]:
    """The fastest greedy variant (by steady-state span of its compute passes) within the memory
    limit; `ValueError` when the limit is below `Pipeline.least_memory`."""
    cap = np.inf if pipe.capacity is None else pipe.capacity
    if cap < pipe.least_memory():
        raise ValueError(f"memory limit {pipe.capacity} is below the least any schedule needs, {pipe.least_memory()}")
    runs = [
        simulate(pipe, cap, order=o, backward_first=b, reserve=a)
        for o, b, a in product(("depth", "breadth", "grouped"), (True, False), ("all", "oldest", "none"))
    ]
    runs = [run for run in runs if run is not None]
    if not runs:
        raise ValueError("every greedy variant stopped: nothing could move within the memory limit")
    return min(runs, key=lambda run: run[1])[0]


PACED_VARIANTS = (("depth", False, "none"), ("breadth", False, "none"))
"""The greedy variants `paced_greedy` paces: forwards before ``I`` passes, only each pass's own room.
Those were the fastest paced on the rows measured (the 1.5B interleaved row under 11.6 activations
per rank, the V row at p=16, m=48 under 4); with a reservation or ``I`` first, pacing gained little."""

PACE_GRID = (0.3, 0.36, 0.42, 0.5, 0.6, 0.71, 0.84, 1.0)
"""`paced_greedy`'s paces, as shares of the span per micro-batch of the greedy that reserves each
micro-batch's room (unpaced)."""

PACE_REFINE = 4
"""Halvings of the step between the largest pace on `PACE_GRID` that still stalls and the next one up:
the best span sits just above where the variant stops stalling (V row, p=16, m=48, 4 activations)."""


def paced_greedy(pipe: Pipeline) -> list[list[str]]:
    """The fastest of `PACED_VARIANTS` with micro-batches entering the pipeline at most one per pace.

    Under a limit that holds few activations, a greedy lets micro-batches in as fast as the first
    rank can take them; they then hold their activations while they wait on the ranks beyond, and the
    pipeline runs at the pace of its fullest rank anyway, later. Letting them in a fixed time apart
    (`simulate`'s ``pace``) keeps them moving. Paces from 0.3 to 1.0 times the span per micro-batch
    of the variant that reserves each micro-batch's room (it never stalls, and is kept too) are tried
    (`PACE_GRID`), then `PACE_REFINE` halvings above the largest pace that still stalls. Without a
    limit nothing waits for memory, and pacing rarely helps. `ValueError` when the limit is below
    `Pipeline.least_memory`."""
    cap = np.inf if pipe.capacity is None else pipe.capacity
    if cap < pipe.least_memory():
        raise ValueError(f"memory limit {cap} is below the least any schedule needs, {pipe.least_memory()}")
    # the scale of the paces: a variant that reserves all of a micro-batch's room never stalls
    reference = simulate(pipe, cap, order="depth", backward_first=False, reserve="all")
    if reference is None:
        raise ValueError("the greedy stopped: nothing could move within the memory limit")
    found = [reference]
    paces = [max(1, int(share * reference[1] / pipe.num_microbatches)) for share in PACE_GRID]
    for order, backward_first, reserve in PACED_VARIANTS:

        def run(pace: int, order=order, backward_first=backward_first, reserve=reserve):
            out = simulate(pipe, cap, order=order, backward_first=backward_first, reserve=reserve, pace=pace)
            if out is not None:
                found.append(out)
            return out

        run(0)
        stalled = [p for p in paces if run(p) is None]
        going = [p for p in paces if p > max(stalled, default=0)]
        if stalled and going:  # the best pace lies just above the largest that still stalls
            lo, hi = max(stalled), min(going)
            for _ in range(PACE_REFINE):
                mid = (lo + hi) // 2
                if mid in (lo, hi):
                    break
                lo, hi = (mid, hi) if run(mid) is None else (lo, mid)
    return min(found, key=lambda run: run[1])[0]
