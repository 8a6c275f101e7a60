"""``layersched preflight``: will torch and torchtitan run this schedule? torch's own offline checks.

Given a schedule file (already checked by our validator), it replays what torch does before a run:

1. ``_validate_schedule``: every stage's F, I/B and W of every micro-batch, each once, in an order
   torch accepts; it also derives which rank holds each stage;
2. ``_add_send_recv``: the sends and receives torch inserts between ranks;
3. ``_simulate_comms_compute``: torch's dry run of the result, which finds a deadlock of
   misordered communication;
4. torchtitan's placement rule: the stages must sit where torchtitan puts them for the schedule name
   in its config (loop, or V for ``ZBVZeroBubble``/``DualPipeV``; see `layersched.formats.torchtitan`).

Each check is a line with its outcome; a failure says what differs. torch is needed (checks 1-3 are
torch's code); the placement rule alone is pure Python.

`torch_supports` is the short form the runner asks before ``--runtime torch``: check 1, and whether
the installed torch release runs the placement at all (`version_refusal`).
"""

from __future__ import annotations

import contextlib
import io
import itertools
from dataclasses import dataclass

from layersched.describe.placement import placement
from layersched.formats.torchtitan import TorchtitanError, torchtitan_placement, torchtitan_schedule_name


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def placement_check(stage_to_rank: list[int], schedule_name: str | None = None) -> Check:
    """torchtitan's placement for ``schedule_name`` (default: the name our export writes) against
    the schedule's own."""
    S, R = len(stage_to_rank), max(stage_to_rank) + 1
    if schedule_name is None:
        try:
            schedule_name = torchtitan_schedule_name(stage_to_rank)
        except TorchtitanError as exc:
            return Check("torchtitan placement", False, str(exc))
    style = torchtitan_placement(schedule_name)
    if style == "v" and S != 2 * R:
        return Check(
            "torchtitan placement", False, f"{schedule_name} places two stages per rank in a V; this has {S} on {R}"
        )
    theirs = placement(S, R, style)
    wrong = [s for s in range(S) if theirs[s] != stage_to_rank[s]]
    if wrong:
        s = wrong[0]
        return Check(
            "torchtitan placement",
            False,
            f"stage {s} is on rank {stage_to_rank[s]} here; with pipeline_parallel_schedule = {schedule_name} "
            f"torchtitan puts it on rank {theirs[s]} ({style} placement), and {len(wrong) - 1} more stage(s) differ; "
            f"use a schedule name of this placement or solve again with placement {style}",
        )
    return Check("torchtitan placement", True, f"{schedule_name}: {style} placement, {S // R} stage(s) per rank")


TORCH_RUNTIME_SINCE = (2, 11)
"""The first torch release whose runtime ran our schedules: 2.9.1 aborted every one of them over
gloo in its first step ("Received data size doesn't match expected size", float32 models too);
2.11 and 2.13 ran them (session 27). 2.10 was not tried."""

SAME_RANK_NEIGHBOURS_SINCE = (2, 12)
"""The first torch release whose stages pass shapes to a neighbouring stage on their own rank
without the network (``PipelineStage._is_same_rank``, read in 2.12's source). 2.11 sends them as to
another rank, which gloo cannot ("Pair is not connected"): every V placement (``dualpipev``,
``v-half``, ``v-min``, ``zb-v``) failed there, the loop placements ran; 2.13 runs both."""


def version_refusal(version: str, stage_to_rank: list[int]) -> str | None:
    """Why torch ``version``'s runtime cannot run a schedule with this placement, or None: releases
    before `TORCH_RUNTIME_SINCE` at all, and before `SAME_RANK_NEIGHBOURS_SINCE` where two
    neighbouring stages share a rank.

    >>> version_refusal("2.11.0+cu130", [0, 1, 1, 0]).split(", which")[0]
    "torch 2.11.0+cu130's runtime sends stage 1's shapes to stage 2 on the same rank (1) over the network"
    >>> version_refusal("2.11.0", [0, 1, 0, 1]) is None
    True
    """
    from torch.torch_version import TorchVersion

    v = TorchVersion(version)
    if v < TORCH_RUNTIME_SINCE:
        since = ".".join(map(str, TORCH_RUNTIME_SINCE))
        return (
            f"torch {version}'s runtime is older than {since}, the first release that ran our schedules (2.9.1 "
            f"aborted every one over gloo: a message size mismatch); use torch >= {since} or runtime layersched"
        )
    if v < SAME_RANK_NEIGHBOURS_SINCE:
        for s, (a, b) in enumerate(itertools.pairwise(stage_to_rank)):
            if a == b:
                return (
                    f"torch {version}'s runtime sends stage {s}'s shapes to stage {s + 1} on the same rank ({a}) over "
                    f"the network, which fails (V placements); use torch >= "
                    f"{'.'.join(map(str, SAME_RANK_NEIGHBOURS_SINCE))} or runtime layersched"
                )
    return None


def torch_supports(schedule) -> str | None:
    """Why torch's runtime cannot run ``schedule`` (a `ScheduleFile`), or None when it can: the
    installed release must run its placement (`version_refusal`), and torch must accept the CSV as it
    loads it, checked without starting processes."""
    import torch

    why = version_refusal(torch.__version__, list(schedule.pipeline.stage_to_rank))
    if why:
        return why
    _, check = _validate_check(schedule, _torch_actions(schedule))
    return None if check.ok else f"torch rejects the action lists: {check.detail}"


def _torch_actions(doc) -> dict:
    """Each rank's actions of schedule file ``doc`` as torch's ``_Action`` objects."""
    from torch.distributed.pipelining.schedules import _Action

    return {r: [_Action.from_str(a) for a in acts] for r, acts in enumerate(doc.actions)}


def _validate_check(doc, actions: dict) -> tuple[dict | None, Check]:
    """Check 1: torch's ``_validate_schedule`` of ``actions``, and the stage placement it derives
    against the file's. The placement (stage -> rank) when it passes, else None; and the check."""
    from torch.distributed.pipelining.schedules import _validate_schedule

    rec = doc.pipeline
    p, S, m = rec.num_ranks, rec.num_stages, rec.num_microbatches
    try:
        mapping = _validate_schedule(actions, p, S, m)
    except (AssertionError, RuntimeError, ValueError, KeyError) as exc:
        return None, Check("torch _validate_schedule", False, str(exc).strip().splitlines()[0][:300])
    if [mapping[s] for s in range(S)] != list(rec.stage_to_rank):
        why = f"torch derives stage ranks {mapping}, the file has {rec.stage_to_rank}"
        return None, Check("torch _validate_schedule", False, why)
    return mapping, Check("torch _validate_schedule", True, f"{p} ranks, {S} stages, {m} micro-batches")


def preflight(doc, schedule_name: str | None = None) -> list[Check]:
    """torch's offline checks of schedule file ``doc``, then torchtitan's placement rule. `ImportError`
    without torch."""
    from torch.distributed.pipelining.schedules import _add_send_recv, _simulate_comms_compute

    rec = doc.pipeline
    S = rec.num_stages
    actions = _torch_actions(doc)
    mapping, first = _validate_check(doc, actions)
    if mapping is None:
        return [first]
    checks = [first]
    try:
        comms = _add_send_recv(actions, lambda s: mapping[s], S)
    except (AssertionError, ValueError, KeyError) as exc:
        return [*checks, Check("torch _add_send_recv", False, str(exc).strip().splitlines()[0][:300])]
    sends = sum(1 for r in comms.values() for a in r if "SEND" in str(a))
    checks.append(Check("torch _add_send_recv", True, f"{sends} sends and as many receives"))
    printed = io.StringIO()  # torch prints its partial schedule when it stalls: keep it for the message
    try:
        with contextlib.redirect_stdout(printed):
            simulated = _simulate_comms_compute(comms, lambda s: mapping[s], S)
    except (AssertionError, ValueError, RuntimeError) as exc:
        waiting = [line.strip() for line in printed.getvalue().splitlines() if line.startswith("rank=")]
        why = f"{exc}; " + "; ".join(waiting[:4]) if waiting else str(exc)
        return [*checks, Check("torch _simulate_comms_compute", False, why[:400])]
    ran = sum(1 for r in simulated.values() for a in r if a is not None)
    total = sum(len(r) for r in comms.values())
    if ran != total:
        checks.append(Check("torch _simulate_comms_compute", False, f"{total - ran} of {total} actions never ran"))
    else:
        steps = max(len(r) for r in simulated.values())
        checks.append(Check("torch _simulate_comms_compute", True, f"all {total} actions ran, in {steps} steps"))
    checks.append(placement_check(list(rec.stage_to_rank), schedule_name))
    return checks
