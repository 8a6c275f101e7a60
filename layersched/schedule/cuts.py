"""Where to cut a model-level problem into stages, chosen together with the schedule (LayerPipe's
inter-layer cuts in the main path).

The partition with the least bottleneck is not always the one with the shortest schedule: the first
ranks hold more activations, memory limits bind, and warm-up and cool-down weigh on the first and
last stages. So each candidate is scheduled (by the caller's ``evaluate``: a template, a solver or
``best``) and the fastest valid one wins. Candidates:

- ``layer``: whole layers, the exact memory-aware partition (`describe.partition.optimal_contiguous`);
- ``sublayer``: the same over sub-layers (a transformer block's attention and MLP parts, down to
  single kernels where the cost model has them);
- ``sublayer, memory-aware``: the exact partition when every stage must hold all micro-batches'
  activations (for schedules that keep more in flight than 1F1B), where it differs;
- ``sublayer, rebalanced``: from that optimum, a hill climb that moves one cut by 1 to 10 sub-layers
  at a time while the scheduled objective improves (within a time budget).

The whole-layer candidate is always evaluated first, so the result is never worse than it. A search
interrupted by Ctrl-C ends the comparison: the best so far is returned, marked interrupted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from layersched.describe.config import SpecError
from layersched.describe.stages import Pipeline, pipeline_from_spec
from layersched.schedule.solve import NoScheduleError, Solution
from layersched.schedule.templates import TemplateError
from solvers import Deadlock, InvalidSchedule

CUTS = ("layer", "sublayer", "best")


@dataclass
class Candidate:
    """One partition tried: its label, the units per stage, and the schedule's objective (None when
    no valid schedule was found, with why)."""

    label: str
    granularity: str
    parts: list[list[int]]
    value: int | None
    solution: Solution | None
    why: str = ""


def starting_pipeline(spec, source: str, cuts: str | None = None) -> Pipeline:
    """The pipeline a command starts from under ``cuts`` (by default a model-level problem's own
    ``training.cuts``; none for a stage-level one): whole layers (``layer``, and ``best`` where whole
    layers make enough stages), else sub-layers; `SpecError` names the fault, the whole-layer one where
    neither can be built."""
    return starting_cuts(spec, source, cuts)[0]


def starting_cuts(spec, source: str, cuts: str | None = None) -> tuple[Pipeline, str | None]:
    """`starting_pipeline` and where it cut: ``"layer"`` or ``"sublayer"``, None for a stage-level
    problem (its stages are given; `SpecError` where ``cuts`` is asked of one all the same)."""
    if spec.training is None:
        if cuts is not None:
            raise SpecError(f"--cuts: {source} gives its stages directly; only a model-level problem can be cut")
        return pipeline_from_spec(spec, source), None
    cuts = cuts or spec.training.cuts
    made = "sublayer" if cuts == "sublayer" else "layer"
    try:
        return pipeline_from_spec(spec, source, granularity=made), made
    except SpecError as exc:
        if cuts != "best":
            raise
        try:  # more stages than whole layers: only sub-layer cuts can make them
            return pipeline_from_spec(spec, source, granularity="sublayer"), "sublayer"
        except SpecError:
            raise exc from None


def _parts_from_cuts(cuts: list[int], n: int) -> list[list[int]]:
    bounds = [0, *cuts, n]
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)]


def choose_cuts(
    spec,
    source: str,
    evaluate: Callable[[Pipeline], Solution],
    *,
    cuts: str = "best",
    adjust: Callable[[Pipeline], Pipeline] = lambda p: p,
    budget: float = 10.0,
    climb: bool = True,
    progress: Callable[[str], None] | None = None,
    starting: Callable[[str, int, int], None] | None = None,
) -> tuple[Solution, list[Candidate]]:
    """The best schedule over the partitions ``cuts`` allows (``layer``, ``sublayer`` or ``best``: both,
    plus the memory-aware sub-layer partition where it differs, then the hill climb), and every
    candidate tried. ``adjust`` changes each pipeline before it is scheduled (say, another
    micro-batch count); ``budget`` seconds bound the hill climb, which runs only with ``climb`` (meant
    for a template: each step schedules again). ``progress`` hears each partition's label and result
    once it is scheduled; ``starting(label, k, n)`` hears before the ``k``-th (from 0) of the ``n``
    distinct partitions is scheduled, so that a caller can share a time limit among them and tell a
    solver's own progress lines apart by partition."""
    if cuts not in CUTS:
        raise SpecError(f"--cuts: expected one of {', '.join(CUTS)}, got {cuts!r}")
    tried: list[Candidate] = []
    unit_names: dict[str, dict[str, int]] = {}  # per granularity, each unit's index (built once)
    stopped = [False]  # Ctrl-C inside a search: keep what there is, try nothing more

    def build(label: str, granularity: str, parts: list[list[int]] | None, all_in_flight: bool = False):
        """(pipeline, its units per stage), or the candidate that says why there is none."""
        try:
            pipe = pipeline_from_spec(spec, source, granularity=granularity, parts=parts, all_in_flight=all_in_flight)
            pipe = adjust(pipe)
            return pipe, [list(p) for p in _units(pipe, spec, granularity, unit_names)]
        except SpecError as exc:
            return Candidate(label, granularity, parts or [], None, None, str(exc).splitlines()[0])

    def schedule(label: str, granularity: str, pipe: Pipeline, units: list[list[int]], record: bool = True):
        if stopped[0]:
            return Candidate(label, granularity, units, None, None, "not tried: interrupted")
        try:
            sol = evaluate(pipe)
            cand = Candidate(label, granularity, units, sol.metrics["value"], sol)
        except (SpecError, NoScheduleError, InvalidSchedule, Deadlock, TemplateError) as exc:
            cand = Candidate(label, granularity, units, None, None, str(exc).splitlines()[0])
        if cand.solution is not None and cand.solution.info.get("interrupted"):
            stopped[0] = True
        if record:
            tried.append(cand)
            if progress:
                progress(f"{label}: {cand.value if cand.value is not None else cand.why}")
        return cand

    def run(label: str, granularity: str, parts: list[list[int]]) -> Candidate:
        """One step of the hill climb: built and scheduled, not recorded."""
        built = build(label, granularity, parts)
        return built if isinstance(built, Candidate) else schedule(label, granularity, *built, record=False)

    plan = []  # (label, granularity, all in flight)
    if cuts in ("layer", "best"):
        plan.append(("whole layers", "layer", False))
    if cuts in ("sublayer", "best"):
        plan.append(("sub-layers", "sublayer", False))
    if cuts == "best":
        plan.append(("sub-layers, memory-aware", "sublayer", True))
    entries: list = []  # in plan order: a candidate that could not be built, or one to schedule
    for label, granularity, spread in plan:
        built = build(label, granularity, None, all_in_flight=spread)
        if isinstance(built, Candidate):
            entries.append(built)
        elif not any(isinstance(e, tuple) and e[1] == granularity and e[3] == built[1] for e in entries):
            entries.append((label, granularity, *built))  # a partition met before is scheduled once
    n = sum(isinstance(e, tuple) for e in entries)
    k = 0
    for entry in entries:
        if isinstance(entry, Candidate):
            tried.append(entry)
            continue
        if starting and not stopped[0]:
            starting(entry[0], k, n)
        schedule(*entry)
        k += 1
    start = next((c for c in tried if c.label == "sub-layers"), None)
    if cuts == "best" and climb and start is not None and start.solution is not None:
        climbed = _climb(start, run, budget)
        if climbed is not start:
            tried.append(climbed)
            if progress:
                progress(f"{climbed.label}: {climbed.value}")
    found = [c for c in tried if c.solution is not None]
    if not found:
        raise NoScheduleError(f"no partition could be scheduled: {'; '.join(f'{c.label}: {c.why}' for c in tried)}")
    best = min(found, key=lambda c: (c.value, c.granularity != "layer"))
    if stopped[0]:  # the caller says the result is unfinished
        best.solution.info["interrupted"] = True
    return best.solution, tried


def _units(pipe: Pipeline, spec, granularity: str, cache: dict) -> list[list[int]]:
    """Each stage's units as indices into the model's units at ``granularity`` (``cache`` keeps them)."""
    from layersched.describe.stages import model_units

    if granularity not in cache:
        cache[granularity] = {u.name: i for i, u in enumerate(model_units(spec, granularity))}
    index = cache[granularity]
    return [[index[n] for n in stage] for stage in pipe.stage_layers]


def _climb(start: Candidate, run, budget: float) -> Candidate:
    """Move one cut at a time by 1, 2, 5 or 10 units (a transformer block has 10) while the objective
    improves; the best found."""
    t0 = time.perf_counter()
    n = sum(len(p) for p in start.parts)
    cuts = [p[0] for p in start.parts[1:]]
    best = start
    improved = True
    while improved and time.perf_counter() - t0 < budget:
        improved = False
        for k in range(len(cuts)):
            for step in (-10, -5, -2, -1, 1, 2, 5, 10):
                trial = list(cuts)
                trial[k] += step
                lo = trial[k - 1] if k else 0
                hi = trial[k + 1] if k + 1 < len(trial) else n
                if not lo < trial[k] < hi or time.perf_counter() - t0 >= budget:
                    continue
                cand = run("sub-layers, rebalanced", "sublayer", _parts_from_cuts(trial, n))
                if cand.value is not None and cand.value < best.value:
                    best, cuts, improved = cand, trial, True
    return best
