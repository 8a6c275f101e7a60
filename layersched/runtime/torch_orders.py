"""torch.distributed.pipelining's own schedules as per-rank action lists, to time them beside ours.

torch (where installed) computes the compute order of its multi-stage schedules for any rank count,
stage count and micro-batch count. `torch_orders` asks it for every rank's order and writes it in our
action names (the same ``{stage}{kind}{micro-batch}`` torch prints). torch's ``B`` (a full backward)
becomes ``I`` then ``W`` on a split-backward graph, and an overlapped ``F&B`` pair its forward then its
backward, as our ``dualpipev`` template reads DualPipeV. `peer_orders` gives it for a pipeline, with torch's
placement; `layersched.schedule.solve.solve_orders` then times it on the problem's task graph and
validates it, memory limit included. These are the peers of ``bench zero-bubble`` (methods
``torch:<name>``).

torch builds these orders in methods that expect a live process group; we call them on an object
that holds only the sizes they read (checked against torch 2.13). A torch whose schedules read more
fails with a clear error rather than a wrong order.
"""

from __future__ import annotations

from dataclasses import dataclass

from layersched.describe.placement import placement
from layersched.describe.stages import Pipeline
from layersched.schedule.templates import TemplateError


@dataclass(frozen=True)
class TorchSchedule:
    cls: str  # class name in torch.distributed.pipelining.schedules
    placement: str  # where torch puts stage s: "loop" (rank s mod p) or "v"
    split_backward: bool  # whether its order holds I and W (else fused B)
    stages_per_rank: int | None  # None: any number of at least 2


TORCH_SCHEDULES = {
    "interleaved": TorchSchedule("ScheduleInterleaved1F1B", "loop", False, None),
    "interleaved-zb": TorchSchedule("ScheduleInterleavedZeroBubble", "loop", True, None),
    "zb-v": TorchSchedule("ScheduleZBVZeroBubble", "v", True, 2),
    "dualpipev": TorchSchedule("ScheduleDualPipeV", "v", True, 2),
}
"""Our name for each of torch's multi-stage schedules (``torch:<name>`` in a suite)."""


class TorchOrderError(TemplateError):
    """torch is missing, or it has no order of that schedule for these sizes; the message says which
    (a `TemplateError`: like a template that does not apply)."""


def torch_orders(name: str, ranks: int, stages_per_rank: int, microbatches: int) -> list[list[str]]:
    """Per-rank compute actions of torch's schedule ``name`` (see `TORCH_SCHEDULES`), in our names.

    Every (stage, kind, micro-batch) appears exactly once, or `TorchOrderError` says what torch left
    out; torch's own preconditions (micro-batch multiples, stage counts) are checked first."""
    if name not in TORCH_SCHEDULES:
        raise TorchOrderError(f"unknown torch schedule {name!r}; known: {', '.join(sorted(TORCH_SCHEDULES))}")
    spec = TORCH_SCHEDULES[name]
    try:
        from torch.distributed.pipelining import schedules
    except ImportError:
        raise TorchOrderError("torch's schedules need torch: pip install 'layersched[torch]'") from None
    p, v, m = ranks, stages_per_rank, microbatches
    if v < 2 or (spec.stages_per_rank is not None and v != spec.stages_per_rank):
        want = spec.stages_per_rank or "at least 2"
        raise TorchOrderError(f"torch's {spec.cls} needs {want} stages per rank, the pipeline has {v}")
    rounds = max(1, m // p)
    if name == "interleaved" and m % p:
        raise TorchOrderError(f"torch's {spec.cls} needs the micro-batches ({m}) to be a multiple of the ranks ({p})")
    if name == "interleaved-zb" and m % rounds:
        raise TorchOrderError(f"torch's {spec.cls} needs the micro-batches ({m}) to be a multiple of {rounds}")
    if name == "dualpipev" and m < 2 * p:
        raise TorchOrderError(f"torch's {spec.cls} needs at least {2 * p} micro-batches, the pipeline has {m}")
    cls = getattr(schedules, spec.cls)
    sizes = cls.__new__(cls)
    sizes.pp_group_size, sizes._n_microbatches, sizes.n_local_stages = p, m, v
    sizes.num_stages = sizes._num_stages = p * v
    sizes.number_of_rounds, sizes.microbatches_per_round = rounds, m // rounds
    kinds = schedules._ComputationType
    out = []
    for r in range(p):
        sizes.rank = r
        try:
            actions = sizes._calculate_single_rank_operations(r)
        except AttributeError as exc:  # a torch whose schedule reads state we do not set
            raise TorchOrderError(f"this torch's {spec.cls} cannot be asked for its order here: {exc}") from None
        order: list[str] = []
        for a in actions:
            for sub in (a.sub_actions or ()) if a is not None and a.computation_type == kinds.OVERLAP_F_B else (a,):
                if sub is None:
                    continue
                kind = sub.computation_type.value
                if kind == "B" and spec.split_backward:
                    order += [f"{sub.stage_index}I{sub.microbatch_index}", f"{sub.stage_index}W{sub.microbatch_index}"]
                else:
                    order.append(f"{sub.stage_index}{kind}{sub.microbatch_index}")
        out.append(order)
    _check_complete(spec, out, p * v, m)
    return out


def _check_complete(spec: TorchSchedule, orders: list[list[str]], stages: int, m: int) -> None:
    kinds = "FIW" if spec.split_backward else "FB"
    want = {f"{s}{k}{i}" for s in range(stages) for k in kinds for i in range(m)}
    seen = [a for order in orders for a in order]
    missing, extra = sorted(want - set(seen)), sorted(set(seen) - want)
    twice = sorted({a for a in seen if seen.count(a) > 1}) if len(seen) != len(set(seen)) else []
    if missing or extra or twice:
        what = "; ".join(
            f"{label} {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
            for label, names in (("missing", missing), ("unknown", extra), ("twice", twice))
            if names
        )
        raise TorchOrderError(f"torch's {spec.cls} gave an incomplete order here: {what}")


def peer_orders(name: str, pipe: Pipeline) -> tuple[list[list[str]], bool, list[int]]:
    """torch's schedule ``name`` for ``pipe``: (per-rank compute orders, split backward, stage-to-rank).
    `TorchOrderError` when it does not apply, also when the problem fixes another placement."""
    spec = TORCH_SCHEDULES[name]
    stage_to_rank = placement(pipe.num_stages, pipe.num_ranks, spec.placement)
    if pipe.placement is not None and pipe.stage_to_rank() != stage_to_rank:
        raise TorchOrderError(
            f"torch's {spec.cls} places stages {spec.placement}; the problem's placement is {pipe.placement!r}"
        )
    orders = torch_orders(name, pipe.num_ranks, pipe.stages_per_rank, pipe.num_microbatches)
    return orders, spec.split_backward, stage_to_rank


def peers() -> dict:
    """``torch:<name>`` -> a function of a pipeline giving `peer_orders`: the suite's peer methods."""
    from functools import partial

    return {f"torch:{name}": partial(peer_orders, name) for name in TORCH_SCHEDULES}
