"""The schedule file (versioned JSON, loaded back losslessly) and torch.distributed.pipelining's CSV.

The JSON carries the whole task problem (durations, processors, edges with delays, memory deltas,
capacities), the timed tasks, each rank's action list (what the runner executes) and the metrics,
so `layersched validate` can check it with nothing else at hand. Its JSON Schema is generated from
`ScheduleFile` and shipped as ``layersched/formats/schema/schedule.schema.json``.

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> from layersched.describe.stages import pipeline_from_spec
>>> from layersched.schedule.solve import solve_pipeline
>>> sol = solve_pipeline(pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 2, "microbatches": 2, "forward": 1, "backward_input": 1, "backward_weight": 1}})))
>>> doc = schedule_file(sol)
>>> doc.actions[1]
['1F0', '1B0', '1F1', '1B1']
>>> to_torch_csv(doc).splitlines()[0]
'0F0,0F1,0B0,0B1'
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import tempfile
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from layersched.describe.config import (
    MAX_INT,
    Microbatches,
    NoBool,
    NonNegInt,
    SpecError,
    Stages,
    Strict,
    format_validation_error,
    read_data,
)
from layersched.schedule.graph import compute_orders, parse_action, processor_of
from solvers import UNLIMITED, Problem, Schedule

FORMAT_VERSION = 1
SCHEMA_PATH = Path(__file__).parent / "schema" / "schedule.schema.json"


class ProcessorRecord(Strict):
    name: str
    kind: Literal["compute", "network"]
    rank: NonNegInt
    capacity: NonNegInt | None = Field(None, description="memory capacity; null for unlimited")


class TaskRecord(Strict):
    name: str = Field(description="action name, e.g. 0F3, 1I3, 1W3, 2B3, 0R (all-reduce), 0U (update)")
    processor: NonNegInt
    start: NonNegInt
    duration: NonNegInt
    memory: Annotated[int, Field(ge=-MAX_INT, le=MAX_INT), NoBool] = Field(
        0, description="allocated at start when positive, released at end when negative"
    )
    allowed: list[NonNegInt] | None = Field(None, description="processors the task may run on; null: only its own")
    group: Annotated[int, Field(ge=-1, le=MAX_INT), NoBool] = -1


class PipelineRecord(Strict):
    num_stages: Stages
    num_ranks: Stages
    num_microbatches: Microbatches
    data_parallel: Stages = 1
    split_backward: bool
    stage_to_rank: list[NonNegInt]
    stage_layers: list[list[str]] | None = Field(None, description="names of the model layers of each stage")


class ScheduleFile(Strict):
    """A solved schedule: problem, timing, per-rank actions and metrics."""

    format_version: Literal[1] = FORMAT_VERSION
    name: str
    method: str = Field(description="template or solver that produced the schedule")
    objective: Literal["makespan", "span"]
    time_unit: str
    memory_unit: str = "bytes"
    source: str | None = Field(None, description="problem file the schedule was solved from")
    pipeline: PipelineRecord
    processors: list[ProcessorRecord]
    tasks: list[TaskRecord]
    edges: list[tuple[str, str, NonNegInt]] = Field(description="(before, after, transfer delay)")
    actions: list[list[str]] = Field(description="per rank, its compute actions in execution order")
    metrics: dict


def schedule_file(sol, source: str | None = None) -> ScheduleFile:
    """The `ScheduleFile` of a `layersched.schedule.solve.Solution`."""
    prob, sched, g = sol.tasks.problem, sol.schedule, sol.tasks.graph
    names = prob.names
    R = sol.pipe.num_ranks
    fixed = prob.fixed_processor()
    procs = [
        ProcessorRecord(
            name=prob.processor_label(q),
            kind="compute" if q < R else "network",
            rank=q % R,
            capacity=int(c) if c < UNLIMITED else None,
        )
        for q, c in enumerate(prob.capacity.tolist())
    ]
    # plain dicts, checked by ScheduleFile in one pass (a TaskRecord per task is several times slower)
    columns = zip(
        names,
        sched.processor.tolist(),
        sched.start.tolist(),
        prob.duration.tolist(),
        prob.mem_delta.tolist(),
        fixed.tolist(),
        prob.group.tolist(),
        strict=True,
    )
    tasks = [
        {
            "name": name,
            "processor": q,
            "start": start,
            "duration": dur,
            "memory": mem,
            "allowed": None if fix >= 0 else np.flatnonzero(prob.allowed[t]).tolist(),
            "group": group,
        }
        for t, (name, q, start, dur, mem, fix, group) in enumerate(columns)
    ]
    edges = [(names[u], names[v], int(d)) for (u, v), d in zip(prob.edges.tolist(), prob.delay.tolist(), strict=False)]
    pipe = sol.pipe
    return ScheduleFile(
        name=pipe.name,
        method=sol.method,
        objective=sol.objective,
        time_unit=pipe.time_unit,
        memory_unit=pipe.memory_unit,
        source=source,
        pipeline=PipelineRecord(
            num_stages=pipe.num_stages,
            num_ranks=R,
            num_microbatches=pipe.num_microbatches,
            data_parallel=pipe.data_parallel,
            split_backward=sol.split_backward,
            stage_to_rank=list(g.graph["stage_to_rank"]),
            stage_layers=pipe.stage_layers,
        ),
        processors=procs,
        tasks=tasks,
        edges=edges,
        actions=sol.actions(),
        metrics=sol.metrics,
    )


def to_problem(doc: ScheduleFile) -> tuple[Problem, Schedule]:
    """Rebuild the task problem and the schedule from a file; `SpecError` on dangling names."""
    index = {t.name: i for i, t in enumerate(doc.tasks)}
    if len(index) != len(doc.tasks):
        seen = set()
        dup = next(t.name for t in doc.tasks if t.name in seen or seen.add(t.name))
        raise SpecError(f"tasks: {dup} appears twice; task names must be unique")
    P = len(doc.processors)
    allowed = np.zeros((len(doc.tasks), P), dtype=bool)
    for i, t in enumerate(doc.tasks):
        for q in t.allowed if t.allowed is not None else [t.processor]:
            if not 0 <= q < P:
                raise SpecError(f"tasks: {t.name} names processor {q}, but there are {P} (0..{P - 1})")
            allowed[i, q] = True
    try:
        edges = [(index[u], index[v]) for u, v, _ in doc.edges]
    except KeyError as exc:
        raise SpecError(f"edges: task {exc.args[0]} is not in tasks") from None
    problem = Problem(
        duration=[t.duration for t in doc.tasks],
        allowed=allowed,
        edges=np.array(edges, dtype=np.int64).reshape(-1, 2),
        delay=[d for _, _, d in doc.edges],
        mem_delta=[t.memory for t in doc.tasks],
        capacity=[UNLIMITED if p.capacity is None else p.capacity for p in doc.processors],
        group=[t.group for t in doc.tasks],
        names=tuple(index),
        processor_names=tuple(p.name for p in doc.processors),
    )
    return problem, Schedule(processor=[t.processor for t in doc.tasks], start=[t.start for t in doc.tasks])


def check_structure(doc: ScheduleFile) -> None:
    """The file's tasks and edges must be the task graph its pipeline record describes: rebuilt here
    with `layersched.schedule.graph.build_graph` from the stages, micro-batches, backward mode and
    placement, with each stage's costs read from micro-batch 0. So an edge deleted by hand, a task
    added or dropped, one micro-batch costing differently from the others, or a task on another
    processor than the placement record puts its stage (preflight and the torchtitan export read
    the record, the runner and torch's CSV the tasks) is named, whatever the stored edges say.
    `SpecError` on the first difference."""
    from layersched.describe.stages import Pipeline
    from layersched.schedule.graph import build_graph

    pr = doc.pipeline
    S, R, m = pr.num_stages, pr.num_ranks, pr.num_microbatches
    if len(pr.stage_to_rank) != S or S < 1 or R < 1 or m < 1:
        raise SpecError(
            f"pipeline: {S} stages on {R} ranks with {m} micro-batches and stage_to_rank {pr.stage_to_rank}"
        )
    tasks = {t.name: t for t in doc.tasks}
    delays = {(u, v): d for u, v, d in doc.edges}

    def cost(name: str, field: str = "duration") -> int:
        t = tasks.get(name)
        return 0 if t is None else getattr(t, field)

    back = ("I", "W") if pr.split_backward else ("B",)
    per_stage = {k: np.array([cost(f"{s}{k}0") for s in range(S)]) for k in ("F", *back)}
    zero = np.zeros(S, dtype=np.int64)
    transfer = [delays.get((f"{s}F0", f"{s + 1}F0"), 0) for s in range(S - 1)]
    try:
        pipe = Pipeline(
            name=doc.name, num_ranks=R, num_microbatches=m, forward=per_stage["F"],
            backward_input=per_stage["I"] if pr.split_backward else zero,
            backward_weight=per_stage["W"] if pr.split_backward else zero,
            transfer=np.array(transfer, dtype=np.int64),
            mem_forward=np.array([cost(f"{s}F0", "memory") for s in range(S)]),
            mem_freed_by_weight=np.array([-cost(f"{s}W0", "memory") for s in range(S)]) if pr.split_backward else zero,
            capacity=None, allreduce=np.array([cost(f"{s}R") for s in range(S)]),
            optimizer=np.array([cost(f"{s}U") for s in range(S)]), data_parallel=pr.data_parallel,
            backward=None if pr.split_backward else per_stage["B"],
        )  # fmt: skip
        g = build_graph(pipe, split_backward=pr.split_backward, stage_to_rank=list(pr.stage_to_rank))
    except ValueError as exc:
        raise SpecError(f"pipeline: {exc}") from None
    missing = [n for n in g.nodes if n not in tasks]
    extra = [n for n in tasks if n not in g.nodes]
    if missing or extra:
        what = f"{missing[0]} is missing" if missing else f"{extra[0]} is not part of this pipeline"
        raise SpecError(f"tasks: {what} (the pipeline record describes {g.number_of_nodes()} tasks)")
    for name, data in g.nodes(data=True):
        t = tasks[name]
        own = processor_of(data["rank"], data["kind"], R)
        if t.processor != own:
            where = f"on rank {data['rank']}" + ("'s network processor" if data["kind"] == "R" else "")
            raise SpecError(
                f"tasks: {name} runs on processor {t.processor}, but stage_to_rank places stage "
                f"{parse_action(name)[0]} {where} (processor {own})"
            )
        if t.allowed is not None and list(t.allowed) != [own]:
            raise SpecError(f"tasks: {name} may run on processors {list(t.allowed)}; a pipeline's task runs on {own}")
        if (t.duration, t.memory) != (data["duration"], data["memory"]):
            s, kind, _ = parse_action(name)
            raise SpecError(
                f"tasks: {name} takes {t.duration} with memory {t.memory}, but {s}{kind}0 takes "
                f"{data['duration']} with memory {data['memory']}; every micro-batch of a stage costs the same"
            )
    for u, v, d in g.edges(data="delay"):
        if (u, v) not in delays:
            raise SpecError(f"edges: {u} -> {v} is missing; the pipeline's structure needs it")
        if delays[(u, v)] != d:
            raise SpecError(f"edges: {u} -> {v} has delay {delays[(u, v)]}, the stage boundary's is {d}")
    extra = [e for e in delays if not g.has_edge(*e)]
    if extra:
        raise SpecError(f"edges: {extra[0][0]} -> {extra[0][1]} is not part of this pipeline")
    if len(doc.edges) != len(delays):
        raise SpecError("edges: an edge is listed twice")


def check_actions(doc: ScheduleFile, problem: Problem, schedule: Schedule) -> None:
    """The action lists must be exactly each rank's compute tasks in start order (what the runner
    executes is what was validated); `SpecError` naming the first mismatch otherwise. Passes that
    start at the same time (a zero-length one and the next) may be listed in either order: files
    written before `Schedule.orders` put zero-length passes first list them by task index."""
    names = problem.names
    R = doc.pipeline.num_ranks
    if len(doc.actions) != R:
        raise SpecError(f"actions: {len(doc.actions)} ranks listed, the pipeline has {R}")
    start = dict(zip(names, schedule.start.tolist(), strict=True))
    for r, (order, acts) in enumerate(zip(compute_orders(problem, schedule, R), doc.actions, strict=False)):
        expect = [names[t] for t in order]
        if expect == acts:
            continue
        if sorted(acts) == sorted(expect) and all(start[a] <= start[b] for a, b in itertools.pairwise(acts)):
            continue  # only passes with equal starts listed the other way round
        k = next((i for i, (a, b) in enumerate(zip(expect, acts, strict=False)) if a != b), min(len(expect), len(acts)))
        got = acts[k] if k < len(acts) else "(end)"
        want = expect[k] if k < len(expect) else "(end)"
        raise SpecError(f"actions: rank {r} position {k} is {got}, but by start time it must be {want}")


def save_json(doc: BaseModel, path: str | Path) -> None:
    """Write ``doc`` as JSON to ``path`` atomically (temporary file, then rename)."""
    write_text(path, doc.model_dump_json(indent=1) + "\n")


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically; see `write_bytes`."""
    write_bytes(path, text.encode())


def check_output(path: str | Path, *, folder: bool = False) -> None:
    """Refuse now, with `write_bytes`'s messages, an output file (or, with ``folder``, an output folder)
    that could not be written at the end, so that a long command does not lose its work to a bad path.
    Nothing is created; the folders `write_bytes` would make must be possible to make.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> check_output(d / "new" / "a.json")  # a folder to be made: fine
    >>> (d / "f").write_text("x")
    1
    >>> check_output(d / "f" / "a.json")
    Traceback (most recent call last):
    ...
    layersched.describe.config.SpecError: ... cannot create its folder: a part of ... is a file
    """
    if str(path) == "":
        raise SpecError("output path is empty; name a " + ("folder" if folder else "file to write"))
    path = Path(path)
    if folder:
        if path.exists() and not path.is_dir():
            raise SpecError(f"{path}: is {'a file' if path.is_file() else 'not a folder'}; name a folder to write in")
        where = path
    else:
        target = path.resolve() if path.is_symlink() else path
        if target.exists() and not target.is_file():
            what = (
                "a directory; name a file to write"
                if target.is_dir()
                else "not a regular file (a device, FIFO or socket); layersched only replaces regular files"
            )
            raise SpecError(f"{target}: is {what}")
        where = target.parent
    existing = where
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(f"{path}: cannot create its folder: a part of {where} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(f"{path}: cannot write in {existing} (permission denied)")


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, renamed into place, so a
    reader never sees half a file and a failed write leaves the old file as it was.

    Only a regular file is ever replaced: a path that names a directory, a device, a FIFO or a socket
    is refused with a `SpecError` naming it, and so is an empty path. A symbolic link is followed on
    purpose: the file it points to is replaced and the link stays. Missing parent folders are created.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "sub" / "a.txt"
    >>> write_bytes(out, b"hi").read_bytes()
    b'hi'
    >>> write_bytes(out.parent, b"x")
    Traceback (most recent call last):
    ...
    layersched.describe.config.SpecError: ... is a directory; name a file to write
    """
    check_output(path)
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise SpecError(f"{path}: cannot create its folder: a part of {path.parent} is a file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot create its folder ({exc.strerror or exc})") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise SpecError(f"{path}: cannot write in {path.parent} ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise SpecError(f"{path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_schedule(path: str | Path) -> ScheduleFile:
    """Read a schedule file; `SpecError` with file and field on any problem."""
    path = Path(path)
    data = read_data(path, fmt="json")
    if "format_version" not in data:
        raise SpecError(f"{path}: format_version: missing; a schedule file states its version ({FORMAT_VERSION})")
    if data.get("format_version") != FORMAT_VERSION:
        raise SpecError(
            f"{path}: format_version {data.get('format_version')} is not supported "
            f"(this layersched reads version {FORMAT_VERSION}); re-export the schedule"
        )
    try:
        return ScheduleFile.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(path, exc)) from None


def schedule_json_schema() -> dict:
    """JSON Schema of the schedule file, generated from `ScheduleFile`."""
    schema = ScheduleFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://layersched.dev/schema/schedule-v{FORMAT_VERSION}.json"
    return schema


def to_torch_csv(doc: ScheduleFile) -> str:
    """torch.distributed.pipelining's compute-only CSV: one row per rank, actions like ``0F3``."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(doc.actions)
    return buf.getvalue()


EXPORT_FORMATS = {"torch-csv": (to_torch_csv, ".csv"), "json": (lambda d: d.model_dump_json(indent=1) + "\n", ".json")}
