"""torch's own multi-stage schedules, and ours in torch's runtime (tests skip without torch)."""

import sys

import pytest

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import schedule_file, to_torch_csv
from layersched.runtime.torch_orders import TorchOrderError, peer_orders, torch_orders
from layersched.schedule.solve import solve_orders, solve_pipeline
from layersched.schedule.templates import template_orders


def pipeline(p, v, m, placement=None, **extra):
    spec = {"stages": p * v, "stages_per_rank": v, "microbatches": m, "forward": 3, "backward_input": 2}
    spec |= {"backward_weight": 2, "transfer": 1, **extra}
    if placement:
        spec["placement"] = placement
    return pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": spec}))


SIZES = [(2, 2, 4), (4, 2, 8), (4, 3, 8), (4, 3, 12), (3, 2, 9), (5, 2, 10), (4, 2, 3), (8, 3, 24)]


@pytest.mark.parametrize("p,v,m", SIZES)
def test_interleaved_zb_is_torchs_order(p, v, m):
    pytest.importorskip("torch")
    pipe = pipeline(p, v, m)
    assert template_orders("interleaved-zb", pipe) == torch_orders("interleaved-zb", p, v, m)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16)])
def test_torch_peers_time_and_validate(p, m):
    pytest.importorskip("torch")
    pipe = pipeline(p, 2, m, placement="v")
    for name in ("zb-v", "dualpipev"):
        orders, split, stage_to_rank = peer_orders(name, pipe)
        sol = solve_orders(pipe, orders, split_backward=split, stage_to_rank=stage_to_rank, method=f"torch:{name}")
        assert split and sol.metrics["bubble_rate"] < 0.5
        assert sorted(a for r in sol.actions() for a in r) == sorted(a for r in orders for a in r)
    with pytest.raises(TorchOrderError, match="places stages loop; the problem's placement is 'v'"):
        peer_orders("interleaved-zb", pipe)


def test_torch_order_errors(monkeypatch):
    pytest.importorskip("torch")
    with pytest.raises(TorchOrderError, match="unknown torch schedule 'zb-x'"):
        torch_orders("zb-x", 4, 2, 8)
    with pytest.raises(TorchOrderError, match="needs 2 stages per rank, the pipeline has 3"):
        torch_orders("zb-v", 4, 3, 8)
    with pytest.raises(TorchOrderError, match="at least 8 micro-batches"):
        torch_orders("dualpipev", 4, 2, 7)
    with pytest.raises(TorchOrderError, match=r"micro-batches \(6\) to be a multiple of the ranks \(4\)"):
        torch_orders("interleaved", 4, 2, 6)
    monkeypatch.setitem(sys.modules, "torch.distributed.pipelining", None)  # as if torch were missing
    with pytest.raises(TorchOrderError, match=r"need torch: pip install 'layersched\[torch\]'"):
        torch_orders("zb-v", 4, 2, 8)


MULTI_CHUNK = [
    ("interleaved", 2, None),
    ("interleaved", 3, None),
    ("interleaved-zb", 2, None),
    ("interleaved-zb", 3, None),
    ("interleaved-zb-mem", 3, None),
    ("interleaved-zb-alt", 2, None),
    ("zb-v", 2, "v"),
    ("dualpipev", 2, "v"),
    ("v-half", 2, "v"),
    ("v-min", 2, "v"),
    ("chunk-greedy", 2, "v"),
    ("chunk-greedy", 3, "loop"),
]


@pytest.mark.parametrize("name,v,where", MULTI_CHUNK)
def test_multi_chunk_csvs_pass_torchs_checks(tmp_path, name, v, where):
    """Our exported CSV loads in torch's _PipelineScheduleRuntime, which validates it and lowers it
    (sends, receives); torch's _validate_schedule accepts it, _add_send_recv adds its communication,
    and torch's dry run of that (_simulate_comms_compute) runs every action: no deadlock."""
    pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import (
        _add_send_recv,
        _PipelineScheduleRuntime,
        _simulate_comms_compute,
        _validate_schedule,
    )

    p, m = 4, 8
    pipe = pipeline(p, v, m, placement=where, memory_forward=1, memory_limit=4 * v * p)
    sol = solve_pipeline(pipe, schedule=name)
    doc = schedule_file(sol)
    csv_path = tmp_path / f"{name}.csv"
    csv_path.write_text(to_torch_csv(doc))
    rt = _PipelineScheduleRuntime.__new__(_PipelineScheduleRuntime)  # no process group needed to load
    rt.pipeline_order, rt._stages, rt._defer_pp_recv = {}, [], False
    rt._num_stages, rt.pp_group_size, rt._n_microbatches = p * v, p, m
    rt._load_csv(str(csv_path))
    assert [[str(a) for a in rt.pipeline_order[r]] for r in range(p)] == doc.actions
    mapping = _validate_schedule(rt.pipeline_order, p, p * v, m)
    assert mapping == dict(enumerate(sol.stage_to_rank))
    comms = _add_send_recv({r: list(rt.pipeline_order[r]) for r in range(p)}, lambda s: mapping[s], p * v)
    names = {str(a) for r in range(p) for a in comms[r]}
    crossing = next(s for s in range(p * v - 1) if mapping[s] != mapping[s + 1])
    assert f"{crossing}SEND_F0" in names and f"{crossing + 1}RECV_F0" in names
    simulated = _simulate_comms_compute(comms, lambda s: mapping[s], p * v)
    ran = sorted(str(a) for r in simulated.values() for a in r if a is not None)
    assert ran == sorted(str(a) for r in comms.values() for a in r)  # every action ran: no deadlock
