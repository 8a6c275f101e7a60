"""Trace files of a run, and `compare`: the measured timeline beside the predicted one.

A run writes two files: our JSON (``run-trace.json``: per rank its events ``{action, step, start,
duration}`` in seconds from the start of the step, plus each step's start) and a Chrome trace
(``run-trace.chrome.json``, open it in https://ui.perfetto.dev): one process per rank with the
measured actions (``ph: "X"``), and, when the schedule's times are in a time unit, one process per
rank with the predicted actions laid at the start of every measured step.

Pure Python: no torch.

Example
-------
>>> doc = {"format": "layersched-trace", "version": 1, "ranks": [{"rank": 0, "pipeline_rank": 0,
...     "replica": 0, "step_starts": [0.0], "step_times": [0.2], "events": [
...     {"action": "0F0", "step": 0, "start": 0.0, "duration": 0.1},
...     {"action": "0B0", "step": 0, "start": 0.1, "duration": 0.1}]}]}
>>> [(e["name"], e["ts"], e["dur"]) for e in chrome_trace(doc)["traceEvents"] if e["ph"] == "X"]
[('0F0', 0.0, 100000.0), ('0B0', 100000.0, 100000.0)]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    model_validator,
)

from layersched.describe.config import SpecError, format_validation_error, read_data
from layersched.formats.export import write_text
from layersched.schedule.graph import parse_action

TRACE_FORMAT = "layersched-trace"
SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def trace_document(schedule, results, runtime: str = "layersched") -> dict:
    """Our trace JSON from a `layersched.formats.export.ScheduleFile` and the ranks' `RankResult`s."""
    p = schedule.pipeline
    return {
        "format": TRACE_FORMAT,
        "version": 1,
        "schedule": schedule.name,
        "method": schedule.method,
        "runtime": runtime,
        "num_ranks": p.num_ranks,
        "data_parallel": p.data_parallel,
        "world_size": len(results),
        "time_unit": "s",
        "ranks": [
            {
                "rank": r.rank,
                "pipeline_rank": r.pipeline_rank,
                "replica": r.replica,
                "step_starts": list(r.step_starts),
                "step_times": list(r.step_times),
                "events": list(r.events),
                "transfers": list(getattr(r, "transfers", [])),
                "losses": list(r.losses) if r.losses is not None else None,  # on the last stage's rank
            }
            for r in sorted(results, key=lambda r: r.rank)
        ],
    }


def chrome_trace(trace: dict, schedule=None) -> dict:
    """A Chrome/Perfetto trace (microseconds): measured actions per rank (waits on a second
    thread) and, with ``schedule`` in a time unit, the predicted actions per pipeline rank."""
    events = []
    for r in trace["ranks"]:
        pid = r["rank"]
        label = f"rank {pid} (pipeline {r['pipeline_rank']}, replica {r['replica']})"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
        for e in r["events"]:
            t0 = r["step_starts"][e["step"]] + e["start"]
            events.append(
                {
                    "name": e["action"],
                    "cat": "wait" if e.get("wait") else _kind(e["action"]),
                    "ph": "X",
                    "pid": pid,
                    "tid": 1 if e.get("wait") else 0,
                    "ts": t0 * 1e6,
                    "dur": e["duration"] * 1e6,
                    "args": {"step": e["step"]},
                }
            )
    scale = SECONDS.get(schedule.time_unit) if schedule is not None else None
    if scale is not None:
        first = next((r for r in trace["ranks"] if r["replica"] == 0), None)
        starts = first["step_starts"] if first else []
        base = 1 + max((r["rank"] for r in trace["ranks"]), default=-1)
        ranks = {proc.rank for proc in schedule.processors}
        for q in sorted(ranks):
            events.append({"ph": "M", "name": "process_name", "pid": base + q, "args": {"name": f"predicted rank {q}"}})
        for k, t0 in enumerate(starts):
            for task in schedule.tasks:
                q = schedule.processors[task.processor]
                events.append(
                    {
                        "name": task.name,
                        "cat": _kind(task.name),
                        "ph": "X",
                        "pid": base + q.rank,
                        "tid": 0 if q.kind == "compute" else 1,
                        "ts": (t0 + task.start * scale) * 1e6,
                        "dur": task.duration * scale * 1e6,
                        "args": {"step": k, "predicted": True},
                    }
                )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def chrome_path(path: str | Path) -> Path:
    """Where the Chrome trace goes beside our trace ``path``: ``run-trace.json`` ->
    ``run-trace.chrome.json``."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".json") + ".chrome.json")


def write_trace(path: str | Path, trace: dict, schedule=None) -> tuple[Path, Path]:
    """Write our trace to ``path`` and the Chrome trace beside it; both atomically."""
    write_text(path, json.dumps(trace) + "\n")
    chrome = chrome_path(path)
    write_text(chrome, json.dumps(chrome_trace(trace, schedule)) + "\n")
    return Path(path), chrome


class _Record(BaseModel):
    """A part of a trace file: finite numbers; keys this release does not know are kept."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class TraceEvent(_Record):
    """One action a rank ran (or waited in, ``wait``), in seconds from the start of its step."""

    action: str
    step: NonNegativeInt
    start: float
    duration: NonNegativeFloat
    wait: bool = False


class TraceTransfer(_Record):
    """One end of a message between ranks (`layersched.runtime.runner.Timer.transfer`)."""

    step: NonNegativeInt
    tag: int
    side: Literal["send", "recv"]
    bytes: NonNegativeInt
    wait: NonNegativeFloat = 0.0
    time: float | None = None  # seconds from the rank's start; `compare` reads the clock
    clock: float


class TraceRank(_Record):
    """What one process measured: each step's start and length, its events and its messages."""

    rank: NonNegativeInt
    pipeline_rank: NonNegativeInt
    replica: NonNegativeInt
    step_starts: list[float]
    step_times: list[NonNegativeFloat]
    events: list[TraceEvent]
    transfers: list[TraceTransfer] = []
    # the losses alone may be NaN or inf: a step may diverge, and its timing still compares
    losses: list[Annotated[float, Field(allow_inf_nan=True)]] | None = None

    @model_validator(mode="after")
    def _steps_known(self) -> TraceRank:
        late = next((e for e in self.events if e.step >= len(self.step_starts)), None)
        if late is not None:
            raise ValueError(
                f"event {late.action!r} is in step {late.step}, but the rank has {len(self.step_starts)} step starts"
            )
        return self


class TraceFile(_Record):
    """Our trace file, as `trace_document` writes it."""

    format: Literal["layersched-trace"]
    version: Literal[1]
    data_parallel: PositiveInt = 1
    ranks: list[TraceRank]


def load_trace(path: str | Path) -> dict:
    """Read our trace JSON, every field checked (`TraceFile`); `SpecError` naming the file, the
    field and the fix on any problem."""
    path = Path(path)
    data = read_data(path, fmt="json")
    if "traceEvents" in data:
        raise SpecError(
            f"{path}: this is the Chrome trace; pass the layersched trace written beside it "
            f"({path.name.replace('.chrome.json', '.json')})"
        )
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT or "ranks" not in data:
        raise SpecError(f"{path}: not a layersched trace (written by 'layersched.run --trace FILE')")
    try:
        return TraceFile.model_validate(data).model_dump()
    except ValidationError as exc:
        raise SpecError(format_validation_error(path, exc)) from None


def flight_times(trace: dict, steps: list[int] | None = None, min_wait: float = 5e-5) -> list[tuple[int, float]]:
    """``(bytes, seconds)`` in flight of every message whose arrival was observed (its receiver
    waited for it over ``min_wait`` seconds): its arrival's clock on the receiver minus its
    departure's on the sender (see `layersched.runtime.runner.Timer.transfer`); in ``steps`` only,
    if given.

    >>> tr = {"ranks": [
    ...     {"replica": 0, "transfers": [{"step": 0, "tag": 0, "side": "send", "bytes": 8, "clock": 10.5}]},
    ...     {"replica": 0, "transfers": [
    ...         {"step": 0, "tag": 0, "side": "recv", "bytes": 8, "clock": 10.75, "wait": 0.2}]}]}
    >>> flight_times(tr)
    [(8, 0.25)]
    """
    sent, arrived = {}, []
    for r in trace["ranks"]:
        for t in r.get("transfers", []):
            if steps is not None and t["step"] not in steps:
                continue
            key = (r.get("replica", 0), t["step"], t["tag"])
            if t["side"] == "send":
                sent[key] = t["clock"]
            elif t.get("wait", 0.0) > min_wait:
                arrived.append((key, t["bytes"], t["clock"]))
    return [(nbytes, clock - sent[key]) for key, nbytes, clock in arrived if key in sent]


def _kind(action: str) -> str:
    try:
        return parse_action(action)[1]
    except ValueError:
        return "other"


@dataclass(frozen=True)
class CompareRow:
    """One line of a comparison: mean durations in seconds (``None`` where there is nothing)."""

    what: str
    predicted_count: int
    predicted: float | None
    measured_count: int
    measured: float | None

    @property
    def ratio(self) -> float | None:
        return self.measured / self.predicted if self.predicted and self.measured is not None else None


@dataclass(frozen=True)
class Comparison:
    """Predicted vs measured, per action kind, per message between ranks (``transfer``: time in
    flight, measured for the messages whose receiver waited for them), over all compute actions
    and per iteration.

    ``scale`` converts the schedule's time unit to seconds; when the unit is not a time unit
    (``fitted``), it is fitted so that the predicted and measured compute work per iteration agree,
    and only the relative figures mean anything."""

    rows: list[CompareRow]
    scale: float
    fitted: bool
    steps: list[int]
    time_unit: str

    def to_text(self) -> str:
        head = f"{'':<12}{'predicted':>12}{'measured':>12}{'ratio':>8}{'count p/m':>12}"
        lines = [head]
        for row in self.rows:
            lines.append(
                f"{row.what:<12}{_ms(row.predicted):>12}{_ms(row.measured):>12}"
                f"{'-' if row.ratio is None else f'{row.ratio:.3f}':>8}"
                f"{f'{row.predicted_count}/{row.measured_count}':>12}"
            )
        note = (
            f"times in ms; predicted {self.time_unit} x {self.scale:g} s"
            + (" (fitted: the schedule's unit is not a time unit)" if self.fitted else "")
            + f"; measured over steps {_steps(self.steps)}"
        )
        return "\n".join([*lines, note])


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.4f}"


def _steps(steps: list[int]) -> str:
    return f"{steps[0]}..{steps[-1]}" if len(steps) > 1 else str(steps[0]) if steps else "(none)"


def compare(schedule, trace, skip_first: bool = True) -> Comparison:
    """Predicted (``schedule``: a `ScheduleFile` or its path) vs measured (``trace``: our trace
    dict or its path) durations per action kind, over all compute actions, and per iteration. The
    first step is left out as warm-up when there are more."""
    if not hasattr(schedule, "tasks"):
        from layersched.formats.export import load_schedule

        schedule = load_schedule(schedule)
    where = ""
    if not isinstance(trace, dict):
        where = f"{trace}: "
        trace = load_trace(trace)
    ran = {  # what the trace says it ran, against the schedule file given (a dict may leave them out)
        "schedule": (trace.get("schedule"), schedule.name),
        "method": (trace.get("method"), schedule.method),
        "num_ranks": (trace.get("num_ranks"), schedule.pipeline.num_ranks),
        "data_parallel": (trace.get("data_parallel"), schedule.pipeline.data_parallel),
    }
    for key, (got, want) in ran.items():
        if got is not None and got != want:
            raise SpecError(
                f"{where}the trace is of a run of another schedule: its {key} is {got!r}, the schedule file's "
                f"{want!r}; pass the schedule file that run executed"
            )
    nsteps = max((len(r["step_starts"]) for r in trace["ranks"]), default=0)
    steps = list(range(1 if skip_first and nsteps > 1 else 0, nsteps))
    measured: dict[str, list[float]] = {}
    ends: dict[int, float] = {}
    for r in trace["ranks"]:
        for e in r["events"]:
            if e["step"] not in steps:
                continue
            ends[e["step"]] = max(ends.get(e["step"], 0.0), e["start"] + e["duration"])
            if not e.get("wait"):
                measured.setdefault(_kind(e["action"]), []).append(e["duration"])
    predicted: dict[str, list[int]] = {}
    for t in schedule.tasks:
        predicted.setdefault(_kind(t.name), []).append(t.duration)
    compute = [k for k in "FIWB" if k in predicted or k in measured]
    scale, fitted = SECONDS.get(schedule.time_unit), False
    if scale is None:
        replicas = trace.get("data_parallel", 1)
        work_p = sum(sum(predicted.get(k, [])) for k in compute)
        work_m = sum(sum(measured.get(k, [])) for k in compute) / max(len(steps) * replicas, 1)
        scale, fitted = (work_m / work_p if work_p else 1.0), True

    def row(what: str, p: list[float], m: list[float]) -> CompareRow:
        return CompareRow(what, len(p), sum(p) / len(p) * scale if p else None, len(m), sum(m) / len(m) if m else None)

    rows = [
        row(k, predicted.get(k, []), measured.get(k, []))
        for k in [*compute, "R", "U"]
        if predicted.get(k) or measured.get(k)
    ]
    names = {t.name: t for t in schedule.tasks}
    flights = [
        delay
        for a, b, delay in schedule.edges
        if a in names and b in names and names[a].processor != names[b].processor
    ]
    observed = [seconds for _, seconds in flight_times(trace, steps)]
    if flights or observed:
        rows.append(row("transfer", flights, observed))
    rows.append(
        row(
            "all compute",
            [d for k in compute for d in predicted.get(k, [])],
            [d for k in compute for d in measured.get(k, [])],
        )
    )
    makespan = max((t.start + t.duration for t in schedule.tasks), default=0)
    rows.append(
        CompareRow("iteration", 1, makespan * scale, len(ends), sum(ends.values()) / len(ends) if ends else None)
    )
    return Comparison(rows, scale, fitted, steps, schedule.time_unit)
