"""Known pipeline schedules as templates: each gives every rank its ordered list of actions.

A template only decides the order; `solvers.time_orders` computes the start times from the task
graph (so transfer delays and uneven stages are honoured) and `solvers.validate` checks the result.
Most templates are fixed patterns; ``zb-greedy`` and ``ooo`` simulate the timing to decide the order.
The Zero Bubble family (``zb-h1``, ``zb-h2``, ``zb-greedy``, ``zb-v``) follows Qi et al., "Zero Bubble
Pipeline Parallelism" (ICLR 2024); ``dualpipev`` DeepSeek's DualPipeV; ``interleaved`` Megatron-LM's
interleaved 1F1B; ``kfkb`` Ada-Grouper's kFkB; ``ooo`` out-of-order backprop (Oh et al., EuroSys 2022).

Example
-------
>>> from layersched.describe.stages import pipeline_from_spec
>>> from layersched.describe.config import ProblemSpec
>>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 2, "microbatches": 3, "forward": 1, "backward_input": 1, "backward_weight": 1}}))
>>> template_orders("1f1b", pipe)[0]
['0F0', '0F1', '0B0', '0F2', '0B1', '0B2']
>>> template_orders("zb-h1", pipe)[1]
['1F0', '1I0', '1F1', '1I1', '1W0', '1F2', '1I2', '1W1', '1W2']
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial

from layersched.describe.stages import Pipeline
from layersched.schedule.graph import parse_action


class TemplateError(ValueError):
    """A template that cannot apply to this pipeline; the message says why and what would fit."""


@dataclass(frozen=True)
class Template:
    name: str
    build: Callable[[Pipeline], list[list[str]]]
    split_backward: bool
    placement: str
    description: str
    min_stages_per_rank: int = 1
    max_stages_per_rank: int | None = 1
    greedy: bool = False  # built by a simulated greedy search (several times slower than a fixed pattern)
    seconds_per_step: float = 0.0
    """For a template built by a simulated greedy search: its seconds per pass and rank
    (`layersched.schedule.greedy.simulation_steps`), the slowest measured on the project's 2-core
    machine, so that ``best`` can tell whether it ends in time; 0 where its time goes with the passes
    alone (`layersched.schedule.budget.SECONDS_PER_TASK` covers it)."""
    skip_in_best: Callable[[Pipeline], str | None] | None = None
    """Why ``best`` need not try this template on a pipeline (None: it should), for a template that
    helps only on some and would take time from the search on the others."""
    first_in_best: bool = False
    """Whether ``best`` tries this template before the others of its kind (fixed or greedy), so that
    where it ties one of them, the search starts from it: for a template whose orders are as fast as
    another's and measured to leave the search more room."""


TEMPLATES: dict[str, Template] = {}

KFKB = re.compile(r"^kfkb-(\d+)$")
"""``kfkb-<k>``: Ada-Grouper's kFkB with groups of ``k`` micro-batches (``kfkb`` itself is k = 2)."""


def template(
    name: str,
    *,
    split_backward: bool,
    placement: str = "loop",
    stages_per_rank: tuple[int, int | None] = (1, 1),
    greedy: bool = False,
    seconds_per_step: float = 0.0,
    skip_in_best: Callable[[Pipeline], str | None] | None = None,
    first_in_best: bool = False,
):
    """Register a template builder ``f(pipe) -> per-rank action lists`` under ``name``."""

    def deco(fn: Callable[[Pipeline], list[list[str]]]):
        doc = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split()).replace("``", "")  # first paragraph
        TEMPLATES[name] = Template(
            name,
            fn,
            split_backward,
            placement,
            doc,
            *stages_per_rank,
            greedy,
            seconds_per_step,
            skip_in_best,
            first_in_best,
        )
        return fn

    return deco


def template_names() -> list[str]:
    return sorted(TEMPLATES)


def get_template(name: str) -> Template:
    """The template called ``name``; ``kfkb-<k>`` (k >= 1) gives kFkB with groups of k."""
    if name in TEMPLATES:
        return TEMPLATES[name]
    found = KFKB.match(name)
    if found and int(found[1]) >= 1:
        k = int(found[1])
        base = TEMPLATES["kfkb"]
        return Template(
            name, partial(_kfkb, k=k), base.split_backward, base.placement, f"kFkB with groups of {k} micro-batches"
        )
    raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(template_names())}, kfkb-<k> (k >= 1)")


def template_orders(name: str, pipe: Pipeline) -> list[list[str]]:
    """Per-rank compute actions of template ``name``; `TemplateError` when it does not apply.

    Where a split-backward template's order passes the memory limit, its ``W`` passes run earlier,
    as far as the limit needs (`greedy.fit_memory`): V-Half, for one, then holds Zero Bubble's
    ``(p+2)//2`` micro-batches. Where that is not enough, the order is returned as it is (the
    validator then names the pass that breaks the limit)."""
    from layersched.schedule.greedy import fit_memory

    t = get_template(name)
    try:
        check_stages_per_rank(t, pipe)
    except TemplateError as exc:  # asked for by name: say how to get there (best's candidates list only says why not)
        raise TemplateError(
            f"{exc}; give the problem stages_per_rank: {t.min_stages_per_rank} (under pipeline: or training:), "
            f"or pick a schedule for {pipe.stages_per_rank} ('layersched list')"
        ) from None
    orders = t.build(pipe)
    if t.split_backward and pipe.capacity is not None:  # orders within the limit come back unchanged
        return fit_memory(pipe, orders, pipe.capacity) or orders
    return orders


def check_stages_per_rank(t: Template, pipe: Pipeline) -> None:
    """`TemplateError` when ``pipe`` has a number of stages per rank that template ``t`` cannot lay out."""
    v = pipe.stages_per_rank
    if v < t.min_stages_per_rank or (t.max_stages_per_rank is not None and v > t.max_stages_per_rank):
        want = (
            f"exactly {t.min_stages_per_rank}"
            if t.min_stages_per_rank == t.max_stages_per_rank
            else f"at least {t.min_stages_per_rank}"
        )
        raise TemplateError(f"schedule {t.name!r} needs {want} stage(s) per rank, the pipeline has {v}")


def _steady_order(stage: int, m: int, warm: int, backward: tuple[str, ...], lag: int = 0, group: int = 1) -> list[str]:
    """One stage's order in the 1F1B family: ``warm`` forwards, then the micro-batches' backwards in
    turn, each completed group of ``group`` backwards followed by ``group`` new forwards (while any
    are left). With a split backward (``("I", "W")``) the weight pass of micro-batch ``j - lag``
    follows the ``I`` of micro-batch ``j``; the weight passes still owed come last.

    >>> _steady_order(0, 4, 2, ("B",))
    ['0F0', '0F1', '0B0', '0F2', '0B1', '0F3', '0B2', '0B3']
    >>> _steady_order(0, 3, 1, ("I", "W"), lag=1)
    ['0F0', '0I0', '0F1', '0I1', '0W0', '0F2', '0I2', '0W1', '0W2']
    """
    f = min(warm, m)
    out = [f"{stage}F{i}" for i in range(f)]
    w = 0
    for j in range(m):
        out.append(f"{stage}{backward[0]}{j}")
        if len(backward) > 1 and j >= lag:
            out.append(f"{stage}W{w}")
            w += 1
        if (j + 1) % group == 0:
            out.extend(f"{stage}F{i}" for i in range(f, min(f + group, m)))
            f = min(f + group, m)
    out.extend(f"{stage}W{i}" for i in range(w, m) if len(backward) > 1)
    return out


def _need_multiple(name: str, m: int, k: int, what: str) -> None:
    if m % k:
        raise TemplateError(
            f"schedule {name!r} needs the number of micro-batches to be a multiple of "
            f"{what} ({k}), the pipeline has {m}; the least valid value from there is "
            f"{-(-m // k) * k}"
        )


# -- the 1F1B family (one stage per rank, loop placement) ---------------------------------------------
@template("gpipe", split_backward=False)
def gpipe(pipe: Pipeline) -> list[list[str]]:
    """GPipe: all forwards, then all backwards (fused), one stage per rank."""
    m = pipe.num_microbatches
    return [[f"{r}F{i}" for i in range(m)] + [f"{r}B{i}" for i in range(m)] for r in range(pipe.num_ranks)]


@template("1f1b", split_backward=False)
def one_f_one_b(pipe: Pipeline) -> list[list[str]]:
    """1F1B (PipeDream-flush): p-1-r warm-up forwards on rank r, then alternate, fused backward."""
    p, m = pipe.num_ranks, pipe.num_microbatches
    return [_steady_order(r, m, p - r, ("B",)) for r in range(p)]


@template("1f1b-split", split_backward=True)
def one_f_one_b_split(pipe: Pipeline) -> list[list[str]]:
    """1F1B with the backward split into I then W, W right after its I."""
    p, m = pipe.num_ranks, pipe.num_microbatches
    return [_steady_order(r, m, p - r, ("I", "W")) for r in range(p)]


@template("zb-h1", split_backward=True)
def zb_h1(pipe: Pipeline) -> list[list[str]]:
    """Zero Bubble H1: 1F1B's memory, rank r defers its W passes by r micro-batches to fill the cool-down.

    Rank ``r`` keeps 1F1B's ``p - r`` warm-up forwards and lets each ``W`` trail its ``I`` by ``r``
    micro-batches, so every rank holds ``p`` micro-batches in flight and rank 0, the fullest, peaks at
    1F1B's ``p`` activations. With equal stages and no transfer the bubble (span minus work) is
    ``(p-1)(F+I-W)`` when ``W <= F`` (Zero Bubble's ``(p-1)(T_F+T_B-T_W)``, their ``B`` being our
    ``I``), one third of 1F1B's when ``F = I = W``.
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    return [_steady_order(r, m, p - r, ("I", "W"), lag=r) for r in range(p)]


@template("zb-h2", split_backward=True)
def zb_h2(pipe: Pipeline) -> list[list[str]]:
    """Zero Bubble H2: 2p-1-2r warm-up forwards on rank r, W trailing by 2r: zero bubble at 2x memory.

    The extra forwards fill the bubble before the first backward and the deferred ``W`` passes the
    tail, turning 1F1B's trapezoid into a parallelogram; rank 0 peaks at ``2p-1`` activations. With
    equal stages, transfer ``c <= min(F, I, W)`` and ``m >= 2p-1`` the bubble is ``(p-1)(F+I+2c-2W)``
    when ``W <= F`` and ``2W <= F+I+2c`` (Zero Bubble's ``(p-1)(T_F+T_B+2T_comm-2T_W)``): zero when
    ``F = I = W`` and ``c = 0``.
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    return [_steady_order(r, m, 2 * (p - r) - 1, ("I", "W"), lag=2 * r) for r in range(p)]


def _kfkb(pipe: Pipeline, k: int) -> list[list[str]]:
    p, m = pipe.num_ranks, pipe.num_microbatches
    _need_multiple(f"kfkb-{k}", m, k, "the group size k")
    return [_steady_order(r, m, k * (p - r), ("B",), group=k) for r in range(p)]


@template("kfkb", split_backward=False)
def kfkb(pipe: Pipeline) -> list[list[str]]:
    """Ada-Grouper kFkB (k = 2; ``kfkb-<k>`` for others): 1F1B over groups of k micro-batches.

    Rank ``r`` runs ``k(p-1-r)`` warm-up forwards, then ``k`` forwards and ``k`` (fused) backwards
    per group; ``kfkb-1`` is 1F1B. Needs the micro-batch count to be a multiple of ``k``. With equal
    stages and no transfer the bubble is 1F1B's ``(p-1)(F+I+W)`` for every ``k``. With a transfer,
    1F1B's steady state waits on it at every switch between forward and backward; kFkB switches k
    times less often and its back-to-back passes hide the transfers, at ``k`` times 1F1B's memory.
    """
    return _kfkb(pipe, 2)


# -- interleaved 1F1B (v stages per rank, loop placement) ---------------------------------------------
@template("interleaved", split_backward=False, stages_per_rank=(2, None))
def interleaved(pipe: Pipeline) -> list[list[str]]:
    """Megatron interleaved 1F1B: v stages per rank (stage s on rank s mod p), fused backward.

    Rank ``r`` walks the ``m*v`` virtual micro-batches in Megatron's order (``p`` micro-batches per
    chunk in turn; backward chunks in reverse) with ``2(p-1-r) + (v-1)p`` warm-up forwards. Needs
    ``m`` to be a multiple of ``p``. With equal stages and no transfer the bubble is ``(p-1)(F+I+W)``
    per-stage times, i.e. ``(p-1)(F+B)/v`` in per-rank times: 1F1B's divided by ``v``.
    """
    p, v, m = pipe.num_ranks, pipe.stages_per_rank, pipe.num_microbatches
    _need_multiple("interleaved", m, p, "the number of ranks")
    total = m * v

    def action(r: int, k: int, kind: str) -> str:
        chunk = (k // p) % v
        stage = (chunk if kind == "F" else v - 1 - chunk) * p + r
        return f"{stage}{kind}{(k // (p * v)) * p + k % p}"

    out = []
    for r in range(p):
        warm = min(2 * (p - 1 - r) + (v - 1) * p, total)
        order = [action(r, k, "F") for k in range(warm)]
        for i in range(total - warm):
            order += [action(r, warm + i, "F"), action(r, i, "B")]
        out.append(order + [action(r, k, "B") for k in range(total - warm, total)])
    return out


@template("interleaved-zb", split_backward=True, stages_per_rank=(2, None))
def interleaved_zb(pipe: Pipeline) -> list[list[str]]:
    """Interleaved zero bubble (ZB-1p over v stages per rank), the order of torch's
    ``ScheduleInterleavedZeroBubble``: loop placement, split backward.

    Micro-batches go in rounds of ``g = m / max(1, m // p)``: each rank runs ``g`` forwards of its
    first stage, then ``g`` of its second, and so on (backwards walk the stages in reverse). Rank
    ``r`` starts with ``(v-1)g + p-1-r`` forwards, then alternates a forward with an ``I``; its ``W``
    passes trail the ``I`` passes by ``r`` (ZB-H1's rule), and the ``W`` still owed come last. Needs
    ``m`` to be a multiple of ``max(1, m // p)``. Peak: ``(v-1)g + p - r`` stage activations on rank
    ``r``, interleaved 1F1B's less the ``p-1-r`` forwards it adds in its warm-up.
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    rounds = max(1, m // p)
    _need_multiple("interleaved-zb", m, rounds, "the number of rounds, max(1, m // p)")
    return _rounds_orders(pipe, m // rounds)


def _rounds(pipe: Pipeline, g: int) -> tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]], list[int]]:
    """`interleaved_zb`'s sequences with rounds of ``g`` micro-batches (the last round may be smaller):
    per rank its forwards and its ``I`` passes as (stage, micro-batch), in turn, and its warm-up
    forwards. Each round runs its forwards chunk by chunk, its backwards the chunks in reverse."""
    p, v, m = pipe.num_ranks, pipe.stages_per_rank, pipe.num_microbatches
    rounds = [range(a, min(a + g, m)) for a in range(0, m, g)]
    forwards = [[(c * p + r, i) for rd in rounds for c in range(v) for i in rd] for r in range(p)]
    backwards = [[((v - 1 - c) * p + r, i) for rd in rounds for c in range(v) for i in rd] for r in range(p)]
    warm = [min((v - 1) * len(rounds[0]) + p - 1 - r, m * v) for r in range(p)]
    return forwards, backwards, warm


def _rounds_orders(pipe: Pipeline, g: int) -> list[list[str]]:
    """`interleaved_zb`'s orders with rounds of ``g`` micro-batches (`_turns` of `_rounds`)."""
    return _turns(*_rounds(pipe, g))


def _turns(
    forwards: list[list[tuple[int, int]]], backwards: list[list[tuple[int, int]]], warm: list[int]
) -> list[list[str]]:
    """Per-rank orders from sequences of forwards and ``I`` passes ((stage, micro-batch) pairs) by torch's
    fixed rule: rank ``r`` runs its ``warm[r]`` warm-up forwards, then a forward (while any are left)
    and an ``I`` in turn; its ``W`` passes trail the ``I`` passes by ``r`` (ZB-H1's rule), and the
    ``W`` still owed come last."""
    out = []
    for r, (fw, bw) in enumerate(zip(forwards, backwards, strict=True)):
        order, owed = [f"{s}F{i}" for s, i in fw[: warm[r]]], []
        for k, (s, i) in enumerate(bw):
            if warm[r] + k < len(fw):
                order.append("{}F{}".format(*fw[warm[r] + k]))
            order.append(f"{s}I{i}")
            owed.append(f"{s}W{i}")
            if len(owed) > r:
                order.append(owed.pop(0))
        out.append(order + owed)
    return out


# seconds per step: 6.7e-6 to 1.1e-5 measured (p=12 to 24, 2 or 3 stages per rank); where following leads and
# its chunks are mixed, up to 2.9e-5 (session 70, a slow day: p=5 to 11 under less memory than 1F1B's), rounded up
@template("interleaved-zb-mem", split_backward=True, stages_per_rank=(2, None), greedy=True, seconds_per_step=3.5e-5)
def interleaved_zb_mem(pipe: Pipeline) -> list[list[str]]:
    """Interleaved zero bubble with rounds sized to the memory limit: torch's order, any round size.

    `interleaved_zb`'s order with rounds of ``g`` micro-batches for any ``g`` (the last round may be
    smaller, so any ``m``). A round's forwards are what a rank holds at its peak, ``(v-1)g + p - r``
    stage activations, so the largest ``g`` within the limit keeps the pipeline fullest. Tried:

    - the fixed orders of `_fixed_rounds`: the largest ``g`` whose peak fits and the next smaller
      ones, until four that do not deadlock (small rounds with many ranks can), and torch's round
      size where it fits;
    - for each ``g`` up to ``p``, the same sequences with the switch between forward and ``I`` made
      as they are timed (`greedy.follow`: the other kind first when the due one waits longer, or
      does not fit). That never deadlocks on waiting, and fits far lower limits;
    - where following is at least as fast as every fixed order (under less memory), its fastest round
      size again with each later round's chunks mixed as `interleaved_zb_alt` mixes them
      (`_mixed_rounds`): the ``I`` passes ``dp`` micro-batches apart for each ``dp`` below ``g``, then the
      forwards ``d`` apart with the best ``dp``, about ``2g`` more simulations. On p=4, m=9, v=3 under
      9 stage activations that is 2.7% faster (1,519,092 against 1,562,019; docs/measurements.md,
      session 70).

    The fastest (by the span of its compute passes) is kept. So it is not slower than
    ``interleaved-zb`` where that fits the limit (a property test checks it); under less memory, or
    where ``m`` is not a multiple of the rounds, it is often far faster than anything else that fits.
    """
    from layersched.schedule.greedy import MAX_WORK, follow, simulation_steps

    p, m = pipe.num_ranks, pipe.num_microbatches
    cap = _capacity("interleaved-zb-mem", pipe, pipe.least_memory())
    found = [(span, orders) for span, _, orders in _fixed_rounds(pipe, cap)]
    if simulation_steps(pipe) <= MAX_WORK:  # p simulations (up to 3p where following leads), as chunk-greedy runs 18
        follows = []
        for g in range(1, min(m, p) + 1):
            run = follow(pipe, *_rounds(pipe, g), list(range(p)), cap)
            if run is not None:
                follows.append((run[1], g, run[0]))
        fixed = min((span for span, _ in found), default=None)
        found += [(span, orders) for span, _, orders in follows]
        if follows and (fixed is None or min(f[0] for f in follows) <= fixed):
            # where following leads: its fastest round size with the later rounds' chunks mixed
            # (`_mixed_rounds`), dp, then d
            span, g, orders = min(follows, key=lambda f: f[0])
            mixed_dp = g
            for dp in range(g):
                run = follow(pipe, *_mixed_rounds(pipe, g, g, dp), list(range(p)), cap)
                if run is not None and run[1] < span:
                    span, orders, mixed_dp = run[1], run[0], dp
            for d in range(g):
                run = follow(pipe, *_mixed_rounds(pipe, g, d, mixed_dp), list(range(p)), cap)
                if run is not None and run[1] < span:
                    span, orders = run[1], run[0]
            found.append((span, orders))
    if not found:
        raise TemplateError(
            f"schedule 'interleaved-zb-mem': no round size gives orders within memory_limit {cap} "
            f"{pipe.memory_unit} that do not deadlock; try chunk-greedy"
        )
    return min(found, key=lambda f: f[0])[1]


TRIED_ROUND_SIZES = 12
"""Round sizes `_fixed_rounds` times at most, from the largest that fits down."""


def _torch_round(pipe: Pipeline) -> int:
    """torch's round size, ``ceil(m / max(1, m // p))``: `interleaved_zb`'s where ``m`` is a multiple of
    the rounds, and the nearest to it otherwise."""
    return -(-pipe.num_microbatches // max(1, pipe.num_microbatches // pipe.num_ranks))


_last_fixed: tuple[weakref.ref, float, list[tuple[int, int, list[list[str]]]]] | None = None
"""`_fixed_rounds`' last pipeline (held weakly), limit and result."""


def _fixed_rounds(pipe: Pipeline, cap: float) -> list[tuple[int, int, list[list[str]]]]:
    """``(span, g, orders)`` for each round size ``g`` whose fixed orders (`_rounds_orders`) fit ``cap``
    and do not deadlock, among those tried: the largest ``g`` whose peak fits (by bisection: the peak
    grows with ``g``) and the next smaller ones until four are found (at most `TRIED_ROUND_SIZES`
    sizes), and torch's round size (`_torch_round`) where it fits.

    The last result is kept for the same pipeline object and limit: ``best`` builds
    `interleaved_zb_alt` and `interleaved_zb_mem` on one pipeline, and both need these orders (at
    p=32, m=128 they take 1.1-1.4 s). The caller gets its own copies of the orders."""
    global _last_fixed
    last = _last_fixed  # read once: another thread may replace it
    if last is not None and last[0]() is pipe and last[1] == cap:
        return [(span, g, [list(o) for o in orders]) for span, g, orders in last[2]]
    found = _time_fixed_rounds(pipe, cap)
    _last_fixed = (weakref.ref(pipe), cap, [(span, g, [list(o) for o in orders]) for span, g, orders in found])
    return found


def _time_fixed_rounds(pipe: Pipeline, cap: float) -> list[tuple[int, int, list[list[str]]]]:
    """`_fixed_rounds` without the memo."""
    from layersched.schedule.greedy import peaks, replay

    @cache
    def orders_of(g: int) -> list[list[str]]:  # bisection, the sizes below it and torch's may meet
        return _rounds_orders(pipe, g)

    def fits(g: int) -> bool:
        return max(peaks(pipe, orders_of(g))) <= cap

    lo, hi = 0, pipe.num_microbatches  # the largest g in 1..m whose fixed orders fit (0: none)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    found: list[tuple[int, int, list[list[str]]]] = []

    def fixed(g: int) -> None:
        orders = orders_of(g)
        if (span := replay(pipe, orders)) is not None:
            found.append((span, g, orders))

    for g in range(lo, max(0, lo - TRIED_ROUND_SIZES), -1):
        if len(found) == 4:
            break
        fixed(g)
    torch_g = _torch_round(pipe)
    if torch_g < lo and torch_g not in {g for _, g, _ in found} and fits(torch_g):
        fixed(torch_g)
    return found


def _alternated(pipe: Pipeline, g: int, d: int, dp: int) -> list[list[str]]:
    """`_rounds_orders` with rounds of ``g``, where every round after the first mixes its chunks
    (`_mixed_rounds`' sequences, in torch's fixed turns)."""
    return _turns(*_mixed_rounds(pipe, g, d, dp))


def _mixed_rounds(
    pipe: Pipeline, g: int, d: int, dp: int
) -> tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]], list[int]]:
    """`_rounds`' sequences, where every round after the first mixes its chunks.

    In such a round each rank's forwards go in the order of ``i + c*d`` (micro-batch ``i`` counted
    from the round's first, chunk ``c``; the lower chunk first on a tie), its ``I`` passes in the order
    of ``i + (v-1-c)*dp`` (the higher chunk first). ``d = dp = g`` is torch's order (chunk after
    chunk); ``d = 0`` runs a micro-batch's forwards through all the rank's chunks in turn."""
    p, v = pipe.num_ranks, pipe.stages_per_rank
    forwards, backwards, warm = _rounds(pipe, g)

    def forward_key(pair: tuple[int, int]) -> tuple[int, int, int]:
        s, i = pair
        c = s // p
        return (i // g, 0 if i < g else i % g + c * d, c)  # the first round keeps its order (sorts are stable)

    def backward_key(pair: tuple[int, int]) -> tuple[int, int, int]:
        s, i = pair
        c = s // p
        return (i // g, 0 if i < g else i % g + (v - 1 - c) * dp, -c)

    return [sorted(f, key=forward_key) for f in forwards], [sorted(b, key=backward_key) for b in backwards], warm


def _least(holds: Callable[[int], bool], hi: int) -> int:
    """The least ``x`` in ``0..hi`` for which ``holds(x)``, by bisection (``holds(hi)`` is taken as
    true): exact where ``holds`` is monotone, and where it is not, still an ``x`` for which it holds (or
    ``hi``)."""
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(mid) else (mid + 1, hi)
    return hi


# seconds per step: 4.4e-6 to 9.9e-6 measured in session 69, a slow day (p=7 to 32, 2 or 3 stages per rank;
# `_fixed_rounds`, then 2 log2(g) + 3 replays), rounded up
@template(
    "interleaved-zb-alt",
    split_backward=True,
    stages_per_rank=(2, None),
    seconds_per_step=1.5e-5,
    first_in_best=True,
)
def interleaved_zb_alt(pipe: Pipeline) -> list[list[str]]:
    """Interleaved zero bubble with the chunks of later rounds mixed: torch's order, as fast, more room to improve.

    Rounds of the size whose fixed order is the fastest of those `interleaved_zb_mem` times
    (`_fixed_rounds`; torch's size on a tie), the first round as torch runs it. In each later round a
    rank starts each chunk's forwards ``d`` micro-batches after the chunk before, and its ``I`` passes
    likewise ``dp`` apart (`_alternated`); the fixed order is ``d = dp = g``, one chunk after the
    other. The least ``d``, then the least ``dp``, whose orders fit the limit and are timed no longer
    than the fixed order (each found by bisection, so about ``2 log2(g) + 3`` replays) are kept.

    Its span is that of torch's order or less, and that of every fixed order `interleaved_zb_mem` times
    or less: with more memory than 1F1B's, larger rounds are often faster than torch's. ``best`` tries
    it before the other templates (see `Template.first_in_best`): on a tie its search starts here. In
    25 alternated pairs of 60 s runs against torch's order as the start, 14 were better, 6 equal and 5
    worse; e.g. p=7, m=14, v=2 0.76 and 1.17% against 1.83% twice (docs/measurements.md, session 68).
    On the bundled p=8 row both starts ended at 1.38-1.45% in session 69.
    """
    from layersched.schedule.greedy import peaks, replay

    cap = _capacity("interleaved-zb-alt", pipe, pipe.least_memory())
    torch_g = _torch_round(pipe)
    fixed = _fixed_rounds(pipe, cap)
    if not fixed:
        raise TemplateError(
            f"schedule 'interleaved-zb-alt': no round size gives fixed orders within memory_limit {cap} "
            f"{pipe.memory_unit} that do not deadlock; try interleaved-zb-mem"
        )
    span, g, _ = min(fixed, key=lambda f: (f[0], f[1] != torch_g))  # the fastest; on a tie torch's size

    def holds(d: int, dp: int) -> bool:
        orders = _alternated(pipe, g, d, dp)
        if max(peaks(pipe, orders)) > cap:
            return False
        timed = replay(pipe, orders)
        return timed is not None and timed <= span

    d = _least(lambda d: holds(d, g), g)
    dp = _least(lambda dp: holds(d, dp), g)
    return _alternated(pipe, g, d, dp)


# -- V-shaped schedules (two stages per rank: r going down, 2p-1-r coming back) -----------------------
class _Counter:
    """Appends actions of one rank, numbering the micro-batches of each (stage, kind) in turn."""

    def __init__(self):
        self.out: list[tuple[int, str, int]] = []
        self.count: dict[tuple[int, str], int] = {}

    def __call__(self, stage: int, kind: str) -> None:
        i = self.count.get((stage, kind), 0)
        self.count[stage, kind] = i + 1
        self.out.append((stage, kind, i))

    def n(self, stage: int, kind: str) -> int:
        return self.count.get((stage, kind), 0)

    def names(self, m: int) -> list[str]:
        return [f"{s}{k}{i}" for s, k, i in self.out if i < m]


@template("zb-v", split_backward=True, placement="v", stages_per_rank=(2, 2))
def zb_v(pipe: Pipeline) -> list[list[str]]:
    """Zero Bubble V: two stages per rank in a V, 1F1B's memory, zero bubble when F = I = W.

    Rank ``r`` holds stage ``r`` (down) and ``2p-1-r`` (up): ``2(p-r)-1`` down forwards, ``r`` up/down
    forward pairs, ``p-r`` rounds of up F, I, W, then the steady round (down F, I, W; up F, I, W);
    the cool-down runs the backward passes first and the weight passes last. Fewer than ``2p-1``
    micro-batches are planned as ``2p-1`` with the missing ones left out. Peak: ``2p`` stage
    activations, 1F1B's ``p`` whole-rank activations.
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    n = max(m, 2 * p - 1)
    out = []
    for r in range(p):
        down, up = r, 2 * p - 1 - r
        put = _Counter()
        for _ in range(2 * (p - r) - 1):
            put(down, "F")
        for _ in range(r):
            put(up, "F")
            put(down, "F")
        for _ in range(p - r):
            for kind in "FIW":
                put(up, kind)
        while put.n(up, "F") < put.n(down, "F") or put.n(down, "F") < n:
            if put.n(down, "F") < n:
                put(down, "F")
            for stage, kind in ((down, "I"), (down, "W"), (up, "F"), (up, "I"), (up, "W")):
                put(stage, kind)
        for _ in range(r):
            put(down, "I")
            put(up, "I")
        for _ in range(p - r):
            put(down, "I")
            put(down, "W")
        for stage in (up, down):
            while put.n(stage, "W") < n:
                put(stage, "W")
        out.append(put.names(m))
    return out


@template("dualpipev", split_backward=True, placement="v", stages_per_rank=(2, 2))
def dualpipev(pipe: Pipeline) -> list[list[str]]:
    """DeepSeek DualPipeV: DualPipe cut in half onto a V; overlapped F&B chunks run as F then B.

    Rank ``r`` of ``p`` follows DualPipeV's eight steps (forwards of the down stage, forward pairs,
    zero-bubble up backwards, the main F&B loop, and a cool-down whose second half defers its ``W``
    passes). A full backward ``B`` is our ``I`` then ``W``; an overlapped chunk ``F&B`` is ``F``
    then ``B``, each sending its output when it ends. Needs at least ``2p`` micro-batches.

    DeepSeek's bubble ``(PP/2-1)(F&B+B-3W)`` counts ``PP/2 = p`` ranks; reading ``F&B`` as ``F+B``
    and ``B`` as ``I+W`` it is ``(p-1)(F+2I-W)``. Our graph, where no output waits for the pair's
    other half, measures ``(p-1)(F+I-W)`` with no transfer and ``W <= I <= F <= I+W``: one ``I``
    per rank less. Peak: ``2p+1`` stage activations (DualPipe's ``PP+1``).
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    if m < 2 * p:
        raise TemplateError(
            f"schedule 'dualpipev' needs at least 2 x {p} = {2 * p} micro-batches, the pipeline has {m}"
        )
    out = []
    for r in range(p):
        # DualPipeV's steps as (kind, phase, defer W); phase 0 runs stage r, phase 1 stage 2p-1-r
        half = (r + 1) // 2
        steps = (
            [("F", 0, False)] * (2 * (p - r - 1))
            + [("F", 0, False), ("F", 1, False)] * (r + 1)
            + [("B", 1, True), ("W", 0, False), ("F", 1, False)] * (p - r - 1)
            + [("F", 0, False), ("B", 1, False), ("F", 1, False), ("B", 0, False)] * (m - 2 * p + r + 1)
            + [("B", 1, False), ("F", 1, False), ("B", 0, False)] * (p - r - 1)
        )
        for i in range(r + 1):
            steps += [("B", 1, i > half or (i == half and r % 2 == 1)), ("B", 0, i >= half)]
        steps += [("W", 0, False), ("B", 0, True)] * (p - r - 1) + [("W", 0, False)] * (r + 1)
        put, deferred = _Counter(), []
        for kind, phase, defer in steps:
            stage = (r, 2 * p - 1 - r)[phase]
            if kind == "W":
                put(deferred.pop(0), "W")
            elif kind == "F":
                put(stage, "F")
            else:
                put(stage, "I")
                if defer:
                    deferred.append(stage)
                else:
                    put(stage, "W")
        out.append(put.names(m))
    return out


def _v_block(pipe: Pipeline, down_f: int, up_i: int) -> list[list[str]]:
    """A V schedule built from a repeated building block (Qi et al., "Pipeline Parallelism with
    Controllable Memory", 2024), on a clock of unit slots with a period of six: each micro-batch gives
    every rank four passes (down ``F``, up ``F``, up ``I``, down ``I``) and the two free slots of a
    period take ``W`` passes, oldest ``I`` first.

    Micro-batch 0's forward goes down the ranks ``down_f`` slots apart, turns at the last rank and
    comes back one slot apart; its ``I`` goes up ``up_i`` slots apart and back down one apart. ``d``,
    the wait between the last forward and the first ``I``, is the least that gives a rank's four
    passes four different slots of the period. Micro-batch ``j`` repeats the block ``6j`` slots later.
    A pass's activations live from its ``F`` to its ``I``, so the spacings set the memory: one apart
    (V-Min) keeps about a third of 1F1B's, two apart down the forward and up the ``I`` (V-Half) a half.
    The per-rank order of these slots is then timed at the earliest starts, so uneven costs and
    transfers only stretch it."""
    p, m = pipe.num_ranks, pipe.num_microbatches

    def slots(d: int, r: int) -> list[tuple[int, int, str]]:
        fd = down_f * r
        fu = down_f * (p - 1) + 1 + (p - 1 - r)
        bu = down_f * (p - 1) + p + d + up_i * r
        bd = down_f * (p - 1) + p + d + up_i * (p - 1) + 1 + (p - 1 - r)
        return [(fd, r, "F"), (fu, 2 * p - 1 - r, "F"), (bu, 2 * p - 1 - r, "I"), (bd, r, "I")]

    d = next(d for d in range(6) if all(len({t % 6 for t, _, _ in slots(d, r)}) == 4 for r in range(p)))
    out = []
    for r in range(p):
        block = slots(d, r)
        busy = sorted((t + 6 * j, s, k, j) for j in range(m) for t, s, k in block)
        taken, owed, order = {t for t, *_ in busy}, [], []
        k = 0
        for t in range(busy[-1][0] + 1):
            if t in taken:
                _, s, kind, j = busy[k]
                k += 1
                order.append(f"{s}{kind}{j}")
                if kind == "I":
                    owed.append(f"{s}W{j}")
            elif owed:
                order.append(owed.pop(0))
        out.append(order + owed)
    return out


@template("v-min", split_backward=True, placement="v", stages_per_rank=(2, 2))
def v_min(pipe: Pipeline) -> list[list[str]]:
    """V-Min: a V whose activations are about a third of 1F1B's (Zero Bubble's controllable memory).

    Built from a building block (see `_v_block`) where the forward and the ``I`` of a micro-batch
    each move one slot per rank; the price is a bubble of about 1F1B's when ``F``, ``I``, ``W`` differ.
    """
    return _v_block(pipe, 1, 1)


@template("v-half", split_backward=True, placement="v", stages_per_rank=(2, 2))
def v_half(pipe: Pipeline) -> list[list[str]]:
    """V-Half: a V whose activations are about half of 1F1B's (Zero Bubble's controllable memory).

    Built from a building block (see `_v_block`) where the forward goes down and the ``I`` comes
    up two slots per rank, which leaves room to overlap and halves 1F1B's bubble.
    """
    return _v_block(pipe, 2, 2)


# -- timing-aware: the Zero Bubble sweep --------------------------------------------------------------
class _Timeline:
    """Passes of a one-stage-per-rank pipeline placed one at a time, each at its earliest start: after
    the stage's previous pass and after its input arrives (``I`` of the next stage plus the transfer,
    or the previous stage's ``F``). Tracks memory, its peak and the idle time after the first pass.
    The ``i``-th pass of a kind on a stage is micro-batch ``i``."""

    def __init__(self, pipe: Pipeline):
        S = self.S = pipe.num_stages
        self.dur = pipe.pass_durations()
        self.mf, self.mw = pipe.mem_forward.tolist(), pipe.mem_freed_by_weight.tolist()
        self.delta = {
            "F": self.mf,
            "I": [w - f for f, w in zip(self.mf, self.mw, strict=True)],
            "W": [-w for w in self.mw],
        }
        self.c = pipe.transfer.tolist() + [0]
        self.count = {k: [0] * S for k in "FIW"}
        self.ends: dict[tuple[str, int, int], int] = {}
        self.free, self.mem, self.peak, self.idle = [0] * S, [0] * S, [0] * S, [0] * S
        self.orders: list[list[str]] = [[] for _ in range(S)]

    def arrival(self, s: int, k: str, i: int) -> int | None:
        """When the input of pass ``k`` of micro-batch ``i`` on stage ``s`` is there (None: not placed)."""
        if k == "F":
            return 0 if s == 0 else self._end_plus("F", s - 1, i, self.c[s - 1])
        if k == "I" and s < self.S - 1:
            return self._end_plus("I", s + 1, i, self.c[s])
        return self._end_plus("F" if k == "I" else "I", s, i, 0)

    def _end_plus(self, k: str, s: int, i: int, delay: int) -> int | None:
        end = self.ends.get((k, s, i))
        return None if end is None else end + delay

    def put(self, s: int, k: str) -> None:
        i = self.count[k][s]
        start = max(self.free[s], self.arrival(s, k, i))
        if self.count["F"][s]:
            self.idle[s] += start - self.free[s]
        self.free[s] = self.ends[k, s, i] = start + self.dur[k][s]
        self.mem[s] += self.delta[k][s]
        self.peak[s] = max(self.peak[s], self.mem[s])
        self.count[k][s] += 1
        self.orders[s].append(f"{s}{k}{i}")

    def pending(self, s: int) -> bool:
        return self.count["W"][s] < self.count["I"][s]

    @property
    def span(self) -> int:
        return max(self.free[s] - self.ends["F", s, 0] + self.dur["F"][s] for s in range(self.S))


def _replay(pipe: Pipeline, orders: list[list[str]]) -> _Timeline:
    """Time fixed per-rank orders (each kind in micro-batch order) on a `_Timeline`."""
    tl, todo = _Timeline(pipe), [[parse_action(a)[1] for a in order] for order in orders]
    pos, moved = [0] * pipe.num_stages, True
    while moved:
        moved = False
        for s, kinds in enumerate(todo):
            while pos[s] < len(kinds) and tl.arrival(s, k := kinds[pos[s]], tl.count[k][s]) is not None:
                tl.put(s, k)
                pos[s], moved = pos[s] + 1, True
    assert pos == [len(kinds) for kinds in todo], "orders that deadlock"
    return tl


def _zb_sweep(
    pipe: Pipeline,
    cap: float,
    *,
    warmup: list[int] | None = None,
    tight_first: bool = False,
    skip_ahead: bool = False,
    fill_small: bool = True,
) -> _Timeline:
    """Zero Bubble's scheduling heuristic (their Section 3.1) on a one-stage-per-rank pipeline.

    Micro-batch by micro-batch it places, per stage, one forward (stage order) and then one ``I``
    (reverse stage order). Before a pass that must wait for its input, the stage runs pending ``W``
    passes that end before the input arrives, and one more when the gap would otherwise grow the
    largest idle time of any stage (always with ``fill_small``). A forward that would exceed ``cap``
    first runs pending ``W`` passes. Micro-batch 0 is preceded by as many forwards as fit in memory
    before its ``I`` comes back (``tight_first``: only those that end in time), unless ``warmup``
    gives the counts; ``skip_ahead`` lets a stage two forwards ahead of the next one skip a forward
    when waiting costs no more than the largest idle time. Stage 0 runs its pending ``W`` passes
    before each ``I`` once its forwards are done; leftover ``W`` passes end each stage.
    """
    tl = _Timeline(pipe)
    S, m, dur, mf, count, free, idle = tl.S, pipe.num_microbatches, tl.dur, tl.mf, tl.count, tl.free, tl.idle

    def fill(s: int, k: str) -> None:
        arrival = tl.arrival(s, k, count[k][s])
        while tl.pending(s) and free[s] + dur["W"][s] <= arrival:
            tl.put(s, "W")
        if tl.pending(s) and free[s] < arrival and (fill_small or arrival - free[s] > max(idle) - idle[s]):
            tl.put(s, "W")

    def room_time(s: int) -> int:
        """Time of the W passes the next forward of stage s would first need for memory."""
        used, k = tl.mem[s] + mf[s], count["W"][s]
        while used > cap and k < count["I"][s]:
            used, k = used - tl.mw[s], k + 1
        return (k - count["W"][s]) * dur["W"][s]

    def forward(s: int) -> None:
        while tl.mem[s] + mf[s] > cap and tl.pending(s):
            tl.put(s, "W")
        fill(s, "F")
        tl.put(s, "F")

    for s in range(S):
        forward(s)
    req = [0] * S
    if warmup is not None:
        req = [min(w, m - 1) for w in warmup]
    else:
        back = free[S - 1] + dur["I"][S - 1]  # when micro-batch 0's I leaves stage s + 1
        for s in range(S - 2, -1, -1):
            used, t = tl.mem[s], free[s]
            while (
                1 + req[s] < m
                and used + mf[s] <= cap
                and (t + dur["F"][s] <= back + tl.c[s] if tight_first else t < back + tl.c[s])
            ):
                used, t, req[s] = used + mf[s], t + dur["F"][s], req[s] + 1
            back = max(t, back + tl.c[s]) + dur["I"][s]
        for s in range(1, S):  # a stage runs one forward more than the next one, unless both ran all
            while req[s] > req[s - 1] or 0 < req[s] == req[s - 1] and 1 + req[s] < m:
                req[s] -= 1
    for s in range(S):
        for _ in range(req[s]):
            forward(s)
    for s in range(S - 1, -1, -1):
        tl.put(s, "I")
    for _ in range(1, m):
        go = [count["F"][s] < m for s in range(S)]
        if skip_ahead:
            for s in range(S - 1):
                if go[s] and count["F"][s] >= count["F"][s + 1] + 2:
                    needed = free[s + 1] + dur["F"][s + 1] + dur["I"][s + 1] + tl.c[s]
                    go[s] = free[s] < needed and (
                        free[s] + dur["F"][s] + room_time(s) <= needed or needed - free[s] > max(idle) - idle[s]
                    )
        for s in range(S - 2, -1, -1):
            go[s] = go[s] and go[s + 1]
        for s in range(S):
            if go[s]:
                forward(s)
        for s in range(S - 1, -1, -1):
            fill(s, "I")
            while s == 0 and count["F"][0] == m and tl.pending(0):
                tl.put(0, "W")
            tl.put(s, "I")
    for s in range(S):
        while count["W"][s] < m:
            tl.put(s, "W")
    return tl


def _capacity(name: str, pipe: Pipeline, need: int) -> float:
    """The memory limit a memory-aware template schedules under (inf without one); `TemplateError`
    when it is below ``need``, the least the template can work with."""
    if pipe.capacity is None:
        return math.inf
    if pipe.capacity < need:
        raise TemplateError(
            f"schedule {name!r} needs memory_limit >= {need} {pipe.memory_unit} per rank, "
            f"the pipeline has {pipe.capacity}"
        )
    return pipe.capacity


@template("zb-greedy", split_backward=True, greedy=True)
def zb_greedy(pipe: Pipeline) -> list[list[str]]:
    """Zero Bubble's memory-bounded heuristic: as many forwards as memory allows, I first, W to fill gaps.

    Runs `_zb_sweep` under the pipeline's memory limit (none: unlimited) with each of its eight
    hyperparameter settings, as the paper's grid search does, and also times ``1f1b-split``,
    ``zb-h1`` and ``zb-h2``; keeps the shortest span among those within the limit (the sweeps always
    are: they never exceed it). On Zero Bubble's settings it matches their ILP-refined ZB-1p under
    the 1p limit and ZB-2p under 2p to four decimals (see tests).
    """
    cap = _capacity("zb-greedy", pipe, int(pipe.mem_forward.max()))  # one forward in flight
    runs = [
        _zb_sweep(pipe, cap, tight_first=a, skip_ahead=b, fill_small=f)
        for a in (False, True)
        for b in (False, True)
        for f in (False, True)
    ]
    runs += [_replay(pipe, build(pipe)) for build in (one_f_one_b_split, zb_h1, zb_h2)]
    return min((tl for tl in runs if max(tl.peak) <= cap), key=lambda tl: tl.span).orders


# seconds per step: 6.4e-6 to 3.4e-5 measured (p=64 to 12, 2 or 3 stages per rank), rounded up; session 41:
# 1.5e-5 to 2.6e-5 at p=16 and p=24, 4.9e-5 at p=8, m=24 (0.68 s: where it is over, the whole is small)
@template(
    "chunk-greedy",
    split_backward=True,
    placement="any",
    stages_per_rank=(2, None),
    greedy=True,
    seconds_per_step=4.5e-5,
)
def chunk_greedy_template(pipe: Pipeline) -> list[list[str]]:
    """Memory-bounded greedy for any placement and stages per rank: I first, forwards while memory allows.

    See `layersched.schedule.greedy`: the rank that can act earliest runs an ``I``, else a forward that
    fits (a micro-batch reserves all its stages' activations on a rank when it starts there), else a
    ``W``; four priority variants, the fastest kept. It follows the problem's placement (loop when the
    problem gives none), so it is the one template for placements the others do not cover.
    """
    from layersched.schedule.greedy import chunk_greedy

    return _simulated("chunk-greedy", pipe, chunk_greedy, "about 10 s")


def _simulated(name: str, pipe: Pipeline, build: Callable[[Pipeline], list[list[str]]], takes: str):
    """``build(pipe)`` for the greedy template ``name``, refused where it would simulate more than
    `layersched.schedule.greedy.MAX_WORK` steps (``takes``: about how long that is), its `ValueError`
    as a `TemplateError`."""
    from layersched.schedule.greedy import MAX_WORK, simulation_steps

    work = simulation_steps(pipe)
    if work > MAX_WORK:
        raise TemplateError(
            f"schedule '{name}' simulates {work:,} steps (passes times ranks) here, at most {MAX_WORK:,} "
            f"({takes}); use fewer micro-batches or another template"
        )
    try:
        return build(pipe)
    except ValueError as exc:
        raise TemplateError(f"schedule '{name}': {exc}") from None


PACED_MEMORY_SHARE = 0.75
"""``best`` tries `paced-greedy` where the memory-time or held-apart bound (`layersched.schedule.bounds`)
is at least this share of the best bound: where memory binds. Measured on 42 multi-chunk rows (the
1.5B and V rows under 3 to 24 stage activations per rank, 23 random ones): it beat every other
template on 14, all but one at a share of 0.78 or more; at 0.5-0.72 (the 1F1B-memory rows, the rows
under 18 activations) it never did, and there its second of search cost `best` the V row at p=16
under 18 activations (60 s: 1.78-1.92% gap before, 2.06-2.12% with it)."""


def _memory_binds_little(pipe: Pipeline) -> str | None:
    """Why `paced-greedy` need not run in ``best`` here (see `PACED_MEMORY_SHARE`), or None. The share
    is that of memory time without its ramps (``memory_time``), the figure it was measured with.
    ``memory_ramps`` (session 39) is larger: with it the gate would open on four rows of
    `benchmarks/multichunk.py` that it keeps closed, two of them under 1F1B's memory, where
    `paced-greedy` never won in that measurement. The best bound is taken without ``one_rank`` (session
    71): it came later, and it binds with few micro-batches, on none of the rows measured, so the gate
    stays as measured."""
    from layersched.schedule.bounds import pipeline_bounds

    if pipe.capacity is None:
        return "no memory limit, so nothing waits for memory"
    bounds = pipeline_bounds(pipe, pipe.stage_to_rank(), pipe.objective)
    bounds.pop("one_rank", None)
    held, best = max(bounds.get("memory_time", 0), bounds.get("held_apart", 0)), max(bounds.values(), default=0)
    if held >= PACED_MEMORY_SHARE * best:
        return None
    return (
        f"memory binds little here (the memory-time and held-apart bounds reach {held / max(best, 1):.0%} of "
        f"the best bound; paced-greedy is tried from {PACED_MEMORY_SHARE:.0%})"
    )


# seconds per step: chunk-greedy's per simulation (4.5e-5 / 18) times paced_greedy's 27 at most (the reserving
# greedy, then per paced variant its unpaced run, the 8 paces of PACE_GRID and 4 halvings), rounded up
@template(
    "paced-greedy",
    split_backward=True,
    placement="any",
    stages_per_rank=(2, None),
    greedy=True,
    seconds_per_step=7e-5,
    skip_in_best=_memory_binds_little,
)
def paced_greedy_template(pipe: Pipeline) -> list[list[str]]:
    """Memory-bounded greedy that lets micro-batches in a fixed time apart, the pace searched.

    See `layersched.schedule.greedy.paced_greedy`: under a limit that holds few activations, micro-
    batches let in as fast as the first rank takes them wait on the ranks beyond while holding their
    memory; paced, they keep moving (the V row at p=16, m=48 under 4 stage activations per rank:
    14.5M where chunk-greedy gives 17.6M).
    """
    from layersched.schedule.greedy import paced_greedy

    return _simulated("paced-greedy", pipe, paced_greedy, "about 15 s")


@template("ooo", split_backward=True)
def ooo(pipe: Pipeline) -> list[list[str]]:
    """Out-of-order backprop: 1F1B order with I first (sent at once), W passes moved into idle time.

    Gradient fast-forwarding: each stage sends its input gradient (``I``) before any weight gradient;
    the ``W`` passes run where the rank would otherwise wait (never delaying a pass whose input has
    come) and are forced only when the next forward would need more memory than 1F1B's peak (or the
    pipeline's limit, if lower).
    """
    p, m = pipe.num_ranks, pipe.num_microbatches
    one_f_one_b_peak = max(min(p - r, m) * f for r, f in enumerate(pipe.mem_forward.tolist()))
    cap = min(_capacity("ooo", pipe, one_f_one_b_peak), one_f_one_b_peak)
    return _zb_sweep(pipe, cap, warmup=[p - 1 - r for r in range(p)], fill_small=False).orders
