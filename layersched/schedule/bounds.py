"""Memory-aware lower bounds for pipelines: forced idle time in warm-up and cool-down per rank.

They hold for any placement and any number of stages per rank. On rank ``q`` let ``a`` be its
first stage (the lowest index), ``z`` its last, ``t0`` the start of its first pass, and a *chain*
the forward passes from stage ``a`` to the last stage and the ``I`` passes back, with the transfers
between stages on different ranks:

- **Warm-up.** No ``I`` on ``q`` starts before ``t0 + D``, ``D`` the chain from ``F(a)`` to the start
  of ``I(z)``: every micro-batch's ``F(a)`` starts at or after ``t0``. Until then only forwards run,
  and nothing is freed, so their activations fit in the limit together; a forward of stage ``s`` is
  not there before ``t0`` plus the chain from ``a`` to ``s``. The most forward work that fits in the
  window (the rank's stages under the limit, released at those offsets, on one processor, with at
  least one forward of each stage: the first ``I``'s micro-batch runs them all before it) leaves
  the rest of ``D`` idle. Should the first ``I`` come ``x`` later, those forwards may run in that
  extra time, but every release lies inside ``D``, so a window ``x`` longer holds at most ``x`` more
  work: the idle is no less.
- **Cool-down.** After the start of the last ``F(a)`` lies at least the chain from ``F(a)`` back to
  ``I(a)``, then ``I(a)`` and ``W(a)``. That micro-batch's own passes on ``q`` fill part of it; the
  rest only micro-batches already in flight can fill. Each whose ``I(a)`` is still to come holds at
  least ``a``'s activation and has at most its other passes on ``q`` left; any other has only
  ``W`` passes left, each holding its weight-gradient memory. Together they fit in the limit beside
  the last ``F(a)``; what they cannot fill is idle.

Before ``q``'s first ``I`` the micro-batch of that ``I`` has run its forwards of all of ``q``'s stages
(its ``I`` needs them), and nothing is freed yet. So when those, together with the ``m`` activations
of stage ``a``, do not fit in the limit, the last ``F(a)`` waits for memory that a backward frees: it
starts after the warm-up window, and ``span_q >= work_q + idle_warm + idle_cool``. Otherwise the
larger idle is added. With one stage per rank under Zero Bubble's 1p limit this bound equals the
ZB-H1 schedule's iteration time: it proves ZB-H1 optimal there. A fused backward ``B`` counts as the
cheaper of ``B`` and ``I + W``.

**Memory relay** (under a memory limit; often the stronger with several stages per rank). On rank
``k`` nothing is freed before its first ``I`` starts, at ``T``, so at most the limit's worth of
forwards run before ``T``; the others run after it. Its last forward starts only once enough memory
is free for it: all of ``k``'s activations minus the limit, freed by ``I`` and ``W`` passes on ``k``
after ``T``, at best at the cheapest time per byte (an ``I`` with its ``W``, or an ``I`` alone).
So from ``T`` to the end of ``k``'s last forward lies at least that *block* of work. For any rank
``q``: ``T`` comes at least the chain from ``q``'s first pass to an ``I`` on ``k`` after ``q``'s first
pass, and the last forward's micro-batch still has its chain to ``q``'s ``W`` passes after it, so
``span_q >= head + block + tail``. On Zero Bubble's ZB-V row (p=16) it gives a bubble of 0.0697,
which the ZB authors' V generator reaches (published 0.0697): the V's middle rank is such a ``k``.
The forwards before ``T`` must also fit in *time*: each starts no earlier than its offset from
``q``'s first pass (where ``q``'s stage lies before all of ``k``'s), on one processor, so at most
the work `_done_by` allows in the ``head`` runs before ``T``. A later ``T`` lets in no more than it
waits, so the block shrinks by no more than the head grows. Under more memory than ZB-V's this is
what binds: at p=6, m=12 under 14 stage activations the middle rank fits 14 forwards but has time
for 13.1, and the bound rises from 931,985 to 944,834 (1.38%).

**Memory time** (under a memory limit; the strong one when the limit is low). Memory is taken when a
forward starts and given back when the pass that frees it ends. So on rank ``q`` every micro-batch
holds the activation of each of ``q``'s stages ``s`` at least for the chain from the start of ``F(s)``
to the end of ``I(s)`` (the part ``W`` frees, until the end of ``W(s)``). All of it lies inside
``q``'s span, where at most the limit is held at any time: ``span_q * limit >= m * sum over s of
memory * time held``. With a limit of one micro-batch's activations it is about the schedule that
runs the micro-batches one after the other.

**Memory time with its ramps.** The limit cannot be held all along the span: it fills only as fast
as forwards start, and it must be empty again at the end. At ``x`` after ``q``'s first pass only the
forwards started by then have allocated; they ran one at a time, so all but the last lie inside
``[0, x]``: at most one forward's memory plus ``x`` times the most memory per second a forward
allocates. What is held at ``x`` must be freed by the end of the span (every activation is freed on
``q``) by passes that end after ``x``; all but the first of them lie inside, so at most one pass's
freeing plus the time left times the most memory per second an ``I``, ``W`` or fused ``B`` frees.
Memory held over the span is at most the integral of the least of the limit and the two ramps; the
least span in which that reaches what the micro-batches hold is the bound. On the 1.5B interleaved
row at p=8 under 12 stage activations it proves 4,081,290 where the others give 4,009,065.

**Held apart** (under a limit that holds few activations; stronger than memory time there). While a
micro-batch runs from the start of ``F(s)`` to the end of ``I(s)`` on ``q`` it holds all of stage
``s``'s activation, and of every stage of ``q`` below ``s``: their intervals enclose this one (the
forward chain reaches ``s`` after them, the ``I`` chain leaves it before them). Take ``q``'s stages in
order, a depth ``d`` and a depth ``j <= d``. Beside one micro-batch at depth ``d`` at most ``r`` others
fit at depth ``j`` or deeper (``r`` whole depth-``j`` holdings in what the limit leaves). Where
``r = 0``, no micro-batch's depth-``d`` interval meets another's depth-``j`` interval: in the order
in which the depth-``d`` intervals start, each starts after the one before it has ended *and* the
enclosing depth-``j`` interval of either micro-batch has too, at least its own length plus the
longer of the two offsets between the intervals apart. So ``span_q >= head + (m - 1) * that + tail``,
from ``q``'s first pass to the first such interval and from the last to its micro-batch's last ``W``
on ``q``. Where ``r > 0``, each depth-``d`` interval starts after the depth-``j`` interval of one of
the ``r + 1`` micro-batches before it has ended (one offset), or ends after that of one of the
``r + 1`` after it has started (the other): ``(m - 1) // (r + 1)`` such steps. Memory time spreads the
same holding evenly over the limit; where micro-batches cannot all be deep on ``q`` at once, they
queue. On the interleaved p=4, three stages per rank, m=4, under 4 stage activations per rank it
proves 3,736 where memory time proves 3,043 (CP-SAT: 3,894 in 60 s); with one stage per rank under 2
activations it is the optimum where the others fall short (tests).

**One rank alone** (any limit, none included; the strong one with fewer micro-batches than ranks and
several stages per rank). On rank ``q`` every pass has a *release*, the least time from ``q``'s
first pass to its start, and a *tail*, the least time from its end to the end of ``q``'s last pass.
The passes of one kind (``F``, ``I`` or ``W`` of one stage) are alike, so it is enough to bound the
``i``-th earliest of each kind (from 0). The ``i``-th ``F(a)`` starts at least ``i F(a)`` after the
first (they run one at a time), and the ``i``-th ``I(s)`` no earlier than the ``i``-th ``F(a)`` plus
the chain from it. Every stage ``t >= a`` adds more. By the time the ``i``-th ``F(t)`` starts, the
rank of ``t`` has run ``i`` of them and, for ``i + 1`` micro-batches, the forwards of its stages
from ``b`` to below ``t``; by the time the ``i``-th ``I(t)`` ends, those forwards, ``F(t)`` and the
``I`` passes of its stages from ``t`` up, for ``i + 1`` micro-batches. All of them come after the
first ``F(b)``, which comes at least the forward chain from ``a`` to ``b`` after ``q``'s first pass
(``b`` is any stage of that rank from ``a`` to ``t``). The ``i``-th ``F(s)`` then starts no earlier
than the ``i``-th ``F(t)`` of any ``t <= s`` plus the forward chain between, and the ``i``-th
``I(s)`` no earlier than the ``i``-th ``I(t)`` of any ``t >= s`` ends plus the ``I`` chain down to
``s`` (for ``s`` itself: ends no earlier than that). So at the turn of the pipeline the ``I`` passes
follow each other ``F + I`` apart, not only ``F(a)``, and ``2F + I`` on the V, whose rank at the
turn holds the first stage too; the ``i``-th ``W(s)`` starts after the ``i``-th ``I(s)`` ends. The
tail of a ``W`` is 0; of an ``I(s)``, its ``W(s)`` or the ``I`` chain down to a lower stage of ``q``
and that stage's ``W``, whichever is longer; of an ``F(s)``, the chain on to the end of ``I(s)`` and
that ``I``'s tail. Any set of passes runs one at a time after the earliest release in it, and the
pass of the set that ends last has at least the least tail in the set after it: ``span_q >= min
release + their work + min tail``. The best sets are those released at or after some ``h`` with a
tail of at least some ``g`` (enlarging a set to that keeps both minima), and that best is Jackson's
preemptive one-machine bound. The warm-up bound waits only for ``q``'s first ``I``, that of its last
stage; this one sees that the ``I`` passes of ``q``'s lower stages come later down the chain and
queue there.
Interleaved, p=3, m=3 (F=1, I=2, W=1, transfer 2): 45, the optimum, where the others prove 42. The
1.5B interleaved row with two or three stages per rank at p=4, 6, 8 and m = p/2: the schedule `best`
finds in 20 s, proven optimal (up to 10% above the others); the V row at p=4, m=2: 288,106, the
optimum, and at p=8, m=4: 601,790 where the others prove 529,541 (`best`: 608,149).

**Through a rank** (any limit, none included; the strong one where a pipeline's ends are slow). Every
pass on rank ``k`` waits for the forward chain from ``q``'s first stage to ``k``'s first stage, and the
last ``I`` on ``k`` ends after all of ``k``'s forwards and ``I`` passes: a forward's own ``I`` comes
after it. That ``I``'s micro-batch then has the ``I`` passes below it to run, and each of ``q``'s
stages below it its ``W``. So ``span_q >= head + m * (F + I work of k) + tail``, the tail taken for the
stage of ``k`` it is shortest from (a stage with none of ``q``'s below it gives no bound for that
pair). With one stage per rank under Zero Bubble's 2p limit, through the last rank, it equals the
ZB-2p schedule of the 1.5B setting: that schedule's 4.33% bubble is the least there is.

**The first rank and the last together** (any limit; the strong one where the first stage is slower
than the others, as an embedding is, and the last stage's rank holds other stages too). Let ``y`` be
the time from the first pass of stage 0's rank ``q`` to the first ``F`` of the last stage, on rank
``k``. No ``I`` on ``q`` starts before ``y`` plus the chain from that ``F`` to the ``I`` of ``q``'s
last stage, so ``q``'s warm-up window is at least that long, and its idle there (as in the warm-up
bound) grows with ``y``. Before that ``F``, ``k`` runs only forwards of its other stages (each of its
other passes waits for an ``F`` of the last stage), from its first pass, which lies at least the
forward chain from ``k``'s lowest stage to the last before that ``F``. The ``i``-th forward (from 0)
of a stage ``s`` comes ``i`` times the slowest forward of ``s`` and the stages below it after the
first (the ``i + 1`` forwards of each such stage run one at a time on their rank), and that first
comes the chain from stage 0 after ``q``'s first pass. What is released by a time is all ``k`` can
have run by then, and no more than the limit's worth runs before ``k``'s first ``I``: the idle this
leaves on ``k`` shrinks as ``y`` grows. Each rank's cool-down is added as in the warm-up bound. Both
spans hold at the same ``y``, so the bound is the least over ``y`` of the larger: the last rank either
waits for the slow first stage's forwards or starts late and makes the first rank wait. On the 1.5B
interleaved row at p=5, m=10, two stages per rank, with its first and last stage slower
(``benchmarks/multichunk.py --rows uneven``): 1,096,730 where the others prove 1,083,560 (1.2% more).

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> from layersched.describe.stages import pipeline_from_spec
>>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 4, "microbatches": 8, "forward": 2, "backward_input": 2, "backward_weight": 1,
...     "memory_forward": 4, "memory_freed_by_weight": 1, "memory_limit": 16}}))
>>> pipeline_bounds(pipe, [0, 1, 2, 3], "span")  # doctest: +NORMALIZE_WHITESPACE
{'pipeline_idle': 48, 'one_rank': 45, 'through_rank': 45, 'memory_relay': 48, 'memory_time': 33,
 'memory_ramps': 38, 'held_apart': 33}
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product

import numpy as np

from layersched.describe.stages import Pipeline

EXACT_COMBINATIONS = 256
"""Most combinations of forward counts the warm-up bound tries one by one; beyond, a fractional bound
(the bound is computed for every candidate `best` times: 20,000 took 0.42 s on the 8-rank interleaved
row and would grow with the ranks; the fractional bound gives the same figure on both multi-chunk rows)."""


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


def _done_by(window: int, items: list[tuple[int, int, int]], counts, cap: float | None = None) -> float:
    """At most the work one processor does in ``[0, window)`` from ``counts[i]`` forwards of
    ``items[i]`` = (release, duration, memory): for every cut ``x``, what was released before ``x``
    (at most ``x``) plus ``window - x``. With ``cap`` the counts are maxima and the work released
    before each cut is a fractional knapsack of them under ``cap`` (an upper bound for any counts)."""
    best = float(window)
    for x in sorted({rel for rel, _, _ in items} | {window}):
        released = [(d, n, mem) for (rel, d, mem), n in zip(items, counts, strict=True) if rel < x]
        work = float(sum(d * n for d, n, _ in released)) if cap is None else _most_work(released, cap)
        best = min(best, min(work, x) + max(0, window - x))
    return best


def _most_work(items: list[tuple[int, float, int]], cap: float) -> float:
    """The most work of ``items`` = (duration, count, memory each) that fits in ``cap``, counts taken
    fractionally (a fractional knapsack, by work per byte): an upper bound for whole counts."""
    work, room = 0.0, cap
    for d, n, mem in sorted(items, key=lambda t: t[2] / t[0] if t[0] else np.inf):
        take = n if mem <= 0 else max(0.0, min(n, room / mem))
        work, room = work + take * d, room - take * max(mem, 0)
    return work


def _warm_work(window: int, items: list[tuple[int, int, int]], cap: float, m: int) -> float:
    """The most forward work that can fill the warm-up window (see the module text). The micro-batch
    of the rank's first ``I`` has run its forward of every one of the rank's stages before it, so
    the counts tried start at one each: with a slow first stage, a window filled only with its
    forwards is not a schedule."""
    most = [m if mem <= 0 or cap == np.inf else min(m, int(cap // mem)) for _, _, mem in items]
    if np.prod([n + 1.0 for n in most]) > EXACT_COMBINATIONS:
        return _done_by(window, items, most, cap)
    least = 1 if min(most, default=0) >= 1 else 0  # none fits at all: no schedule; bound as before
    best = 0.0
    for counts in product(*(range(least, n + 1) for n in most)):
        if sum(n * mem for n, (_, _, mem) in zip(counts, items, strict=True)) <= cap:
            best = max(best, _done_by(window, items, counts))
    return best


def pipeline_bounds(pipe: Pipeline, stage_to_rank: list[int], objective: str) -> dict[str, int]:
    """The memory-aware bound on the objective (see the module text), for any placement."""
    S, R, m = pipe.num_stages, pipe.num_ranks, pipe.num_microbatches
    rank = list(stage_to_rank)
    F = np.asarray(pipe.forward, dtype=np.int64) + pipe.overhead("F")
    I = np.asarray(pipe.backward_input, dtype=np.int64) + pipe.overhead("I")
    W = np.asarray(pipe.backward_weight, dtype=np.int64) + pipe.overhead("W")
    # a fused backward (its own figure, else I + W with one overhead) may cost less than I + W: bound by
    # the cheaper, which holds for both backward modes (shorter passes never make the optimum longer)
    fused = pipe.backward if pipe.backward is not None else pipe.backward_input + pipe.backward_weight
    B = np.asarray(fused, dtype=np.int64) + pipe.overhead("B")
    I, W = np.minimum(I, B), np.minimum(I + W, B) - np.minimum(I, B)
    # the transfer after stage s, paid only between ranks
    c = [int(pipe.transfer[s]) if s + 1 < S and rank[s] != rank[s + 1] else 0 for s in range(S)]
    down = np.concatenate([[0], np.cumsum([int(F[s]) + c[s] for s in range(S)])])  # F(0) start -> F(s) start
    up = np.concatenate([np.cumsum([int(I[s]) + c[s - 1] if s else int(I[s]) for s in range(S)][::-1])[::-1], [0]])

    def chain(a: int, s: int) -> int:
        """From the start of F(a) to the start of I(s) of the same micro-batch."""
        return int(down[S] - down[a] - c[S - 1] + up[s + 1])

    cap = np.inf if pipe.capacity is None else float(pipe.capacity)
    mf, mw = pipe.mem_forward.tolist(), pipe.mem_freed_by_weight.tolist()
    best_span, best_makespan = 0, 0
    per_rank: dict[int, tuple[int, list[tuple[int, int, int]], int, bool]] = {}  # work, items, cool, disjoint
    for q in range(R):
        mine = [s for s in range(S) if rank[s] == q]
        if not mine:
            continue
        a, z = mine[0], mine[-1]
        work = m * int(sum(F[s] + I[s] + W[s] for s in mine)) + int(sum(pipe.optimizer[s] for s in mine))
        window = chain(a, z)
        items = [(int(down[s] - down[a]), int(F[s]), int(mf[s])) for s in mine]
        warm = max(0, window - int(np.floor(_warm_work(window, items, cap, m))))
        own = int(sum(F[s] + I[s] + W[s] for s in mine))
        trip = chain(a, a) + int(I[a] + W[a])
        if mf[a] <= 0 or cap == np.inf:
            fill = (m - 1) * (own - int(F[a]))
        else:
            budget = int(cap) - int(mf[a])
            fill = _best_fill(
                max(0, min(m - 1, budget // int(mf[a]))) if budget >= 0 else 0,
                max(budget, 0),
                int(mf[a]),
                int(min(mw[s] for s in mine)),
                own - int(F[a]),
                int(max(W[s] for s in mine)),
                len(mine) * (m - 1),
            )
        cool = max(0, trip - own - fill)
        # before q's first I, one micro-batch's forwards of all of q's stages are held (that I needs
        # them): when they and all m of stage a's do not fit together, the last F(a) comes after it
        disjoint = cap != np.inf and m * mf[a] + sum(mf[s] for s in mine if s != a) > cap
        idle = _with_cool(warm, cool, disjoint)
        per_rank[q] = (work, items, cool, disjoint)
        head = int(down[a])
        best_span = max(best_span, work + idle)
        best_makespan = max(best_makespan, head + work + idle)
    out = {"pipeline_idle": best_span if objective == "span" else best_makespan}
    alone = _one_rank(rank, m, F, I, W, c, [int(x) for x in pipe.optimizer], down, chain, objective)
    if alone:
        out["one_rank"] = alone
    through = _through(rank, m, F, I, W, c, down, objective)
    if through:
        out["through_rank"] = through
    waits = _first_waits_on_last(rank, m, F, down, chain, cap, mf, per_rank)
    if waits is not None:
        out["first_and_last"] = _least_of_both(*waits)
    if cap != np.inf:
        relay = _relay(rank, m, F, I, W, mf, mw, int(cap), chain, down, objective)
        if relay:
            out["memory_relay"] = relay
        held, ramps = _memory_time(rank, m, F, I, W, B, mf, mw, int(cap), chain, down, objective)
        if held:
            out["memory_time"] = held
        if ramps:
            out["memory_ramps"] = ramps
        apart = _held_apart(rank, m, I, W, c, mf, int(cap), chain, down, objective)
        if apart:
            out["held_apart"] = apart
    return out


def _with_cool(warm: int, cool: int, disjoint: bool) -> int:
    """A rank's idle from its warm-up idle and its cool-down idle: their sum where the warm-up window
    and the cool-down cannot overlap (``disjoint``, see the module text), else the larger."""
    return warm + cool if disjoint else max(warm, cool)


def _first_waits_on_last(
    rank: list[int],
    m: int,
    F,
    down,
    chain,
    cap: float,
    mf: list[int],
    per_rank: dict[int, tuple[int, list[tuple[int, int, int]], int, bool]],
) -> tuple[int, int, Callable[[int], int], Callable[[int], int]] | None:
    """The first and the last rank together (see the module text): ``(lo, hi, first, last)``, where for
    ``y``, the time from the first rank's first pass to the first ``F`` of the last stage (at least
    ``lo``), ``first(y)`` is at most the first rank's span and ``last(y)`` at most the last stage's
    rank's (constant from ``hi`` on). None where they are one rank, or the last stage's rank holds no
    other stage."""
    S = len(rank)
    q, k = rank[0], rank[S - 1]
    theirs = [s for s in range(S) if rank[s] == k and s != S - 1]  # forwards k may run before its first F(S-1)
    if q == k or not theirs:
        return None
    z = max(s for s in range(S) if rank[s] == q)
    work_q, items_q, cool_q, disjoint_q = per_rank[q]
    work_k, _, cool_k, disjoint_k = per_rank[k]
    turn = chain(S - 1, z)  # from an F(S-1)'s start to the start of its I(z)
    delta = int(down[S - 1] - down[theirs[0]])  # from k's first pass to its first F(S-1), at least
    # the i-th earliest F(s) (from 0) of k's stage s comes i forwards of s and of every stage below it
    # after the first, one at a time on that stage's rank: at offset + i * step from q's first pass
    offset = np.array([int(down[s]) for s in theirs], dtype=np.int64)
    step = np.array([int(max(F[t] for t in range(s + 1))) for s in theirs], dtype=np.int64)
    length = np.array([int(F[s]) for s in theirs], dtype=np.int64)
    # before k's first I nothing is freed there, so at most the limit's worth of forwards run
    most = _most_work([(int(F[s]), m, mf[s]) for s in theirs], cap)
    releases = np.unique((offset[:, None] + np.arange(m)[None, :] * step[:, None]).ravel())

    def first(y: int) -> int:
        window = y + turn
        warm = max(0, window - int(np.floor(_warm_work(window, items_q, cap, m))))
        return work_q + _with_cool(warm, cool_q, disjoint_q)

    def last(y: int) -> int:
        start = y - delta  # k's first pass, at the latest
        cuts = np.append(releases[(releases > start) & (releases <= y)], y)
        ahead = np.maximum(cuts[:, None] - offset[None, :], 0)  # released before the cut: i * step < ahead
        counts = np.where(step[None, :] > 0, -(-ahead // np.maximum(step, 1)[None, :]), np.where(ahead > 0, m, 0))
        done = np.minimum((np.minimum(counts, m) * length[None, :]).sum(axis=1), most)
        idle = max(0.0, float(np.max(cuts - start - done)))
        return work_k + _with_cool(int(np.ceil(idle)), cool_k, disjoint_k)

    lo = int(down[S - 1])  # every F(S-1) comes the forward chain after its F(0), on the first rank
    return lo, max(lo, int(releases.max()) + delta + 1), first, last


def _least_of_both(lo: int, hi: int, first: Callable[[int], int], last: Callable[[int], int]) -> int:
    """The least over ``y >= lo`` of the larger of ``first(y)`` (never falling as ``y`` grows) and
    ``last(y)`` (never rising, and constant from ``hi`` on), found by bisection."""
    if first(lo) >= last(lo):
        return first(lo)
    if first(hi) < last(hi):  # from hi on the larger is at least last(hi), and before it too
        return last(hi)
    low, high = lo, hi  # first(low) < last(low), first(high) >= last(high)
    while high - low > 1:
        mid = (low + high) // 2
        if first(mid) >= last(mid):
            high = mid
        else:
            low = mid
    return min(first(high), last(high - 1))


def _down_to(c: list[int], I, W, s: int, b: int) -> int:
    """From the end of ``I(s)`` to the end of ``W(b)`` of the same micro-batch, ``b <= s``: the ``I``
    chain down from ``s`` to ``b`` and ``W(b)``."""
    return int(sum(c[j] + I[j] for j in range(b, s))) + int(W[b])


def _one_rank(rank: list[int], m: int, F, I, W, c: list[int], optimizer: list[int], down, chain, objective: str) -> int:
    """The bound of one rank alone (see the module text): on each rank every pass with its release
    and its tail, and the best set of passes released at or after ``h`` with a tail of at least
    ``g``."""
    S = len(rank)
    i = np.arange(m, dtype=np.int64)
    F, I, W = (np.asarray(x, dtype=np.int64) for x in (F, I, W))
    stages = [[s for s in range(S) if rank[s] == r] for r in range(max(rank) + 1)]
    best = 0
    for mine in stages:
        if not mine:
            continue
        a = mine[0]
        # from the end of I(s) to the end of q's last pass of that micro-batch: its W(s), or the I
        # chain down to a lower stage b of q and W(b)
        tail_i = {s: max(_down_to(c, I, W, s, b) for b in mine[: k + 1]) for k, s in enumerate(mine)}
        # by the time the i-th earliest F(t) of a stage t >= a starts, t's rank has run the forwards of
        # its stages from b to t below t for i + 1 micro-batches, and i F(t); by the time the i-th I(t)
        # ends, those forwards and F(t) for i + 1, and their I passes of its stages from t up. All come
        # after the first F(b), at least the forward chain from a to b after q's first pass; b is any
        # stage of t's rank from a to t. In `down`'s time (from F(0)'s start): at_f[t] and end_i[t]
        at_f, end_i = {}, {}
        for t in range(a, S):
            own = stages[rank[t]]
            up = int(sum(I[u] for u in own if u >= t))
            low = [u for u in own if a <= u <= t]
            ahead = [int(sum(F[u] for u in low[k:-1])) for k in range(len(low))]
            at_f[t] = np.maximum.reduce([down[b] + (i + 1) * f + i * F[t] for b, f in zip(low, ahead, strict=True)])
            end_i[t] = np.maximum.reduce([down[b] + (i + 1) * (f + F[t] + up) for b, f in zip(low, ahead, strict=True)])
        # the i-th earliest I(s) starts after the i-th I(t) of any t >= s ends and the I chain from t
        # down to s (for s itself: its start), and the i-th F(s) after the i-th F(t) of any t <= s
        from_i = {S - 1: end_i[S - 1] - I[S - 1]}
        for t in range(S - 2, a - 1, -1):
            from_i[t] = np.maximum(end_i[t] - I[t], c[t] + from_i[t + 1] + I[t + 1])
        from_f = {a: at_f[a]}
        for t in range(a + 1, S):
            from_f[t] = np.maximum(at_f[t], from_f[t - 1] + F[t - 1] + c[t - 1])
        release, length, tail = [], [], []
        for s in mine:
            # the i-th earliest of each kind of pass on q, from q's first pass (the first F(a)); an
            # I(s) also follows its own F(a) by the chain, and the i-th F(a) starts i F(a) after the first
            at_i = np.maximum(i * F[a] + chain(a, s), from_i[s] - down[a])
            release += [from_f[s] - down[a], at_i, at_i + I[s]]
            length += [np.full(m, F[s]), np.full(m, I[s]), np.full(m, W[s])]
            tail += [np.full(m, chain(s, s) - F[s] + I[s] + tail_i[s]), np.full(m, tail_i[s]), np.zeros(m, np.int64)]
        extra = [optimizer[s] for s in mine if optimizer[s]]  # released at once, no tail
        r = np.concatenate([*release, np.zeros(len(extra), dtype=np.int64)])
        p = np.concatenate([*length, np.asarray(extra, dtype=np.int64)])
        t = np.concatenate([*tail, np.zeros(len(extra), dtype=np.int64)])
        value = 0
        for g in np.unique(t):
            keep = t >= g
            order = np.argsort(-r[keep], kind="stable")
            value = max(value, int(np.max(r[keep][order] + np.cumsum(p[keep][order]))) + int(g))
        best = max(best, value + (int(down[a]) if objective != "span" else 0))
    return best


def _through(rank: list[int], m: int, F, I, W, c: list[int], down, objective: str) -> int:
    """The bound through a rank (see the module text): for ranks ``q`` and ``k`` with ``q``'s first
    stage at or above ``k``'s, the forward chain between them, all of ``k``'s forwards and ``I``
    passes, then from the last ``I`` on ``k`` the ``I`` chain down to ``q``'s stages and their ``W``.
    For the makespan ``q`` is every rank (the chain starts at stage 0, at time 0 or later). 0 where no
    pair gives a bound."""
    S = len(rank)
    stages = [[s for s in range(S) if rank[s] == r] for r in range(max(rank) + 1)]

    best = 0
    for k, theirs in enumerate(stages):
        if not theirs:
            continue
        block = m * int(sum(F[s] + I[s] for s in theirs))
        if objective != "span":  # every stage counts; the chain from stage 0 starts at 0 or later
            tail = min(max(_down_to(c, I, W, s, b) for b in range(s + 1)) for s in theirs)
            best = max(best, int(down[theirs[0]]) + block + tail)
            continue
        for q, mine in enumerate(stages):
            if not mine or mine[0] > theirs[0]:
                continue
            tails = [[_down_to(c, I, W, s, b) for b in mine if b < s or (b == s and q == k)] for s in theirs]
            if all(tails):
                best = max(best, int(down[theirs[0]] - down[mine[0]]) + block + min(max(t) for t in tails))
    return best


def _held_area(mine: list[int], m: int, I, W, mf: list[int], mw: list[int], chain) -> int:
    """Memory times seconds that the activations of a rank's stages ``mine`` are held at least (see
    memory time in the module text): each micro-batch's from the start of its forward to the end of
    its ``I``, the part ``W`` frees to the end of its ``W``."""
    return m * sum((mf[s] - mw[s]) * (chain(s, s) + int(I[s])) + mw[s] * (chain(s, s) + int(I[s] + W[s])) for s in mine)


def _memory_time(
    rank: list[int], m: int, F, I, W, B, mf: list[int], mw: list[int], cap: int, chain, down, objective
) -> tuple[int, int]:
    """The memory-time bound and memory time with its ramps (see the module text), each 0 where it
    proves nothing. On each rank the micro-batches hold their activations at least `_held_area`
    (memory times seconds). The limit alone holds at most ``cap`` times the span; with the ramps,
    `_held_at_most`, so that bound is the least span where that reaches the area. The ramps prove
    nothing where a pass that moves memory takes no time (a ramp without a slope)."""
    flat = ramps = 0
    for q in range(max(rank) + 1):
        mine = [s for s in range(len(rank)) if rank[s] == q]
        area = _held_area(mine, m, I, W, mf, mw, chain)
        if area <= 0:  # also a rank that holds no stage
            continue
        offset = 0 if objective == "span" else int(down[mine[0]])
        span = -(-area // cap)  # the limit alone
        flat = max(flat, offset + span)
        # one forward's memory and the fastest rate at which forwards allocate; one pass's freeing (a
        # fused B frees a whole activation) and the fastest rate at which I, W or B passes free
        up = max(mf[s] for s in mine), max(_rate(mf[s], F[s]) for s in mine)
        freeing = [(mf[s] - mw[s], I[s]) for s in mine] + [(mw[s], W[s]) for s in mine] + [(mf[s], B[s]) for s in mine]
        off = max(mf[s] for s in mine), max(_rate(freed, d) for freed, d in freeing)
        if not (np.isfinite(up[1]) and np.isfinite(off[1])):
            continue
        hi = span + int(np.ceil(cap / up[1] + cap / off[1])) + 1  # both ramps inside: enough (module text)
        while span < hi:  # the least span whose most held memory time reaches the area
            mid = (span + hi) // 2
            span, hi = (span, mid) if _held_at_most(mid, cap, up, off) >= area else (mid + 1, hi)
        ramps = max(ramps, offset + span)
    return flat, ramps


def _rate(freed: float, seconds: float) -> float:
    """Memory per second of a pass that allocates or frees ``freed`` in ``seconds`` (inf for an
    instant that moves memory; 0 for one that moves none)."""
    if freed <= 0:
        return 0.0
    return float(freed) / float(seconds) if seconds > 0 else np.inf


def _held_at_most(span: int, cap: float, up: tuple[float, float], down: tuple[float, float]) -> float:
    """The most memory time (memory times seconds) a rank can hold within a span of ``span``: the
    integral over ``x`` in ``[0, span]`` of ``min(cap, a + r x, f + d (span - x))``, with ``up = (a, r)``
    and ``down = (f, d)``. At ``x`` after the rank's first pass, only forwards that started by then
    have allocated, and they ran one at a time: all but the last lie inside ``[0, x]``, so at most
    one forward's memory plus ``x`` times the fastest rate. What is held at ``x`` must be freed by the
    span's end (every activation is freed on the rank) by passes that end after ``x``: all but the
    first lie inside, so at most one pass's freeing plus the rest of the span times the fastest
    rate. Rounded up by a billionth, so that float error cannot make the bound larger."""
    (a, r), (f, d), L = up, down, float(span)

    def ramp(v0: float, slope: float, length: float) -> float:
        """The integral of ``min(cap, v0 + slope t)`` over ``t`` in ``[0, length]``."""
        if length <= 0:
            return 0.0
        flat = max(0.0, min(length, (cap - v0) / slope))  # until the ramp meets the limit (0 from above it)
        return flat * (v0 + min(cap, v0 + slope * flat)) / 2 + (length - flat) * cap

    # below the limit the two ramps cross at most once: up to the crossing the rising one is the lesser
    cross = min(L, max(0.0, (f + d * L - a) / (r + d)))
    held = ramp(a, r, cross) + ramp(f, d, L - cross)
    return held * (1 + 1e-9)


def _relay(
    rank: list[int], m: int, F, I, W, mf: list[int], mw: list[int], cap: int, chain, down, objective: str
) -> int:
    """The memory relay bound (see the module text): for ranks ``q`` and ``k``, the chain from ``q``'s
    first pass to ``k``'s first ``I``, then ``k``'s forwards that did not fit before it and the fewest
    passes that free enough memory for ``k``'s last forward, then the chain from that forward to
    ``q``'s last ``W`` of its micro-batch. 0 where no rank must free memory before its last forward."""
    S = len(rank)
    stages = [[s for s in range(S) if rank[s] == r] for r in range(max(rank) + 1)]

    def tail(mine, theirs) -> int:
        """From the end of the last forward on ``mine``'s rank to the last W on ``theirs`` of its
        micro-batch: the least over which stage that forward is of."""
        return min(max(chain(f, s) - int(F[f]) + int(I[s] + W[s]) for s in theirs) for f in mine)

    best = 0
    for mine in stages:
        excess = m * sum(mf[s] for s in mine) - cap  # bytes freed on k before its last forward starts
        if not mine or excess <= 0:
            continue
        # forwards before k's first I: nothing is freed yet, so at most the limit's worth (a
        # fractional knapsack by work per byte bounds the work they can take off the block)
        early = _most_work([(int(F[s]), m, mf[s]) for s in mine], cap)
        work_f = m * int(sum(F[s] for s in mine))
        # the cheapest way to free a byte: an I with its W (all of the forward's memory), or an I alone
        rates = [(int(I[s] + W[s]), mf[s]) for s in mine if mf[s] > 0]
        rates += [(int(I[s]), mf[s] - mw[s]) for s in mine if mf[s] - mw[s] > 0]
        freeing = min(-(-excess * cost // freed) for cost, freed in rates)

        # per rank q (every stage for the makespan): the head, and q's stages before all of k's,
        # from which k's forwards before its first I must also fit in time (`_forwards_in`)
        if objective == "span":
            ends = [(max(min(chain(a, s) for s in mine) for a in t), t) for t in stages if t]
        else:
            ends = [(min(chain(0, s) for s in mine), list(range(S)))]
        for head, theirs in ends:
            starts = [a for a in theirs if a <= mine[0]] if objective == "span" else [0]
            fits = min([early] + [_forwards_in(head, mine, a, down, F, mf, m, cap) for a in starts])
            best = max(best, head + work_f - int(np.floor(fits)) + freeing + tail(mine, theirs))
    return best


def _forwards_in(head: int, mine: list[int], first: int, down, F, mf: list[int], m: int, cap: float) -> float:
    """At most the forward work of the stages ``mine`` (one rank, ``m`` micro-batches each, under
    ``cap``) that runs within ``head`` of a pass before every forward of stage ``first`` (at most each
    of ``mine``): each forward comes at least its chain offset from that stage after it, and they run
    one at a time (`_done_by`). A window ``x`` longer holds at most ``x`` more."""
    items = [(int(down[s] - down[first]), int(F[s]), int(mf[s])) for s in mine]
    return _done_by(head, items, [m] * len(mine), cap)


def _held_apart(rank: list[int], m: int, I, W, c: list[int], mf: list[int], cap: int, chain, down, objective) -> int:
    """The held-apart bound (see the module text): on each rank ``q``, for a depth ``d`` of its stages
    and a depth ``j <= d``, at most ``beside`` other micro-batches can be inside their depth-``j``
    interval while one is inside its depth-``d`` interval. In the order the depth-``d`` intervals start,
    each then starts after the enclosing depth-``j`` interval of one of the ``beside + 1`` before it
    has ended; in the order they end, each ends after one of the ``beside + 1`` after it has started.
    With ``beside == 0`` both hold for neighbours at once. Then the chain from the last one to ``q``'s
    last ``W`` of its micro-batch. 0 where every depth fits beside every other micro-batch's."""
    best = 0
    for q in range(max(rank) + 1):
        mine = [s for s in range(len(rank)) if rank[s] == q]
        held = np.cumsum([mf[s] for s in mine])  # held[i]: the activations of mine[0..i] together
        for d, deep in enumerate(mine):
            length = chain(deep, deep) + int(I[deep])  # from the start of F(deep) to the end of I(deep)
            if length <= 0 or held[d] > cap:  # an instant meets nothing; over the limit, nothing fits
                continue
            head = int(down[deep] - down[mine[0]]) if objective == "span" else int(down[deep])
            ends = [chain(deep, s) + int(I[s] + W[s]) for s in mine]  # F(deep)'s start to each W's end
            tail, below = max(ends), max(e for s, e in zip(mine, ends, strict=True) if s <= deep)
            for j in range(d + 1):
                if held[j] <= 0 or (beside := (cap - int(held[d])) // int(held[j])) >= m - 1:
                    continue
                outer = mine[j]
                before = int(down[deep] - down[outer])  # from the start of F(outer) to the start of F(deep)
                after = int(sum(c[t] + I[t] for t in range(outer, deep)))  # end of I(deep) to end of I(outer)
                if beside == 0:
                    best = max(best, head + (m - 1) * (length + max(before, after)) + tail)
                    continue
                rounds = (m - 1) // (beside + 1)
                # from I(deep)'s end only the stages at or below it are reached: `below`, less its length
                best = max(best, head + rounds * (length + after) + tail, head + rounds * (length + before) + below)
    return best
