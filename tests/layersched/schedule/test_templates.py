"""The pipeline templates: closed forms, memory, Zero Bubble's published numbers, errors, validity.

Closed forms are stated as bubble time = span - work per rank, with equal stages of times F, I, W
(fused B = I + W) and transfer c between stages; span is the steady-state iteration time.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.schedule.bounds import pipeline_bounds
from layersched.schedule.greedy import replay
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import (
    TemplateError,
    _alternated,
    _capacity,
    _fixed_rounds,
    _rounds_orders,
    get_template,
    template_names,
    template_orders,
)
from solvers import InvalidSchedule

S = 1024  # sequence length of Zero Bubble's settings

# (p, m, F, I, W, transfer, h, a) and the published bubble rates (Qi et al., ICLR 2024):
# 1F1B, ZB-H1, ZB-H2, ZB-1p (1p limit), ZB-2p (2p limit); ZB-1p equals ZB-H1 on these settings
ZB_SETTINGS = {
    "1.5B": ((8, 24, 18522, 18086, 9337, 601, 2304, 24), (0.2431, 0.1585, 0.1083, 0.1585, 0.0433)),
    "6.2B": ((8, 24, 29718, 29444, 19927, 527, 4096, 32), (0.2347, 0.1323, 0.0698, 0.1323, 0.0029)),
    "14.6B": ((16, 48, 11347, 11248, 8132, 377, 5120, 40), (0.2552, 0.1397, 0.0672, 0.1397, 0.0066)),
}


def pipeline(p, m, F, I, W, c=0, *, v=1, memory_forward=10, memory_freed_by_weight=6, memory_limit=None):
    """Stage-level pipeline of p ranks with v equal stages each."""
    return pipeline_from_spec(
        ProblemSpec.model_validate(
            {
                "name": "t",
                "pipeline": dict(
                    stages=p * v,
                    stages_per_rank=v,
                    microbatches=m,
                    forward=F,
                    backward_input=I,
                    backward_weight=W,
                    transfer=c,
                    memory_forward=memory_forward,
                    memory_freed_by_weight=memory_freed_by_weight,
                    memory_limit=memory_limit,
                ),
            }
        )
    )


def zb_pipeline(name, limit_factor=None):
    """One of Zero Bubble's settings; memory per micro-batch 34h + 5as, W frees 32h; limit in p's."""
    p, m, F, I, W, c, h, a = ZB_SETTINGS[name][0]
    mem = 34 * h + 5 * a * S
    return pipeline(
        p,
        m,
        F,
        I,
        W,
        c,
        memory_forward=mem,
        memory_freed_by_weight=32 * h,
        memory_limit=limit_factor * p * mem if limit_factor else None,
    )


def bubble_time(schedule, pipe):
    sol = solve_pipeline(pipe, schedule=schedule)  # validated: precedence, memory, overlap
    per_microbatch = int(pipe.forward.sum() + pipe.backward_input.sum() + pipe.backward_weight.sum())
    return sol.metrics["span"] - pipe.num_microbatches * per_microbatch // pipe.num_ranks


# -- closed forms -----------------------------------------------------------------------------------
FIW = [(1, 1, 1), (3, 2, 1), (4, 3, 2), (5, 4, 2), (6, 5, 5), (3, 3, 1)]


@pytest.mark.parametrize("F,I,W", FIW)
@pytest.mark.parametrize("p", [2, 3, 5])
def test_1f1b_family_closed_forms_without_transfer(p, F, I, W):
    m = 3 * p
    assert bubble_time("1f1b", pipeline(p, m, F, I, W)) == (p - 1) * (F + I + W)
    # Zero Bubble's (p-1)(T_F + T_B - T_W), their B being our I; it needs W <= F (all of FIW)
    assert bubble_time("zb-h1", pipeline(p, m, F, I, W)) == (p - 1) * (F + I - W)
    # (p-1)(T_F + T_B - 2 T_W), zero when F = I = W; it needs W <= F and 2W <= F + I (all of FIW)
    assert bubble_time("zb-h2", pipeline(p, m, F, I, W)) == (p - 1) * (F + I - 2 * W)
    for k in (1, 3):  # kFkB keeps 1F1B's bubble without transfer
        assert bubble_time(f"kfkb-{k}", pipeline(p, m, F, I, W)) == (p - 1) * (F + I + W)


@pytest.mark.parametrize("c", [1, 2])
def test_kfkb_hides_transfers_that_1f1b_waits_for(c):
    p, m, F, I, W = 4, 24, 3, 2, 1
    one = bubble_time("1f1b", pipeline(p, m, F, I, W, c))
    for k in (2, 3, 4):
        grouped = bubble_time(f"kfkb-{k}", pipeline(p, m, F, I, W, c))
        assert (p - 1) * (F + I + W) < grouped < one


@pytest.mark.parametrize("F,I,W", FIW)
@pytest.mark.parametrize("p,v", [(2, 2), (4, 2), (3, 3)])
def test_interleaved_divides_the_bubble_by_v(p, v, F, I, W):
    # per-stage times F, I, W: (p-1)(F+I+W) is 1F1B's bubble (p-1) v (F+I+W) of the whole rank over v
    for m in (p, 3 * p):
        assert bubble_time("interleaved", pipeline(p, m, F, I, W, v=v)) == (p - 1) * (F + I + W)


@pytest.mark.parametrize("F,I,W", [(1, 1, 1), (3, 2, 2), (4, 3, 2), (5, 4, 2), (5, 3, 3)])
@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_dualpipev_closed_form(p, F, I, W):
    # W <= I <= F <= I + W; see dualpipev's docstring for DeepSeek's (PP/2-1)(F&B+B-3W)
    for m in (2 * p, 3 * p + 1):
        assert bubble_time("dualpipev", pipeline(p, m, F, I, W, v=2)) == (p - 1) * (F + I - W)


@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_zb_v_has_no_bubble_when_passes_are_equal(p):
    for m in (2 * p - 1, 3 * p):
        assert bubble_time("zb-v", pipeline(p, m, 2, 2, 2, v=2)) == 0
    # with uneven passes it still beats 1F1B on the same model in p stages (stage times doubled)
    one_f_one_b = bubble_time("1f1b", pipeline(p, 3 * p, 6, 4, 2))
    assert bubble_time("zb-v", pipeline(p, 3 * p, 3, 2, 1, v=2)) < one_f_one_b


@pytest.mark.parametrize("p,v,m", [(2, 2, 4), (3, 2, 6), (4, 3, 8), (4, 3, 6), (5, 2, 5), (4, 2, 3), (8, 3, 24)])
def test_interleaved_zb_memory_and_bubble(p, v, m):
    # one activation per stage and micro-batch, none freed by W: the peak counts activations in flight
    pipe = pipeline(p, m, 3, 2, 2, 1, v=v, memory_forward=1, memory_freed_by_weight=0)
    g = m // max(1, m // p)  # micro-batches per round
    zb = solve_pipeline(pipe, schedule="interleaved-zb").metrics
    assert zb["peak_memory"][:p] == [min((v - 1) * g + p - r, m * v) for r in range(p)]
    if m % p == 0:  # Megatron's interleaved 1F1B: never less memory on a rank, and a larger bubble
        one_f_one_b = solve_pipeline(pipe, schedule="interleaved").metrics
        assert all(a <= b for a, b in zip(zb["peak_memory"], one_f_one_b["peak_memory"], strict=True))
        assert zb["bubble_rate"] < one_f_one_b["bubble_rate"]


@pytest.mark.parametrize(
    "name,refusal",
    [
        ("interleaved-zb-mem", "no round size gives orders within memory_limit"),
        ("interleaved-zb-alt", "gives fixed orders within memory_limit"),
    ],
)
@settings(max_examples=30, deadline=None)
@given(
    p=st.integers(2, 5),
    v=st.integers(2, 3),
    m=st.integers(1, 12),
    passes=st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(0, 9), st.integers(0, 3)),
    freed=st.integers(0, 4),
    extra=st.floats(0, 1.5),
)
def test_interleaved_zb_variants_fit_any_limit_and_are_never_slower_than_torchs_order(
    name, refusal, p, v, m, passes, freed, extra
):
    """Within any limit from the least memory to 1.5 times 1F1B's, ``interleaved-zb-mem`` and ``interleaved-zb-alt``
    give a valid schedule (the one validator, memory included) or the documented reason why not; where
    torch's order fits, neither is slower, and neither is slower than any fixed order of the round
    sizes `_fixed_rounds` times."""
    F, I, W, c = passes
    pipe = pipeline(p, m, F, I, W, c, v=v, memory_forward=4, memory_freed_by_weight=freed)
    limit = int(pipe.least_memory() + extra * (4 * p * v - pipe.least_memory()))
    pipe = pipeline(p, m, F, I, W, c, v=v, memory_forward=4, memory_freed_by_weight=freed, memory_limit=limit)
    try:
        got = solve_pipeline(pipe, schedule=name).metrics
    except TemplateError as exc:
        assert refusal in str(exc)
        return
    assert max(got["peak_memory"][:p]) <= limit
    fixed = _fixed_rounds(pipe, _capacity(name, pipe, pipe.least_memory()))
    assert all(replay(pipe, template_orders(name, pipe)) <= span for span, _, _ in fixed)  # as `replay` times them
    try:
        torch = solve_pipeline(pipe, schedule="interleaved-zb").metrics
    except (TemplateError, InvalidSchedule):
        return  # torch's order does not apply here, or not within this limit
    assert got["span"] <= torch["span"]


def test_fixed_rounds_are_timed_once_for_a_pipeline_and_limit(monkeypatch):
    """``best`` builds interleaved-zb-alt and interleaved-zb-mem on one pipeline object: the fixed orders
    both time are computed once, and each caller gets its own copy of them."""
    import layersched.schedule.templates as templates

    pipe = pipeline(4, 8, 3, 2, 2, 1, v=2)
    cap = _capacity("interleaved-zb-alt", pipe, pipe.least_memory())
    timed = []
    real = templates._time_fixed_rounds
    monkeypatch.setattr(templates, "_time_fixed_rounds", lambda pipe, cap: timed.append(cap) or real(pipe, cap))
    template_orders("interleaved-zb-alt", pipe)
    template_orders("interleaved-zb-mem", pipe)
    assert timed == [cap]
    fresh = real(pipe, cap)
    mine = _fixed_rounds(pipe, cap)
    assert mine == fresh and len(timed) == 1
    mine[0][2][0].append("0F99")  # a caller's change stays its own
    assert _fixed_rounds(pipe, cap) == fresh
    # another pipeline object with the same costs, or another limit: timed again
    _fixed_rounds(pipeline(4, 8, 3, 2, 2, 1, v=2), cap)
    _fixed_rounds(pipe, cap - 1)
    assert len(timed) == 3


def test_interleaved_zb_mem_below_torchs_peak():
    # the 1.5B interleaved row (problems/zb-interleaved-1.5b.yaml), p=8, v=3, m=24, under 18 chunk
    # activations, 3/4 of torch's order's peak: that order does not fit; rounds of 5 do, within 2% of
    # the proven bound
    args = dict(v=3, memory_forward=201216, memory_freed_by_weight=73728)
    pipe = pipeline(8, 24, 18522, 18086, 9337, 1803, **args, memory_limit=18 * 201216)
    with pytest.raises(InvalidSchedule, match="memory"):
        solve_pipeline(pipe, schedule="interleaved-zb")
    sol = solve_pipeline(pipe, schedule="interleaved-zb-mem")
    bound = max(pipeline_bounds(pipe, pipe.stage_to_rank(), "span").values())
    assert sol.metrics["span"] <= 1.02 * bound
    assert sol.metrics["peak_memory"][0] <= 18 * 201216
    # under 15, no fixed order fits without deadlock; switching between F and I as they are timed
    # (greedy.follow) stays within 8% of the bound (chunk-greedy: 26%)
    pipe = pipeline(8, 24, 18522, 18086, 9337, 1803, **args, memory_limit=15 * 201216)
    sol = solve_pipeline(pipe, schedule="interleaved-zb-mem")
    assert sol.metrics["span"] <= 1.08 * max(pipeline_bounds(pipe, pipe.stage_to_rank(), "span").values())


def test_interleaved_zb_mem_mixes_the_chunks_where_following_leads():
    # the 1.5B interleaved row re-cut to p=4, m=9, three stages per rank, under 9 stage activations (1F1B
    # holds 12): following the rounds of 3 (1,562,019) beats every fixed order (1,629,089); with the
    # later rounds' I passes one micro-batch apart between chunks it is 1,519,092
    args = dict(v=3, memory_forward=201216, memory_freed_by_weight=73728, memory_limit=9 * 201216)
    pipe = pipeline(4, 9, 18522, 18086, 9337, 1803, **args)
    sol = solve_pipeline(pipe, schedule="interleaved-zb-mem")
    assert sol.metrics["span"] == 1519092
    assert max(sol.metrics["peak_memory"]) <= 9 * 201216


@pytest.mark.parametrize("p,v,m", [(2, 2, 4), (4, 2, 8), (5, 3, 15), (4, 3, 19), (6, 3, 12), (3, 2, 2)])
def test_alternated_with_the_round_size_as_skew_is_torchs_order(p, v, m):
    pipe = pipeline(p, m, 3, 2, 2, 1, v=v)
    for g in {m // max(1, m // p), max(1, m // p - 1), 1}:
        assert _alternated(pipe, g, g, g) == _rounds_orders(pipe, g)
        assert _alternated(pipe, g, 5 * g, 2 * g) == _rounds_orders(pipe, g)  # any skew of g or more
    g = m // max(1, m // p)
    if m > g:  # a second round: a skew of 0 runs each micro-batch through the rank's chunks in turn
        forwards = [a for a in _alternated(pipe, g, 0, g)[0] if "F" in a]
        assert forwards[g * v : g * v + v] == [f"{c * p}F{g}" for c in range(v)]


def test_interleaved_zb_alt_mixes_the_chunks_of_the_second_round():
    # the 1.5B interleaved row re-cut to p=7, m=14, two stages per rank (1F1B's memory): as fast as
    # torch's order; rank 0's second round starts its second chunk 3 micro-batches after its first (the
    # order of the best schedules found, docs/measurements.md, session 67)
    args = dict(v=2, memory_forward=201216, memory_freed_by_weight=73728, memory_limit=14 * 201216)
    pipe = pipeline(7, 14, 18522, 18086, 9337, 1803, **args)
    alt = solve_pipeline(pipe, schedule="interleaved-zb-alt")
    torch = solve_pipeline(pipe, schedule="interleaved-zb")
    assert alt.metrics["span"] == torch.metrics["span"]
    forwards = [a for a in alt.actions()[0] if "F" in a]
    second = "0F7 0F8 0F9 0F10 7F7 0F11 7F8 0F12 7F9 0F13 7F10 7F11 7F12 7F13".split()
    assert forwards == [f"{s}F{i}" for s in (0, 7) for i in range(7)] + second
    assert alt.actions() != torch.actions()


def test_interleaved_zb_alt_takes_the_fastest_round_size_with_more_memory():
    # the 1.5B interleaved row re-cut to p=7, m=14, two stages per rank, under 16 stage activations (2
    # more than 1F1B's): rounds of 8 are faster than torch's 7, and the template mixes those, as fast as
    # interleaved-zb-mem, which tries them too (session 68's template kept torch's size: 1,505,979)
    args = dict(v=2, memory_forward=201216, memory_freed_by_weight=73728, memory_limit=16 * 201216)
    pipe = pipeline(7, 14, 18522, 18086, 9337, 1803, **args)
    alt = solve_pipeline(pipe, schedule="interleaved-zb-alt").metrics["span"]
    assert solve_pipeline(pipe, schedule="interleaved-zb").metrics["span"] == 1_505_979
    assert alt == solve_pipeline(pipe, schedule="interleaved-zb-mem").metrics["span"] == 1_493_358


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 8, 16])
def test_v_min_and_v_half_memory(p):
    # activations in stage units (W frees nothing): ZB-V holds 2p, 1F1B's; V-Half about a half, V-Min a third
    pipe = pipeline(p, 3 * p, 1, 1, 1, v=2, memory_forward=1, memory_freed_by_weight=0)
    peak = {n: max(solve_pipeline(pipe, schedule=n).metrics["peak_memory"][:p]) for n in ("zb-v", "v-half", "v-min")}
    assert peak["zb-v"] == 2 * p
    assert peak["v-half"] <= p + 2
    assert peak["v-min"] <= 2 * p / 3 + 2
    if p >= 4:
        assert peak["v-min"] < peak["v-half"] < peak["zb-v"]
    # equal passes: less bubble than 1F1B on the same model in p stages (stage times doubled)
    one_f_one_b = solve_pipeline(pipeline(p, 3 * p, 2, 2, 2), schedule="1f1b").metrics["bubble_rate"]
    for name in ("v-half", "v-min"):
        assert solve_pipeline(pipe, schedule=name).metrics["bubble_rate"] < one_f_one_b


@pytest.mark.parametrize("p", [3, 4, 5, 8, 16])
def test_v_half_fits_zero_bubbles_memory(p):
    # Zero Bubble's V-Half holds (p+2)//2 micro-batches (2 stage activations each); built from its
    # block, a W trails its I and the order passes that by a fraction of one activation, so its W
    # passes run earlier (greedy.fit_memory): 6.2B row costs, W frees 32h of 34h+5as
    from layersched.schedule.greedy import peaks

    act = 303104
    pipe = pipeline(p, 3 * p, 14407, 14380, 9676, 1610, v=2, memory_forward=act, memory_freed_by_weight=131072,
                    memory_limit=(p + 2) // 2 * 2 * act)  # fmt: skip
    assert max(peaks(pipe, get_template("v-half").build(pipe))) > pipe.capacity
    half = solve_pipeline(pipe, schedule="v-half")  # validated: memory limit included
    assert max(half.metrics["peak_memory"][:p]) <= pipe.capacity
    assert half.metrics["bubble_rate"] < solve_pipeline(pipe, schedule="v-min").metrics["bubble_rate"]
    with pytest.raises(InvalidSchedule, match="memory"):  # ZB-V's forwards alone pass it: no W helps
        solve_pipeline(pipe, schedule="zb-v")


@pytest.mark.parametrize("F,I,W,c", [(3, 3, 3, 1), (3, 2, 1, 1), (4, 3, 2, 2), (6, 5, 5, 3), (18522, 18086, 9337, 601)])
@pytest.mark.parametrize("p", [2, 4, 5])
def test_zb_h2_closed_form_with_transfer(p, F, I, W, c):
    # Zero Bubble's (p-1)(T_F + T_B + 2 T_comm - 2 T_W): W <= F, 2W <= F+I+2c, c <= min(F, I, W)
    for m in (2 * p - 1, 3 * p):
        assert bubble_time("zb-h2", pipeline(p, m, F, I, W, c)) == (p - 1) * (F + I + 2 * c - 2 * W)


# -- memory ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("p,m", [(3, 9), (4, 12), (8, 24)])
def test_peak_memory(p, m):
    mem = 10
    peak = {
        name: solve_pipeline(
            pipeline(p, m, 3, 2, 1, 1, v=get_template(name).min_stages_per_rank), schedule=name
        ).metrics["peak_memory"]
        for name in ("1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipev", "ooo")
    }
    assert peak["1f1b"][0] == peak["zb-h1"][0] == max(peak["zb-h1"]) == p * mem  # 1F1B's memory
    assert peak["zb-h2"][0] == (2 * p - 1) * mem  # about twice
    # two half-size stages per rank: 2p of them is 1F1B's p whole-rank activations, on every rank
    assert peak["zb-v"] == [2 * p * mem] * p
    assert max(peak["dualpipev"]) == (2 * p + 1) * mem  # DualPipe's PP + 1
    assert max(peak["ooo"]) <= p * mem


@pytest.mark.parametrize("limit", [10, 17, 25, 40, 80, None])
@pytest.mark.parametrize("p,m,F,I,W,c", [(4, 12, 3, 2, 1, 1), (3, 2, 1, 4, 2, 0), (5, 17, 2, 3, 4, 2)])
def test_zb_greedy_never_exceeds_the_memory_limit(p, m, F, I, W, c, limit):
    pipe = pipeline(p, m, F, I, W, c, memory_limit=limit)
    sol = solve_pipeline(pipe, schedule="zb-greedy")
    assert limit is None or max(sol.metrics["peak_memory"]) <= limit
    # never worse than the handcrafted schedules that fit the same limit
    for name in ("1f1b-split", "zb-h1", "zb-h2", "ooo"):
        try:
            other = solve_pipeline(pipe, schedule=name)
        except (TemplateError, InvalidSchedule):  # not applicable or over the limit
            continue
        assert sol.metrics["span"] <= other.metrics["span"], name


@pytest.mark.parametrize("p,m,F,I,W,c", [(4, 12, 3, 2, 1, 1), (5, 3, 1, 4, 2, 0), (6, 20, 5, 5, 4, 2)])
def test_ooo_fills_idle_time_without_more_memory_than_1f1b(p, m, F, I, W, c):
    pipe = pipeline(p, m, F, I, W, c)
    ooo = solve_pipeline(pipe, schedule="ooo").metrics
    split = solve_pipeline(pipe, schedule="1f1b-split").metrics
    assert ooo["span"] <= split["span"]
    assert max(ooo["peak_memory"]) <= max(split["peak_memory"])
    # gradient fast-forwarding: some rank sends the next micro-batch's I before an earlier W
    acts = template_orders("ooo", pipe)
    assert any(a.index(f"{r}W0") > a.index(f"{r}I1") for r, a in enumerate(acts[:-1]))


# -- Zero Bubble's settings -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ZB_SETTINGS)
def test_handcrafted_zero_bubble_schedules_reproduce_published_rates(name):
    _, (_, h1, h2, _, _) = ZB_SETTINGS[name]
    p = ZB_SETTINGS[name][0][0]
    sol = solve_pipeline(zb_pipeline(name, limit_factor=1), schedule="zb-h1")
    assert round(sol.metrics["bubble_rate"], 4) == h1
    mem = int(sol.pipe.mem_forward[0])
    assert sol.metrics["peak_memory"][0] == max(sol.metrics["peak_memory"]) == p * mem  # 1F1B's 1p
    sol = solve_pipeline(zb_pipeline(name, limit_factor=2), schedule="zb-h2")
    assert round(sol.metrics["bubble_rate"], 4) == h2
    assert sol.metrics["peak_memory"][0] == (2 * p - 1) * mem


@pytest.mark.parametrize("name", ZB_SETTINGS)
@pytest.mark.parametrize("limit_factor", [1, 2])
def test_zb_greedy_meets_zb_1p_and_2p(name, limit_factor):
    published = ZB_SETTINGS[name][1][2 + limit_factor]
    pipe = zb_pipeline(name, limit_factor)
    sol = solve_pipeline(pipe, schedule="zb-greedy")
    assert round(sol.metrics["bubble_rate"], 4) <= published
    assert max(sol.metrics["peak_memory"]) <= pipe.capacity


# -- errors ---------------------------------------------------------------------------------------
def test_template_errors_say_what_would_fit():
    with pytest.raises(TemplateError, match=r"multiple of the number of ranks \(4\).* has 6.* 8$"):
        template_orders("interleaved", pipeline(4, 6, 1, 1, 1, v=2))
    with pytest.raises(TemplateError, match=r"at least 2 x 4 = 8 micro-batches, the pipeline has 7"):
        template_orders("dualpipev", pipeline(4, 7, 1, 1, 1, v=2))
    with pytest.raises(TemplateError, match=r"multiple of the group size k \(3\).* has 8.* 9$"):
        template_orders("kfkb-3", pipeline(4, 8, 1, 1, 1))
    with pytest.raises(TemplateError, match=r"kfkb-2.*multiple of the group size k \(2\).* 6$"):
        template_orders("kfkb", pipeline(4, 5, 1, 1, 1))
    with pytest.raises(TemplateError, match=r"'zb-greedy' needs memory_limit >= 10 unit per rank, .* has 9"):
        template_orders("zb-greedy", pipeline(4, 8, 1, 1, 1, memory_limit=9))
    with pytest.raises(TemplateError, match=r"'ooo' needs memory_limit >= 40 unit per rank, .* has 39"):
        template_orders("ooo", pipeline(4, 8, 1, 1, 1, memory_limit=39))


def test_wrong_stages_per_rank():
    with pytest.raises(TemplateError, match=r"'zb-v' needs exactly 2 stage\(s\) per rank, .* has 1"):
        template_orders("zb-v", pipeline(4, 8, 1, 1, 1))
    with pytest.raises(TemplateError, match=r"'dualpipev' needs exactly 2 stage\(s\) per rank, .* has 3"):
        template_orders("dualpipev", pipeline(2, 8, 1, 1, 1, v=3))
    with pytest.raises(TemplateError, match=r"'interleaved' needs at least 2 stage\(s\) per rank"):
        template_orders("interleaved", pipeline(4, 8, 1, 1, 1))
    with pytest.raises(TemplateError, match=r"'zb-h1' needs exactly 1 stage"):
        template_orders("zb-h1", pipeline(4, 8, 1, 1, 1, v=2))


def test_kfkb_names():
    pipe = pipeline(4, 12, 3, 2, 1, 1)
    assert template_orders("kfkb-1", pipe) == template_orders("1f1b", pipe)
    assert template_orders("kfkb", pipe) == template_orders("kfkb-2", pipe)
    assert template_orders("kfkb-4", pipe)[3][:8] == ["3F0", "3F1", "3F2", "3F3", "3B0", "3B1", "3B2", "3B3"]
    assert "kfkb" in template_names() and "kfkb-4" not in template_names()
    for bad in ("kfkb-0", "kfkb-x", "zb"):
        with pytest.raises(ValueError, match="unknown schedule .* kfkb-<k>"):
            get_template(bad)


# -- every template is valid ----------------------------------------------------------------------
ALL = [*template_names(), "kfkb-3"]
COMBOS = [(p, m, c) for p in (2, 3, 5) for m in (1, 2, p, 2 * p, 3 * p, 3 * p + 1, 6 * p) for c in (0, 3)]


@pytest.mark.parametrize("name", ALL)
def test_every_template_validates_and_runs_each_pass_once(name):
    t = get_template(name)
    solved = 0
    for p, m, c in COMBOS:
        for v in (t.min_stages_per_rank, 3) if t.max_stages_per_rank is None else (t.min_stages_per_rank,):
            pipe = pipeline(p, m, 3, 2, 2, c, v=v)
            try:
                sol = solve_pipeline(pipe, schedule=name)  # times the orders (no deadlock) and validates
            except TemplateError as exc:
                assert "micro-batches" in str(exc)  # only the documented micro-batch conditions
                continue
            solved += 1
            kinds = "FIW" if t.split_backward else "FB"
            for r, acts in enumerate(sol.actions()):
                stages = [s for s, q in enumerate(sol.stage_to_rank) if q == r]
                assert len(stages) == v
                assert sorted(acts) == sorted(f"{s}{k}{i}" for s in stages for k in kinds for i in range(m))
    assert solved >= 16  # every template accepts several micro-batch counts per (p, c)
