"""The core path: description -> task graph -> validated schedule -> JSON, and its checks."""

import json

import numpy as np
import pytest

from layersched.describe.config import ProblemSpec, SpecError, load_problem
from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import (
    SCHEMA_PATH,
    check_actions,
    load_schedule,
    save_json,
    schedule_file,
    schedule_json_schema,
    to_problem,
    to_torch_csv,
)
from layersched.schedule.graph import build_graph, parse_action, placement
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import TemplateError, template_orders
from solvers import InvalidSchedule, validate
from tests.paths import DATA

# (p, m, F, I, W, transfer, h, a, published 1F1B bubble rate)
ZB_SETTINGS = [
    (8, 24, 18522, 18086, 9337, 601, 2304, 24, 0.2431),
    (8, 24, 29718, 29444, 19927, 527, 4096, 32, 0.2347),
    (16, 48, 11347, 11248, 8132, 377, 5120, 40, 0.2552),
]


def stage_pipeline(**fields):
    """A stage-level pipeline from `StagePipelineSpec` fields."""
    return pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": fields}))


def zb_pipeline(p, m, F, I, W, c, h, a, limit_factor=1, **extra):
    mem = 34 * h + 5 * a * 1024  # s = 1024
    return stage_pipeline(
        stages=p,
        microbatches=m,
        forward=F,
        backward_input=I,
        backward_weight=W,
        transfer=c,
        memory_forward=mem,
        memory_freed_by_weight=32 * h,
        memory_limit=limit_factor * p * mem,
        **extra,
    )


@pytest.mark.parametrize("setting", ZB_SETTINGS, ids=["1.5B", "6.2B", "14.6B"])
def test_1f1b_reproduces_zero_bubble_published_rates(setting):
    p, m, F, I, W, c, h, a, published = setting
    sol = solve_pipeline(zb_pipeline(p, m, F, I, W, c, h, a), schedule="1f1b")
    assert round(sol.metrics["bubble_rate"], 4) == published
    mem = 34 * h + 5 * a * 1024
    # peaks at exactly the 1p limit on rank 0, and never above it anywhere
    assert sol.metrics["peak_memory"][0] == p * mem
    assert max(sol.metrics["peak_memory"]) == p * mem
    # rank r keeps p - r micro-batches alive at most
    assert sol.metrics["peak_memory"] == [(p - r) * mem for r in range(p)]


@pytest.mark.parametrize("setting", ZB_SETTINGS, ids=["1.5B", "6.2B", "14.6B"])
def test_1f1b_bubble_time_closed_form_without_transfer(setting):
    p, m, F, I, W, _, h, a, _ = setting
    sol = solve_pipeline(zb_pipeline(p, m, F, I, W, 0, h, a), schedule="1f1b")
    assert sol.metrics["span"] - m * (F + I + W) == (p - 1) * (F + I + W)


def test_gpipe_and_split_1f1b_closed_forms():
    p, m, F, I, W = 4, 8, 3, 2, 1
    pipe = zb_pipeline(p, m, F, I, W, 0, 1, 1, limit_factor=10)
    assert solve_pipeline(pipe, schedule="gpipe").metrics["span"] == (m + p - 1) * (F + I + W)
    # with the backward split, the cool-down chain passes only through I: (p-1) W shorter
    split = solve_pipeline(pipe, schedule="1f1b-split").metrics["span"]
    assert split == (m + p - 1) * (F + I + W) - (p - 1) * W
    # GPipe keeps every micro-batch alive on rank 0
    gp = solve_pipeline(pipe, schedule="gpipe")
    assert gp.metrics["peak_memory"][0] == m * (34 + 5 * 1024)


def test_memory_limit_is_enforced_by_validation():
    pipe = zb_pipeline(4, 8, 3, 2, 1, 0, 1, 1, limit_factor=1)
    # GPipe needs m activations on rank 0 but the limit is p: the validator rejects it
    with pytest.raises(InvalidSchedule, match=r"0F4 raises memory on rank0 .* over the capacity"):
        solve_pipeline(pipe, schedule="gpipe")


def test_graph_structure():
    pipe = zb_pipeline(3, 2, 1, 1, 1, 5, 1, 1)
    g = build_graph(pipe, split_backward=True)
    assert g.number_of_nodes() == 3 * 2 * 3
    assert g.edges["0F1", "1F1"]["delay"] == 5
    assert g.edges["2I1", "1I1"]["delay"] == 5
    assert g.has_edge("2F0", "2I0") and g.has_edge("1I0", "1W0")
    assert g.nodes["1I0"]["memory"] == -(pipe.mem_forward[1] - pipe.mem_freed_by_weight[1])
    fused = build_graph(pipe, split_backward=False)
    assert fused.nodes["0B1"]["memory"] == -pipe.mem_forward[0]
    assert parse_action("12W3") == (12, "W", 3)
    assert placement(6, 3, "v") == [0, 1, 2, 2, 1, 0]
    assert placement(6, 3, "loop") == [0, 1, 2, 0, 1, 2]


def test_model_level_problem_with_data_parallel():
    spec = load_problem(DATA / "tiny-model.yaml")
    pipe = pipeline_from_spec(spec)
    assert pipe.stage_layers == [["l0", "l1"], ["l2", "l3"]]
    # sub-layers sum into their layer: l3 forward = 0.8 ms + 0.2 ms
    assert pipe.forward.tolist() == [3_000_000, 3_000_000]
    assert (pipe.allreduce > 0).all()
    sol = solve_pipeline(pipe)
    names = set(sol.tasks.names)
    assert {"0R", "1R", "0U", "1U"} <= names
    s, prob = sol.schedule, sol.tasks.problem
    end = s.end(prob)
    i = sol.tasks.index
    # the all-reduce runs on the network processor after the stage's last backward
    assert s.processor[i["0R"]] == 2 and s.start[i["0R"]] >= max(end[i[f"0B{k}"]] for k in range(4))
    assert s.start[i["0U"]] >= end[i["0R"]]


def test_bad_input_is_one_line_naming_file_field_and_fix(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((DATA / "zb-1.5b.yaml").read_text().replace("transfer:", "transfr:"))
    with pytest.raises(SpecError) as err:
        load_problem(bad)
    msg = str(err.value)
    assert msg == f"{bad}: pipeline.transfr: unknown key; remove it or check its spelling"
    bad.write_text(
        "name: x\npipeline: {stages: 2, microbatches: 0, forward: 1, backward_input: 1, backward_weight: 1}\n"
    )
    with pytest.raises(SpecError, match=r"bad.yaml: pipeline.microbatches: Input should be greater than or equal to 1"):
        load_problem(bad)
    bad.write_text("name: x\nmodel: {name: m, layers: []}\n")
    with pytest.raises(SpecError, match="bad.yaml: model: 'layers' is empty; a model needs at least one layer"):
        load_problem(bad)
    bad.write_text("name: x\nmodel: {name: m, layers: [{name: a}]}\n")
    with pytest.raises(SpecError, match="missing cluster, training"):
        load_problem(bad)
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_problem(bad)
    # profiled times in milliseconds: the costs are whole numbers, so the fix is a smaller unit
    bad.write_text(
        "name: x\npipeline: {stages: 2, microbatches: 4, forward: [1, 2.5], backward_input: 1, backward_weight: 1}\n"
    )
    with pytest.raises(SpecError) as err:
        load_problem(bad)
    assert str(err.value).endswith(
        "pipeline.forward.1: Input should be a valid integer, got a number with a fractional part; the stage-level"
        " costs are whole numbers: give them all in a smaller unit and name it (e.g. 1.5 ms as 1500 with time_unit: us)"
    )
    bad.write_text(
        "name: x\npipeline: {stages: 2, microbatches: 4, forward: 1, backward_input: 1, backward_weight: 1,\n"
        "  memory_forward: 0.5}\n"
    )
    with pytest.raises(SpecError, match=r"memory_forward: .*\(e.g. 1.5 GiB as 1536 with memory_unit: MiB\)$"):
        load_problem(bad)
    # YAML 1.1 reads 1e6 and 1e+6 as text: say so, not "unable to parse string as an integer"
    for text in ("1e6", "1e+6", "2.5E3"):
        bad.write_text(
            f"name: x\npipeline: {{stages: 2, microbatches: 4, forward: {text}, backward_input: 1,"
            " backward_weight: 1}\n"
        )
        with pytest.raises(SpecError) as err:
            load_problem(bad)
        assert str(err.value) == (
            f"{bad}: pipeline.forward: '{text}' is text to YAML, not a number; write it out in full, or with a dot"
            " and a signed exponent (1.0e+6)"
        )
    bad.write_text(
        "name: x\npipeline: {stages: 2, microbatches: 4, forward: 1.0e+6, backward_input: 1, backward_weight: 1}\n"
    )
    assert load_problem(bad).pipeline.forward == 1_000_000


def test_too_many_stages_for_the_model_says_the_least_feasible():
    spec = load_problem(DATA / "tiny-model.yaml")
    big = spec.model_copy(update={"training": spec.training.model_copy(update={"stages_per_rank": 4})})
    with pytest.raises(SpecError, match="tiny: training.pipeline: 8 stages need at least 8 layers, the model has 4"):
        pipeline_from_spec(big, "tiny")
    wide = spec.model_copy(update={"training": spec.training.model_copy(update={"pipeline": 4})})
    with pytest.raises(SpecError, match="pipeline x data_parallel = 8 devices, but the cluster has 4"):
        pipeline_from_spec(wide, "tiny")


def test_template_rejects_wrong_stage_count():
    pipe = zb_pipeline(4, 8, 1, 1, 1, 0, 1, 1, stages_per_rank=2)
    with pytest.raises(TemplateError, match="needs exactly 1 stage"):
        template_orders("1f1b", pipe)
    with pytest.raises(ValueError, match="unknown schedule 'foo'; valid: "):
        solve_pipeline(pipe, schedule="foo")


def test_schedule_file_round_trip_and_schema(tmp_path):
    sol = solve_pipeline(zb_pipeline(*ZB_SETTINGS[0][:8]), schedule="1f1b")
    doc = schedule_file(sol, source="zb")
    path = tmp_path / "s.json"
    save_json(doc, path)
    back = load_schedule(path)
    assert back == doc
    problem, schedule = to_problem(back)
    validate(problem, schedule)
    assert np.array_equal(schedule.start, sol.schedule.start)
    assert np.array_equal(problem.duration, sol.tasks.problem.duration)
    assert np.array_equal(problem.edges, sol.tasks.problem.edges)
    check_actions(back, problem, schedule)
    # the shipped schema is the generated one
    assert json.loads(SCHEMA_PATH.read_text()) == schedule_json_schema()
    assert not list(tmp_path.glob(".*tmp")), "no temporary file left behind"


def test_edited_schedule_file_is_rejected(tmp_path):
    sol = solve_pipeline(zb_pipeline(*ZB_SETTINGS[0][:8]), schedule="1f1b")
    data = json.loads(schedule_file(sol).model_dump_json())
    task = next(t for t in data["tasks"] if t["name"] == "3F2")
    task["start"] -= 1000  # before 2F2's output arrives
    doc = load_schedule(_write(tmp_path / "a.json", data))
    with pytest.raises(InvalidSchedule, match=r"precedence: 3F2 starts at .* but 2F2 ends at"):
        validate(*to_problem(doc))
    data = json.loads(schedule_file(sol).model_dump_json())
    data["processors"][0]["capacity"] -= 1
    doc = load_schedule(_write(tmp_path / "b.json", data))
    with pytest.raises(InvalidSchedule, match=r"memory: 0F7 raises memory on rank0 .* by 1"):
        validate(*to_problem(doc))
    data = json.loads(schedule_file(sol).model_dump_json())
    data["actions"][0][0], data["actions"][0][1] = data["actions"][0][1], data["actions"][0][0]
    doc = load_schedule(_write(tmp_path / "c.json", data))
    with pytest.raises(SpecError, match="rank 0 position 0 is 0F1, but by start time it must be 0F0"):
        check_actions(doc, *to_problem(doc))


def test_passes_at_the_same_start_may_be_listed_in_either_order(tmp_path):
    """A zero-length ``W`` (a stage without weights) that starts with a forward is listed first, as
    `Schedule.orders` times it; a file that lists the two the other way round (as files written before
    that rule do) still passes: the same starts, so the same validated schedule."""
    spec = {"stages": 4, "stages_per_rank": 2, "placement": "loop", "microbatches": 4, "forward": 3,
            "backward_input": 5, "backward_weight": 0, "transfer": 2, "memory_forward": 2,
            "memory_freed_by_weight": 1, "memory_limit": 8}  # fmt: skip
    sol = solve_pipeline(pipeline_from_spec(ProblemSpec.model_validate({"name": "w0", "pipeline": spec})),
                         schedule="interleaved-zb")  # fmt: skip
    data = json.loads(schedule_file(sol).model_dump_json())
    start = {t["name"]: t["start"] for t in data["tasks"]}
    ties = [
        (r, k)
        for r, acts in enumerate(data["actions"])
        for k in range(len(acts) - 1)
        if start[acts[k]] == start[acts[k + 1]] and "W" in acts[k] and "W" not in acts[k + 1]
    ]
    assert ties, "this schedule has a zero-length W at a forward's or I's start"
    r, k = ties[0]
    acts = data["actions"][r]
    acts[k], acts[k + 1] = acts[k + 1], acts[k]
    doc = load_schedule(_write(tmp_path / "ties.json", data))
    check_actions(doc, *to_problem(doc))
    acts[0], acts[-1] = acts[-1], acts[0]  # a real reordering is still refused
    doc = load_schedule(_write(tmp_path / "moved.json", data))
    with pytest.raises(SpecError, match=f"rank {r} position 0 is"):
        check_actions(doc, *to_problem(doc))


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_torch_csv_loads_into_torch_runtime(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime, _validate_schedule

    pipe = zb_pipeline(4, 8, 1, 1, 1, 0, 1, 1, limit_factor=4)
    for name in ("gpipe", "1f1b", "1f1b-split"):
        doc = schedule_file(solve_pipeline(pipe, schedule=name))
        csv_path = tmp_path / f"{name}.csv"
        csv_path.write_text(to_torch_csv(doc))
        # a runtime object without local stages is enough for _load_csv: it parses the CSV,
        # validates it and lowers it to a schedule with send/recv actions
        rt = _PipelineScheduleRuntime.__new__(_PipelineScheduleRuntime)
        rt.pipeline_order, rt._stages, rt._defer_pp_recv = {}, [], False
        rt._num_stages, rt.pp_group_size, rt._n_microbatches = 4, 4, 8
        rt._load_csv(str(csv_path))
        assert [[str(a) for a in rt.pipeline_order[r]] for r in range(4)] == doc.actions
        assert rt.stage_index_to_group_rank == {s: s for s in range(4)}
        lowered = [str(a) for a in rt.pipeline_order_with_comms[1]]
        assert "1SEND_F0" in lowered and "1RECV_F0" in lowered
        mapping = _validate_schedule(rt.pipeline_order, 4, 4, 8)
        assert mapping == {s: s for s in range(4)}
    assert torch.__version__
