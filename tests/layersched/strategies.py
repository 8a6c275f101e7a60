"""Random stage-level pipelines and their problem files for property tests (bounds, the runner, the
command line)."""

from hypothesis import reject
from hypothesis import strategies as st

from tests.layersched.schedule.test_core_path import stage_pipeline


@st.composite
def any_stage_fields(draw):
    """The ``pipeline:`` fields of a stage-level problem file, wider than test_bounds'
    `multi_chunk_pipelines`: 1-4 ranks, 1-3 stages per rank (loop, V or any placement), every cost and
    memory field one number or a list per stage, passes and transfers of length 0, and memory limits
    from one stage's activations up. Some are files the problem schema refuses."""
    p, v = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    where = draw(st.sampled_from(["loop", "v", "list"])) if v > 1 else "loop"
    v = 2 if where == "v" else v
    n = p * v

    def cost(lo, hi, k=n):
        return draw(st.lists(st.integers(lo, hi), min_size=k, max_size=k) | st.integers(lo, hi))

    added = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    freed = [draw(st.integers(0, a)) for a in added]
    per_stage = draw(st.booleans())
    fields = dict(
        stages=n, stages_per_rank=v, microbatches=draw(st.integers(1, 6)), forward=cost(1, 6),
        backward_input=cost(0, 6), backward_weight=cost(0, 5), transfer=cost(0, 4, n - 1) if n > 1 else 0,
        memory_forward=added if per_stage else added[0], memory_freed_by_weight=freed if per_stage else freed[0],
        memory_limit=draw(st.sampled_from([None, *range(max(max(added), 1), 6 * v * max(max(added), 1) + 1)])),
    )  # fmt: skip
    if where == "list":
        fields["placement"] = draw(st.permutations([r for r in range(p) for _ in range(v)]))
    elif v > 1:
        fields["placement"] = where
    return fields


@st.composite
def any_stage_pipelines(draw):
    """`any_stage_fields` as a pipeline; rejects what the problem file would refuse."""
    try:
        return stage_pipeline(**draw(any_stage_fields()))
    except ValueError:  # pydantic's ValidationError too: a field the problem file refuses
        reject()
