"""The runner's static side (no processes): transfer matching, bad schedules, layer assignment,
trace files and `compare`, and that none of it needs torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from layersched.formats.export import schedule_file
from layersched.runtime.plan import PlanError, assign_layers, plan_actions, plan_schedule
from layersched.runtime.trace import chrome_path, chrome_trace, compare, load_trace, write_trace
from layersched.schedule.graph import parse_action
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import TEMPLATES, TemplateError, template_names
from tests.layersched.schedule.test_core_path import stage_pipeline


def stage_pipe(ranks: int, microbatches: int, stages_per_rank: int = 1, data_parallel: int = 1):
    """The small stage-level pipeline the runner tests schedule (F 2, I 2, W 1, transfer 1)."""
    pipe = stage_pipeline(
        stages=ranks * stages_per_rank,
        stages_per_rank=stages_per_rank,
        microbatches=microbatches,
        forward=2,
        backward_input=2,
        backward_weight=1,
        transfer=1,
    )
    return replace(pipe, data_parallel=data_parallel)


def template_doc(name: str, ranks: int, microbatches: int):
    t = TEMPLATES[name]
    try:
        pipe = stage_pipe(ranks, microbatches, t.min_stages_per_rank)
        return schedule_file(solve_pipeline(pipe, schedule=name))
    except TemplateError as exc:
        pytest.skip(str(exc))


def issue_orders(plan) -> tuple[dict, dict]:
    """Per channel (src, dst): the tags in the order the sender sends them, and in the order the
    receiver posts them."""
    sent: dict[tuple[int, int], list[int]] = {}
    posted: dict[tuple[int, int], list[int]] = {}
    for rp in plan.ranks:
        for st in rp.steps:
            for t in st.post:
                posted.setdefault((t.src, rp.rank), []).append(t.tag)
            if st.send is not None:
                sent.setdefault((rp.rank, st.send.dst), []).append(st.send.tag)
    return sent, posted


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", template_names())
def test_every_template_plans_with_matched_channel_orders(name, ranks):
    doc = template_doc(name, ranks, 2 * ranks)
    plan = plan_schedule(doc)
    p = doc.pipeline
    # every cross-rank dependency is one transfer, and every transfer joins neighbouring stages
    for t in plan.transfers:
        ps, pk, pm = parse_action(t.producer)
        cs, ck, cm = parse_action(t.consumer)
        assert pm == cm == t.microbatch and abs(ps - cs) == 1
        assert (t.src, t.dst) == (p.stage_to_rank[ps], p.stage_to_rank[cs]) and t.src != t.dst
        assert t.kind == ("activation" if pk == "F" else "gradient")
    tags = [t.tag for t in plan.transfers]
    assert sorted(tags) == list(range(len(tags)))
    # both ends of every channel issue its messages in the same order (NCCL's rule)
    sent, posted = issue_orders(plan)
    assert sent == posted
    # each receive is posted before the action that waits for it, and the plan keeps the action lists
    for rp in plan.ranks:
        assert [st.action for st in rp.steps] == doc.actions[rp.rank]
        posted = set()
        for st in rp.steps:
            posted.update(t.tag for t in st.post)
            assert st.wait is None or st.wait.tag in posted


def test_generic_solver_schedule_plans():
    pytest.importorskip("solvers.listsched")
    doc = schedule_file(solve_pipeline(stage_pipe(4, 6), solver="list"))
    plan = plan_schedule(doc)
    assert len(plan.order) == sum(len(a) for a in doc.actions)
    sent, posted = issue_orders(plan)
    assert sent == posted


def test_one_f_one_b_transfers_and_early_receives():
    plan = plan_actions(2, [0, 1], 2, [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]])
    assert [(t.producer, t.consumer, t.src, t.dst) for t in plan.transfers] == [
        ("0F0", "1F0", 0, 1),
        ("0F1", "1F1", 0, 1),
        ("1B0", "0B0", 1, 0),
        ("1B1", "0B1", 1, 0),
    ]
    rank1 = plan.ranks[1].steps
    # every receive is posted before the first action: each direction is a channel of its own
    assert [[t.consumer for t in st.post] for st in rank1] == [["1F0", "1F1"], [], [], []]
    assert [[t.consumer for t in st.post] for st in plan.ranks[0].steps] == [["0B0", "0B1"], [], [], []]
    assert [st.reduce for st in rank1] == [False, False, False, True]


def test_local_hand_off_between_stages_on_one_rank():
    # a V placement: stages 1 and 2 share rank 1, so 1F0 -> 2F0 and 2B0 -> 1B0 are not transfers
    acts = [["0F0", "3F0", "3B0", "0B0"], ["1F0", "2F0", "2B0", "1B0"]]
    plan = plan_actions(4, [0, 1, 1, 0], 1, acts)
    assert {(t.producer, t.consumer) for t in plan.transfers} == {
        ("0F0", "1F0"),
        ("2F0", "3F0"),
        ("3B0", "2B0"),
        ("1B0", "0B0"),
    }


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (
            [["0F0", "0B0"], ["1F0", "1B0", "1F1", "1B1"]],
            "rank 1: 1F1 receives stage 0's output for micro-batch 1, but no rank runs 0F1 to send it",
        ),
        (
            [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1"]],
            "rank 0: 0B1 receives the input gradient from stage 1 for micro-batch 1, but no rank runs 1B1 (or 1I1)",
        ),
        (
            [["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"]],
            "the schedule deadlocks: rank 0 waits at 0B0 for 1B0 (rank 1) -> rank 1 waits at 1F1 for 0F1 (rank 0)",
        ),
        (
            [["0B0", "0F0", "0F1", "0B1"], ["1F0", "1B0", "1F1", "1B1"]],
            "rank 0 runs 0B0 (position 0) before 0F0 (position 1), which it needs",
        ),
        (
            [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1", "0F0"]],
            "rank 1 lists 0F0, but stage 0 is placed on rank 0",
        ),
        ([["0F0", "0F1", "0B0", "0B1", "0F1"], ["1F0", "1B0", "1F1", "1B1"]], "action 0F1 appears twice"),
        ([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1", "1F2"]], "names stage 1 / micro-batch 2"),
        ([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1I0", "1B0", "1F1", "1B1"]], "has both 1B0 and a split backward"),
        ([["0F0", "0F1", "0B0", "0B1", "0R"], ["1F0", "1B0", "1F1", "1B1"]], "0R is not a compute action"),
    ],
)
def test_bad_schedules_fail_with_one_clear_line(actions, message):
    with pytest.raises(PlanError, match=re.escape(message)) as info:
        plan_actions(2, [0, 1], 2, actions)
    assert "\n" not in str(info.value)


def test_assign_layers():
    names = [f"l{i}" for i in range(7)]
    assert assign_layers(3, None, names) == [["l0", "l1", "l2"], ["l3", "l4"], ["l5", "l6"]]
    assert assign_layers(2, [["l0"], names[1:]], names) == [["l0"], names[1:]]
    for stage_layers, message in [
        (None, None),
        ([["l0"], ["l1"]], "does not cover the model: layers l2, l3, l4, l5, l6 are in no stage"),
        ([["l0", "x"], names[1:]], "layer 'x' of stage 0 is not in the model"),
        ([names], "has 1 stages, pipeline.num_stages is 2"),
        ([names[1:], ["l0"]], "they are not the model's layers in order"),
    ]:
        if message is None:
            with pytest.raises(PlanError, match="8 stages but the model has only 7 layers"):
                assign_layers(8, None, names)
            continue
        with pytest.raises(PlanError, match=message):
            assign_layers(2, stage_layers, names)


def test_import_without_torch():
    """``import layersched`` and everything that runs without a GPU job: no torch."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import layersched, layersched.cli.main, layersched.runtime, layersched.runtime.plan\n"
        "import layersched.runtime.trace, layersched.cli.measure\n"
        "layersched.cli.main._parser()\n"
        "assert 'profile' in layersched.cli.main.COMMANDS and 'compare' in layersched.cli.main.COMMANDS\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def fake_trace(doc, steps: int, scale: float) -> dict:
    """A trace that ran exactly as predicted, with times ``scale`` seconds per schedule unit."""
    ranks = []
    for r in range(doc.pipeline.num_ranks):
        events = [
            {"action": t.name, "step": k, "start": t.start * scale, "duration": t.duration * scale}
            for k in range(steps)
            for t in doc.tasks
            if doc.processors[t.processor].rank == r and doc.processors[t.processor].kind == "compute"
        ]
        # each message between ranks leaves when its producer ends and arrives its delay later
        rank_of = {t.name: doc.processors[t.processor].rank for t in doc.tasks}
        end = {t.name: t.start + t.duration for t in doc.tasks}
        transfers = [
            {"step": k, "tag": tag, "side": side, "bytes": 8, "clock": k + (end[a] + delay * (side == "recv")) * scale}
            | ({"wait": 1.0} if side == "recv" else {})
            for k in range(steps)
            for tag, (a, b, delay) in enumerate(doc.edges)
            if rank_of[a] != rank_of[b]
            for side, at in (("send", a), ("recv", b))
            if rank_of[at] == r
        ]
        ranks.append(
            {
                "rank": r,
                "pipeline_rank": r,
                "replica": 0,
                "events": events,
                "step_starts": [float(k) for k in range(steps)],
                "step_times": [0.5] * steps,
                "transfers": transfers,
            }
        )
    return {"format": "layersched-trace", "version": 1, "data_parallel": 1, "ranks": ranks}


def test_compare_exact_run_has_ratio_one(tmp_path):
    doc = template_doc("1f1b-split", 2, 4)
    doc = doc.model_copy(update={"time_unit": "us"})
    trace = fake_trace(doc, steps=3, scale=1e-6)
    path = tmp_path / "run-trace.json"
    ours, chrome = write_trace(path, trace, doc)
    assert chrome == chrome_path(path) == tmp_path / "run-trace.chrome.json"
    cmp = compare(doc, ours)
    assert cmp.steps == [1, 2] and not cmp.fitted
    rows = {row.what: row for row in cmp.rows}
    assert set(rows) == {"F", "I", "W", "transfer", "all compute", "iteration"}
    for row in rows.values():
        assert row.ratio == pytest.approx(1.0)
    assert rows["F"].predicted_count == 8 and rows["F"].measured_count == 16
    # the Chrome trace: measured events per rank and the predicted timeline beside them
    events = json.loads(chrome.read_text())["traceEvents"]
    measured = [e for e in events if e["ph"] == "X" and not e["args"].get("predicted")]
    predicted = [e for e in events if e["ph"] == "X" and e["args"].get("predicted")]
    assert len(measured) == 3 * len(doc.tasks) and len(predicted) == 3 * len(doc.tasks)
    assert {e["pid"] for e in measured} == {0, 1} and {e["pid"] for e in predicted} == {2, 3}
    first = next(e for e in measured if e["name"] == "1F0" and e["args"]["step"] == 1)
    task = next(t for t in doc.tasks if t.name == "1F0")
    assert first["ts"] == pytest.approx((1.0 + task.start * 1e-6) * 1e6)


def test_compare_fits_a_scale_for_abstract_units():
    doc = template_doc("gpipe", 2, 4)
    cmp = compare(doc, fake_trace(doc, steps=2, scale=2e-3))
    assert cmp.fitted and cmp.scale == pytest.approx(2e-3)
    assert {row.what: row.ratio for row in cmp.rows}["iteration"] == pytest.approx(1.0)
    assert "fitted" in cmp.to_text()


def test_compare_refuses_the_trace_of_another_schedule(tmp_path):
    """A trace compared with a schedule file that run did not execute gave a table of nonsense (a 1F1B
    run against a GPipe file: every action kind, ratios and all). The trace names what it ran."""
    from layersched.describe.config import SpecError

    ran, other = template_doc("1f1b", 2, 4), template_doc("gpipe", 2, 4)
    header = {"schedule": ran.name, "method": ran.method, "num_ranks": 2}  # as `trace_document` writes them
    path, _ = write_trace(tmp_path / "t.json", fake_trace(ran, 2, 1e-3) | header, ran)
    assert compare(ran, path).rows  # its own schedule file
    with pytest.raises(SpecError) as err:
        compare(other, path)
    assert str(err.value) == (
        f"{path}: the trace is of a run of another schedule: its method is '1f1b', the schedule file's 'gpipe'; "
        "pass the schedule file that run executed"
    )
    with pytest.raises(SpecError, match="its num_ranks is 2, the schedule file's 4"):
        compare(template_doc("1f1b", 4, 4), path)


def test_load_trace_names_the_wrong_file(tmp_path):
    doc = template_doc("gpipe", 2, 2)
    _, chrome = write_trace(tmp_path / "t.json", fake_trace(doc, 1, 1e-3), doc)
    with pytest.raises(ValueError, match="this is the Chrome trace; pass the layersched trace"):
        load_trace(chrome)
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a layersched trace"):
        load_trace(tmp_path / "x.json")
    assert chrome_trace(fake_trace(doc, 1, 1e-3))["traceEvents"][0]["ph"] == "M"


def test_world_size_and_placement_of_a_dp_schedule():
    pipe = stage_pipe(2, 4, data_parallel=2)
    doc = schedule_file(solve_pipeline(pipe, schedule="1f1b"))
    assert doc.pipeline.data_parallel == 2
    assert plan_schedule(doc).num_ranks == 2
