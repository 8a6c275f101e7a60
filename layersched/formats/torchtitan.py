"""A schedule for torchtitan: its compute-only CSV and the ``[parallelism]`` settings that run it.

torchtitan (``torchtitan/distributed/pipeline_parallel.py``) runs a CSV given as
``pipeline_parallel_schedule_csv`` with torch's ``_PipelineScheduleRuntime``. It still reads the
schedule *name* (``pipeline_parallel_schedule``) to place the stages: V (rank r holds stages r and
2p-1-r) for ``ZBVZeroBubble`` and ``DualPipeV``, else loop (stage s on rank s mod p). The number of
stages is the length of ``module_fqns_per_model_part`` when given, and the number of micro-batches
is ``training.local_batch_size / pipeline_parallel_microbatch_size``. `torchtitan_settings` picks a
name whose placement and stages per rank are the schedule's, and refuses a placement torchtitan
cannot express. ``layersched preflight`` (`layersched.runtime.preflight`) replays torch's own checks.

Example
-------
>>> torchtitan_schedule_name([0, 1, 2, 3])
'1F1B'
>>> torchtitan_schedule_name([0, 1, 1, 0])
'ZBVZeroBubble'
>>> torchtitan_schedule_name([0, 1, 0, 1])
'Interleaved1F1B'
"""

from __future__ import annotations

import json

from layersched.describe.placement import placement


class TorchtitanError(ValueError):
    """A schedule torchtitan cannot run as it is; the message says why and what would."""


def torchtitan_placement(name: str) -> str:
    """How torchtitan places the stages for the schedule called ``name``: ``v`` or ``loop``."""
    return "v" if name.lower() in ("zbvzerobubble", "dualpipev") else "loop"


def torchtitan_schedule_name(stage_to_rank: list[int]) -> str:
    """A torchtitan schedule name that places the stages as ``stage_to_rank`` does, with as many
    stages per rank; `TorchtitanError` for a placement torchtitan has no name for."""
    S, R = len(stage_to_rank), max(stage_to_rank) + 1
    v = S // R
    if list(stage_to_rank) == placement(S, R, "loop"):
        return "1F1B" if v == 1 else "Interleaved1F1B"
    if v == 2 and list(stage_to_rank) == placement(S, R, "v"):
        return "ZBVZeroBubble"
    raise TorchtitanError(
        f"torchtitan places stages in a loop (stage s on rank s mod {R}) or, for two stages per rank, in a V; "
        f"this schedule places them {list(stage_to_rank)}: solve it again with placement loop or v"
    )


def torchtitan_settings(doc, csv_path: str, microbatch_size: int = 1) -> str:
    """The TOML for torchtitan's job config that runs schedule file ``doc`` from ``csv_path``."""
    rec = doc.pipeline
    name = torchtitan_schedule_name(rec.stage_to_rank)
    v = rec.num_stages // rec.num_ranks
    lines = [
        f"# layersched schedule {doc.name!r} ({doc.method}): {rec.num_ranks} pipeline ranks, {v} stage(s) per rank,",
        f"# {rec.num_microbatches} micro-batches. torchtitan runs the CSV with torch's _PipelineScheduleRuntime; the",
        f"# schedule name {name} only tells it where the stages go ({torchtitan_placement(name)} placement).",
        "# Check it first: layersched preflight SCHEDULE.json",
        "[parallelism]",
        f"pipeline_parallel_degree = {rec.num_ranks}",
        f'pipeline_parallel_schedule = "{name}"',
        f"pipeline_parallel_schedule_csv = {json.dumps(csv_path)}",
        f"pipeline_parallel_microbatch_size = {microbatch_size}",
    ]
    if rec.data_parallel > 1:
        lines.append(f"data_parallel_replicate_degree = {rec.data_parallel}  # replicas of the pipeline")
    if rec.stage_layers:
        lines.append("# the layer names of each stage: they must be the model's module names (FQNs)")
        parts = ", ".join("[" + ", ".join(json.dumps(x) for x in layers) + "]" for layers in rec.stage_layers)
        lines.append(f"module_fqns_per_model_part = [{parts}]")
    else:
        lines.append(
            f"# module_fqns_per_model_part: give the module names of each of the {rec.num_stages} stages "
            "(a stage-level problem has no layer names)"
        )
    lines += [
        "",
        "[training]",
        f"# {rec.num_microbatches} micro-batches of {microbatch_size}: torchtitan divides local_batch_size by the size",
        f"local_batch_size = {rec.num_microbatches * microbatch_size}",
    ]
    return "\n".join(lines) + "\n"
