"""From a `Pipeline` to a validated schedule: by template or by a generic solver.

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> from layersched.describe.stages import pipeline_from_spec
>>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 4, "microbatches": 8, "forward": 1, "backward_input": 1, "backward_weight": 1}}))
>>> sol = solve_pipeline(pipe, schedule="1f1b")
>>> sol.metrics["span"], sol.metrics["bubble_rate"]
(33, 0.272727)
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from layersched.describe.stages import Pipeline
from layersched.schedule.bounds import pipeline_bounds
from layersched.schedule.budget import Budget, check_memory, pipeline_tasks
from layersched.schedule.graph import TaskGraph, build_graph, compute_orders, parse_action, placement, to_problem
from layersched.schedule.metrics import schedule_metrics
from layersched.schedule.templates import TemplateError, check_stages_per_rank, get_template, template_orders
from solvers import Deadlock, InvalidSchedule, Result, Schedule, time_orders, validate
from solvers.bounds import one_processor_bound


class NoScheduleError(RuntimeError):
    """No schedule was found: proven infeasible, or none within the time limit. The message says which,
    and the least memory limit where the memory limit is the cause."""


def no_schedule(pipe: Pipeline, what: str, status: str, reason: str = "") -> NoScheduleError:
    """The error for ``what`` (a solver, or every candidate) finding nothing, with ``status``."""
    least = pipe.least_memory()
    if pipe.capacity is not None and pipe.capacity < least:
        return NoScheduleError(
            f"no schedule exists: the memory limit {pipe.capacity} {pipe.memory_unit} is below the least any "
            f"schedule needs, {least} {pipe.memory_unit} (one micro-batch's activations of every stage on a rank); "
            f"raise memory_limit to at least {least}"
        )
    if status == "infeasible":
        return NoScheduleError(f"no schedule exists: {what} proved the problem infeasible")
    hint = "raise --time-limit" if what.startswith("every template") else "raise --time-limit or try --solver best"
    why = f": {reason}" if reason else ""
    return NoScheduleError(f"no schedule found: {what} found none within the time limit ({status}{why}); {hint}")


@dataclass
class Solution:
    """A validated schedule of a pipeline, with how it was made and what it costs."""

    pipe: Pipeline
    tasks: TaskGraph
    schedule: Schedule
    method: str
    objective: str
    metrics: dict
    runtime: float
    result: Result | None = None
    info: dict = field(default_factory=dict)
    compute: list[list[str]] | None = None
    """The per-rank compute orders the schedule was timed from (a template's), where it was. At equal
    starts (zero-length passes) the start times alone do not give the order back."""

    @property
    def split_backward(self) -> bool:
        return bool(self.tasks.graph.graph["split_backward"])

    @property
    def stage_to_rank(self) -> list[int]:
        return list(self.tasks.graph.graph["stage_to_rank"])

    def actions(self) -> list[list[str]]:
        """Per rank, its compute actions (F/I/W/B) in start order: what the runner executes. A schedule
        timed from given orders (`solve_orders`) gives those back: where passes of zero length start
        together, the order read from the start times may put a forward before the pass that frees its
        memory, and timed again it can break the limit."""
        if self.compute is not None:
            return [list(acts) for acts in self.compute]
        names = self.tasks.names
        return [
            [names[t] for t in order]
            for order in compute_orders(self.tasks.problem, self.schedule, self.pipe.num_ranks)
        ]


def complete_orders(tasks: TaskGraph, compute: list[list[str]]) -> list[list[int]]:
    """Per-processor task indices: the given compute orders, then each stage's all-reduce on its
    rank's network processor (in the order its last backward appears) and each stage's optimizer
    update at the end of its rank."""
    g, idx = tasks.graph, tasks.index
    P = tasks.problem.num_processors
    R = g.graph["num_ranks"]
    orders: list[list[int]] = [[idx[a] for a in acts] for acts in compute] + [[] for _ in range(P - len(compute))]
    pos = {a: k for acts in compute for k, a in enumerate(acts)}
    last = "W" if g.graph["split_backward"] else "B"
    m = g.graph["num_microbatches"]
    for r in range(R):
        stages = sorted(
            {g.nodes[a]["stage"] for a in compute[r]}, key=lambda s: max(pos[f"{s}{last}{i}"] for i in range(m))
        )
        for s in stages:
            if f"{s}R" in idx:
                orders[tasks.processor_of_rank(r, network=True)].append(idx[f"{s}R"])
        orders[r].extend(idx[f"{s}U"] for s in stages if f"{s}U" in idx)
    return orders


def task_graph(pipe: Pipeline, split_backward: bool, stage_to_rank: list[int], cache: dict | None = None) -> TaskGraph:
    """``pipe``'s task graph for one backward mode and placement, lowered to a problem; built once per
    ``cache`` (a dict the caller keeps; the graphs are never modified)."""
    key = (bool(split_backward), tuple(stage_to_rank))
    if cache is not None and key in cache:
        return cache[key]
    check_memory(pipeline_tasks(pipe, split_backward))  # refuse before building what cannot fit
    tasks = to_problem(build_graph(pipe, split_backward=split_backward, stage_to_rank=stage_to_rank), pipe.capacity)
    if cache is not None:
        cache[key] = tasks
    return tasks


def solve_pipeline(
    pipe: Pipeline,
    *,
    schedule: str | None = None,
    solver: str | None = None,
    objective: str | None = None,
    graphs: dict | None = None,
    **options,
) -> Solution:
    """Schedule ``pipe`` with a template (``schedule``) or a generic solver (``solver``; ``best``
    runs `solve_best`); the result is validated before it is returned. A ``time_limit`` option
    counts from this call, building the task graph included. ``graphs`` caches task graphs between
    calls (see `task_graph`)."""
    objective = objective or pipe.objective
    if solver == "best":
        return solve_best(pipe, objective=objective, **options)
    check_memory(pipeline_tasks(pipe))  # before a template builds its orders
    t0 = time.perf_counter()
    if solver is None:
        name = schedule or pipe.default_schedule
        tpl = get_template(name)
        if tpl.placement == "any":  # the template follows the problem's placement
            stage_to_rank = pipe.stage_to_rank()
        else:
            stage_to_rank = placement(pipe.num_stages, pipe.num_ranks, tpl.placement)
        if pipe.placement is not None and pipe.stage_to_rank() != stage_to_rank:
            raise TemplateError(
                f"template {name!r} places stages {tpl.placement} ({stage_to_rank}); the problem's placement "
                f"is {pipe.placement!r} ({pipe.stage_to_rank()})"
            )
        return solve_orders(
            pipe,
            template_orders(name, pipe),
            split_backward=tpl.split_backward,
            stage_to_rank=stage_to_rank,
            method=name,
            objective=objective,
            graphs=graphs,
            t0=t0,
        )
    else:
        from solvers import solve

        split = options.pop("split_backward", True)
        tasks = task_graph(pipe, split, pipe.stage_to_rank(), graphs)
        if options.get("time_limit") is not None:  # what the graph took is not given again to the solver
            options["time_limit"] = max(0.01, options["time_limit"] - (time.perf_counter() - t0))
        result = solve(tasks.problem, solver, objective=objective, **options)
        if result.schedule is None and result.info.get("interrupted"):
            raise KeyboardInterrupt  # Ctrl-C before any schedule: nothing to write
        if result.schedule is None:
            raise no_schedule(pipe, f"solver {solver!r}", result.status, result.info.get("reason", ""))
        sched, method = result.schedule, solver
    return _solution(pipe, tasks, sched, method, objective, result, t0)


def solve_orders(
    pipe: Pipeline,
    compute: list[list[str]],
    *,
    split_backward: bool,
    stage_to_rank: list[int],
    method: str,
    objective: str | None = None,
    graphs: dict | None = None,
    t0: float | None = None,
) -> Solution:
    """Time given per-rank compute orders (a template's, or another tool's) at their earliest starts on
    ``pipe``'s task graph, and validate the result (memory limit included): `InvalidSchedule` or
    `Deadlock` when the orders break the problem's rules."""
    t0 = time.perf_counter() if t0 is None else t0
    tasks = task_graph(pipe, split_backward, stage_to_rank, graphs)
    sched = time_orders(tasks.problem, complete_orders(tasks, compute))
    sol = _solution(pipe, tasks, sched, method, objective or pipe.objective, None, t0)
    sol.compute = [list(acts) for acts in compute]
    return sol


def _solution(
    pipe: Pipeline,
    tasks: TaskGraph,
    sched: Schedule,
    method: str,
    objective: str,
    result: Result | None,
    t0: float,
    known: dict | None = None,
) -> Solution:
    """Validate ``sched`` and measure it: the `Solution` every path returns. ``known``: the pipeline's
    bounds at this placement, when the caller has them already."""
    validate(tasks.problem, sched)
    if known is None:
        known = pipeline_bounds(pipe, tasks.graph.graph["stage_to_rank"], objective)
    metrics = schedule_metrics(tasks.problem, sched, pipe.num_ranks, objective, known)
    if result is not None:
        metrics["lower_bound"] = max(metrics["lower_bound"], result.lower_bound)
    info = {"interrupted": True} if result is not None and result.info.get("interrupted") else {}
    return Solution(pipe, tasks, sched, method, objective, metrics, time.perf_counter() - t0, result, info)


@dataclass(frozen=True)
class Start:
    """Per-rank compute orders for `solve_best` to start from (a schedule file's ``actions``), with the
    backward mode and the placement they are for, and where known each task's processor and start
    (``times``: name -> (processor, start)). The orders timed at their earliest starts can be slower
    than the schedule they came from: under ``span`` a rank that starts later may idle less."""

    actions: list[list[str]]
    split_backward: bool
    stage_to_rank: list[int]
    times: dict[str, tuple[int, int]] | None = None


def start_of(sol: Solution) -> Start:
    """A `Start` that is ``sol``'s schedule: its orders and each task's processor and start."""
    where = zip(sol.schedule.processor.tolist(), sol.schedule.start.tolist(), strict=True)
    times = dict(zip(sol.tasks.names, where, strict=True))
    return Start(sol.actions(), sol.split_backward, sol.stage_to_rank, times)


def start_solution(pipe: Pipeline, start: Start, objective: str, graphs: dict | None = None) -> Solution:
    """``start``'s orders timed on ``pipe`` (at their earliest starts), or its ``times`` where they are a
    valid schedule of ``pipe`` with a better objective; validated: `ValueError` naming the first thing
    that does not fit (stages, ranks, placement, an action this problem does not have, on another rank,
    missing or listed twice), `InvalidSchedule` where the orders break the memory limit, `Deadlock`
    where they wait on each other."""
    S, R, m = pipe.num_stages, pipe.num_ranks, pipe.num_microbatches
    where = f"this problem has {S} stages on {R} ranks and {m} micro-batches"
    if len(start.stage_to_rank) != S or len(start.actions) != R:
        raise ValueError(f"the start has {len(start.stage_to_rank)} stages on {len(start.actions)} ranks; {where}")
    if pipe.placement is not None and list(start.stage_to_rank) != pipe.stage_to_rank():
        raise ValueError(
            f"the start places stages on ranks {list(start.stage_to_rank)}, this problem's placement "
            f"{pipe.placement!r} on {pipe.stage_to_rank()}"
        )
    if any(not 0 <= r < R for r in start.stage_to_rank):
        raise ValueError(f"the start places a stage on a rank outside 0..{R - 1}: {list(start.stage_to_rank)}")
    graphs = {} if graphs is None else graphs  # the graph checked here is the one the orders are timed on
    tasks = task_graph(pipe, start.split_backward, list(start.stage_to_rank), graphs)
    nodes = tasks.graph.nodes
    backward = "I and W" if start.split_backward else "B"
    for r, acts in enumerate(start.actions):
        for a in acts:
            if a not in tasks.index or nodes[a]["kind"] not in ("F", "B", "I", "W"):
                here = f"{where}; backward as {backward}"
                raise ValueError(f"the start lists {a!r} on rank {r}, which is no compute pass here ({here})")
            if nodes[a]["rank"] != r:
                raise ValueError(
                    f"the start lists {a} on rank {r}; its stage {nodes[a]['stage']} is on rank {nodes[a]['rank']}"
                )
    listed = Counter(a for acts in start.actions for a in acts)
    if twice := next((a for a, n in listed.items() if n > 1), None):
        raise ValueError(f"the start lists {twice} more than once")
    missing = [n for n in tasks.names if nodes[n]["kind"] in ("F", "B", "I", "W") and n not in listed]
    if missing:
        raise ValueError(f"the start lacks {len(missing)} of this problem's passes, {missing[0]} first ({where})")
    t0 = time.perf_counter()
    sol = solve_orders(
        pipe,
        start.actions,
        split_backward=start.split_backward,
        stage_to_rank=list(start.stage_to_rank),
        method="start",
        objective=objective,
        graphs=graphs,
        t0=t0,
    )
    given = _given_times(tasks, start.times)
    if given is not None:
        try:  # validated once, by the solution: times that do not hold here leave the orders' own timing
            timed = replace(_solution(pipe, tasks, given, "start", objective, None, t0), compute=sol.compute)
        except InvalidSchedule:
            timed = sol
        sol = min(sol, timed, key=lambda s: s.metrics["value"])  # equal: the orders' own timing
    return sol


def _given_times(tasks: TaskGraph, times: dict[str, tuple[int, int]] | None) -> Schedule | None:
    """The schedule ``times`` gives ``tasks`` (name -> processor, start), where it names every task on a
    processor that exists; else None. Whether it is valid here is the caller's check."""
    if times is None or set(times) != set(tasks.names):
        return None
    where = np.array([times[n] for n in tasks.names], dtype=np.int64).reshape(-1, 2)
    if where[:, 0].min(initial=0) < 0 or where[:, 0].max(initial=0) >= tasks.problem.num_processors:
        return None
    return Schedule(processor=where[:, 0], start=where[:, 1])


def split_orders(sol: Solution) -> list[list[str]]:
    """The solution's per-rank compute orders with every fused ``B`` replaced by ``I`` then ``W``:
    the same schedule on the split-backward graph (never later, never more memory)."""
    out = []
    for acts in sol.actions():
        row = []
        for a in acts:
            stage, kind, mb = parse_action(a)
            row.extend([f"{stage}I{mb}", f"{stage}W{mb}"] if kind == "B" else [a])
        out.append(row)
    return out


def symmetry_chains(tasks: TaskGraph) -> list[list[int]]:
    """Per stage and kind, the tasks of successive micro-batches, to be started in that order.

    This loses no schedule: sorting the start times within each (stage, kind) class and handing them
    to micro-batches in order keeps every precedence (all edges join equal micro-batches with a
    constant delay, and order statistics preserve pointwise inequalities), every processor's busy
    intervals and its memory curve (durations and deltas are equal within a class), and the
    objective."""
    g, idx = tasks.graph, tasks.index
    kinds = ("F", "I", "W") if g.graph["split_backward"] else ("F", "B")
    m = g.graph["num_microbatches"]
    return [[idx[f"{s}{k}{i}"] for i in range(m)] for s in range(g.graph["num_stages"]) for k in kinds]


SEQUENCE_SHARE = 0.3
"""The most of a backward mode's share that `best` spends on `rank_sequence_bound` (it stops sooner
where a rank holds more micro-batches than `SEQUENCE_IN_FLIGHT`, or the search passes
`SEQUENCE_STATES`). Where it finishes it is worth that: on the interleaved p=5, m=23, two stages per
rank under 7 activations, it proves 4.27% more than the other bounds in about 10 s (session 80)."""

SEQUENCE_IN_FLIGHT = 3
"""`rank_sequence_bound` searches a rank only where its memory holds at most this many micro-batches'
activations of all its stages at once. With more the sequences are too many: under 1F1B's memory
(p micro-batches at rank 0) none of the issue's rows finished in 10 s (session 80)."""

SEQUENCE_STATES = 30_000
"""`rank_sequence_bound` gives a rank up when a step of its search holds more states than this: the
p=5, m=23 row above needs at most 30,000."""


def rank_sequence_bound(tasks: TaskGraph, objective: str, *, deadline: float, upper: int | None = None) -> int:
    """The best bound `solvers.bounds.one_processor_bound` proves from one rank alone, under its memory,
    over the ranks in turn (rank 0 first) until ``deadline``; 0 where none is searched.

    A rank is searched where its memory limit holds at most `SEQUENCE_IN_FLIGHT` micro-batches'
    activations (the sum over its stages of what a forward allocates). Under tight memory this is the
    strong bound: it sees that a rank which can keep few micro-batches in flight idles while they are
    away on the other ranks, which the memory-time and relay bounds, counting each micro-batch's hold
    as its chain's length, do not. ``upper``: the objective of a schedule known to exist (it prunes).

    On the interleaved p=3, two stages per rank under 4 activations, transfer 2704, it proves 741,775
    at m=6 (the other bounds 707,617; CP-SAT proves no schedule within 740,000, and `best` finds
    749,633), and 1,177,651 at m=10 (the others 1,075,177)."""
    problem = tasks.problem
    chains = symmetry_chains(tasks)
    alloc = np.zeros(problem.num_processors, dtype=np.int64)  # per micro-batch, on each processor
    fixed = problem.fixed_processor()
    for chain in chains:
        alloc[fixed[chain[0]]] += max(int(problem.mem_delta[chain[0]]), 0)
    best = 0
    for rank in range(tasks.graph.graph["num_ranks"]):
        q = tasks.processor_of_rank(rank)
        if alloc[q] == 0 or problem.capacity[q] // alloc[q] > SEQUENCE_IN_FLIGHT:
            continue
        if time.perf_counter() >= deadline:
            break
        found, _ = one_processor_bound(
            problem, q, chains, objective, deadline=deadline, max_states=SEQUENCE_STATES, upper=upper
        )
        best = max(best, found or 0)  # None: nothing fits, which the search reports
        if upper is not None and best >= upper:
            break
    return best


def fused_is_dominated(pipe: Pipeline) -> bool:
    """Whether every fused-backward schedule has a split-backward one at least as good: true when each
    stage's fused ``B`` (with its cost per action) takes at least its ``I`` plus its ``W``. Then ``I``
    then ``W`` in ``B``'s place ends no later and frees memory no later (see `split_orders`), so
    searching the split graph covers the fused one and its bound holds for both."""
    fused = (pipe.backward_input + pipe.backward_weight) if pipe.backward is None else pipe.backward
    B = np.asarray(fused, dtype=np.int64) + pipe.overhead("B")
    IW = pipe.backward_input + pipe.backward_weight + pipe.overhead("I") + pipe.overhead("W")
    return bool(np.all(B >= IW))


@dataclass
class _Search:
    """The outcome of searching one backward mode at one placement: its best schedule and a proven
    lower bound on every schedule of that mode there (None when CP-SAT proved there is none)."""

    split_backward: bool
    solution: Solution | None
    bound: int | None
    status: str
    interrupted: bool = False


def _search_mode(
    pipe: Pipeline,
    split_backward: bool,
    stage_to_rank: list[int],
    seeds: list[Solution],
    objective: str,
    budget: Budget,
    share: float,
    workers: int,
    progress,
    tried: dict,
    graphs: dict,
    seed: int = 0,
) -> _Search:
    """On the graph of one backward mode and placement, within ``share`` seconds: list scheduling;
    under tight memory the sequence bound (`rank_sequence_bound`, at most `SEQUENCE_SHARE` of it); the
    best of list scheduling and ``seeds`` (converted to this mode where that is exact) polished by moves on its
    critical chain (`solvers.polish`, at most `POLISH_SHARE` of the share); CP-SAT from that for
    `CPSAT_SHARE` of what is left; then, from CP-SAT's result, the tail step (`solvers.lns.improve_tails`
    with `widening_tails`, `TAIL_SHARE` of what is left), CP-SAT at coarser time, then finer
    (`solvers.lns.improve_coarse`, `COARSE_SHARE` of the rest; with the symmetry chains up to
    `COARSE_SYMMETRY_TASKS`; before the tail step on graphs of at most `COARSE_FIRST_TASKS`), band steps
    (`solvers.lns.improve_bands`, `BAND_SHARE` of the rest) and CP-SAT window steps
    (`solvers.lns.improve_windows`) for the rest, all up to CP-SAT's own size limit (beyond it each
    step re-times tens of thousands of tasks; on the ZB-V row at p=32, 49,152 tasks, they found
    nothing). A step estimated not to fit in what is left of ``budget`` is skipped, and said so in
    ``tried``. ``seed`` seeds polish's moves and every CP-SAT call (`solvers.cpsat.seed_solver`)."""
    from solvers import get_solver
    from solvers.cpsat import MAX_SEARCH_TASKS, decline_reason
    from solvers.lns import improve_bands, improve_coarse, improve_tails, improve_windows
    from solvers.polish import polish

    t0 = time.perf_counter()
    mode = "split" if split_backward else "fused"
    end = min(t0 + share, budget.deadline)
    known = pipeline_bounds(pipe, stage_to_rank, objective)  # holds for both backward modes
    floor = max(known.values(), default=0)
    unsearched = _Search(split_backward, None, floor, "unknown")
    if (split_backward, tuple(stage_to_rank)) not in graphs and not budget.fits("graph"):
        tried[f"list ({mode})"] = tried[f"cpsat ({mode})"] = "not run: the time limit was reached"
        return unsearched
    tasks = task_graph(pipe, split_backward, stage_to_rank, graphs)
    problem = tasks.problem
    hints = []
    if budget.fits("list"):
        heuristic = get_solver("list")(problem, objective=objective, time_limit=max(0.01, budget.left()))
        tried[f"list ({mode})"] = heuristic.objective if heuristic.schedule is not None else heuristic.status
        if heuristic.schedule is not None:
            hints.append((heuristic.objective, heuristic.schedule))
    else:
        tried[f"list ({mode})"] = "not run: the time limit was reached"
    for sol in seeds:
        if sol.stage_to_rank != list(stage_to_rank) or (sol.split_backward and not split_backward):
            continue
        if not budget.fits("hints"):
            break
        compute = split_orders(sol) if split_backward else sol.actions()
        hint = time_orders(problem, complete_orders(tasks, compute))
        hints.append((hint.objective(problem, objective), hint))
    value, start = min(hints, key=lambda h: h[0]) if hints else (None, None)
    if start is None or value > floor:
        now = time.perf_counter()
        floor = max(
            floor, rank_sequence_bound(tasks, objective, deadline=now + SEQUENCE_SHARE * (end - now), upper=value)
        )
    if start is not None and value > floor and end - time.perf_counter() > 0.05:
        try:
            polished = polish(
                problem,
                start,
                objective=objective,
                time_limit=POLISH_SHARE * (end - time.perf_counter()),
                bound=floor,
                seed=seed,
            )
        except KeyboardInterrupt:
            sol = _solution(pipe, tasks, start, "best", objective, None, t0, known)
            return _Search(split_backward, sol, floor, "unknown", True)
        tried[f"polish ({mode})"] = polished.objective
        value, start = polished.objective, canonical(tasks, polished.schedule)
    interrupted = False
    result = Result(start, "feasible", value, floor, 0.0, "best", objective, {}) if start is not None else None
    # CP-SAT gets CPSAT_SHARE of what is left when band and window steps follow, all of it when there
    # is no schedule yet
    cp_time = (end - time.perf_counter()) * (CPSAT_SHARE if start is not None else 1)
    declined = decline_reason(problem, cp_time)
    if declined:
        tried[f"cpsat ({mode})"] = f"not run: {declined}"
    elif start is None or value > floor:
        found = get_solver("cpsat")(
            problem,
            objective=objective,
            time_limit=max(0.01, cp_time),
            workers=workers,
            hint=start,
            symmetry=symmetry_chains(tasks),
            progress=progress,
            known_bound=floor,
            seed=seed,
        )
        tried[f"cpsat ({mode})"] = found.objective if found.schedule is not None else found.status
        if found.info.get("not_run"):
            tried[f"cpsat ({mode})"] = f"not run: {found.info['reason']}"
        interrupted = bool(found.info.get("interrupted"))
        if found.status == "infeasible":  # proven: no schedule of this mode exists here, so it bounds nothing
            return _Search(split_backward, None, None, "infeasible", interrupted)
        if found.schedule is not None:
            result = found
        elif result is not None:  # CP-SAT found nothing in time: the start stands, with its bound
            result = Result(start, "feasible", value, max(floor, found.lower_bound), 0.0, "best", objective, {})
        else:
            return _Search(split_backward, None, max(floor, found.lower_bound), found.status, interrupted)
    if result is None:
        return unsearched
    bound = max(floor, result.lower_bound)
    if problem.num_tasks > MAX_SEARCH_TASKS:  # each window step re-times every task: seen to find nothing
        tried[f"lns ({mode})"] = f"not run: {problem.num_tasks:,} tasks, more than {MAX_SEARCH_TASKS:,}"
    elif not interrupted and result.objective > bound and end - time.perf_counter() > 0.1:
        schedule = result.schedule

        def coarse(schedule: Schedule) -> tuple[Schedule, bool]:
            """The coarse levels for `COARSE_SHARE` of what is left: the schedule, and whether interrupted."""
            chains = symmetry_chains(tasks) if problem.num_tasks <= COARSE_SYMMETRY_TASKS else None
            schedule, info = improve_coarse(
                problem,
                canonical(tasks, schedule) if chains else schedule,  # in the chains' order: the same schedule
                objective=objective,
                time_limit=(end - time.perf_counter()) * COARSE_SHARE,
                bound=bound,
                workers=workers,
                progress=progress,
                symmetry=chains,
                seed=seed,
            )
            if info["levels"]:
                tried[f"coarse ({mode})"] = schedule.objective(problem, objective)
            return schedule, bool(info.get("interrupted"))

        coarse_first = problem.num_tasks <= COARSE_FIRST_TASKS
        if coarse_first and end - time.perf_counter() > 2 * BAND_STEP:  # small: the coarse levels first
            schedule, interrupted = coarse(schedule)
        if not interrupted and end - time.perf_counter() > 2 * BAND_STEP:  # every rank's tail re-solved at once
            tail_time = (end - time.perf_counter()) * TAIL_SHARE
            schedule, info = improve_tails(
                problem,
                schedule,
                widening_tails(tasks, TAIL_FIRST_TASKS, _tail_skew(pipe, stage_to_rank)),
                objective=objective,
                time_limit=tail_time,
                bound=bound,
                workers=workers,
                progress=progress,
                window_limit=min(TAIL_WINDOW_LIMIT, TAIL_WINDOW_SHARE * tail_time),
                jump=TAIL_JUMP,
                jump_proven=TAIL_JUMP_PROVEN,
                fixed_first=TAIL_FIXED_FIRST,
                unhinted=TAIL_UNHINTED_TASKS,
                seed=seed,
            )
            interrupted = bool(info.get("interrupted"))
            tried[f"tail ({mode})"] = schedule.objective(problem, objective)
        if not interrupted and not coarse_first and end - time.perf_counter() > 2 * BAND_STEP:  # larger: levels after
            schedule, interrupted = coarse(schedule)
        if not interrupted and end - time.perf_counter() > 2 * BAND_STEP:  # band steps, where two of them fit
            schedule, info = improve_bands(
                problem,
                schedule,
                objective=objective,
                time_limit=(end - time.perf_counter()) * BAND_SHARE,
                bound=bound,
                step_limit=BAND_STEP,
                workers=workers,
                progress=progress,
                seed=seed,
            )
            interrupted = bool(info.get("interrupted"))
            tried[f"bands ({mode})"] = schedule.objective(problem, objective)
        improved = schedule
        if not interrupted:  # then window steps, for what is left
            improved, info = improve_windows(
                problem,
                schedule,
                objective=objective,
                time_limit=end - time.perf_counter(),
                bound=bound,
                workers=workers,
                progress=progress,
                seed=seed,
            )
            interrupted = bool(info.get("interrupted"))
        got = improved.objective(problem, objective)
        tried[f"lns ({mode})"] = got
        result = Result(improved, result.status, got, result.lower_bound, 0.0, "best", objective, result.info)
    sol = _solution(pipe, tasks, result.schedule, "best", objective, result, t0, known)
    return _Search(split_backward, sol, sol.metrics["lower_bound"], result.status, interrupted)


def tail_cut(tasks: TaskGraph, schedule: Schedule, forwards: int | np.ndarray = 1) -> np.ndarray:
    """Per processor, the start of its ``forwards``-th last forward in ``schedule`` (``forwards`` one
    count for all, or one per processor; a processor with fewer forwards, or none, such as a network
    processor: past every task, so nothing of it is cut)."""
    problem = tasks.problem
    forward = _forwards(tasks)
    beyond = int(schedule.end(problem).max()) + 1
    depth = np.broadcast_to(np.asarray(forwards, dtype=np.int64), (problem.num_processors,))
    cut = np.full(problem.num_processors, beyond, dtype=np.int64)
    for q in range(problem.num_processors):
        starts = np.sort(schedule.start[(schedule.processor == q) & forward])
        if depth[q] >= 1 and len(starts) >= depth[q]:
            cut[q] = starts[-depth[q]]
    return cut


def _forwards(tasks: TaskGraph) -> np.ndarray:
    """Which of ``tasks``' tasks are forward passes."""
    return np.array([tasks.graph.nodes[n]["kind"] == "F" for n in tasks.names], dtype=bool)


def widening_tails(
    tasks: TaskGraph, first_tasks: int = 0, skew: float = 0.0
) -> Callable[[Schedule, int], np.ndarray | None]:
    """The tail step's windows (`solvers.lns.improve_tails`), widening: window ``k`` (from 0) frees
    every rank's passes from its ``k+1``-th last forward on (`tail_cut`), up to the fewest forwards a
    rank has (one more would leave that rank's passes all in place).

    With ``first_tasks``, the first window is the widest of those from the last, second-last and
    third-last forward that frees at most ``first_tasks`` passes in the schedule of the first call
    (the last forward's where none does), and the windows widen from there (`TAIL_FIRST_TASKS`).

    With ``skew``, a rank whose stages lie nearer the last stage is cut deeper, by up to ``skew``
    forwards more (rounded; the rank holding the last stage by all of it, the rank farthest from it by
    none, in proportion between; never past its first forward): its earlier passes start the backward
    chains that reach the other ranks' freed passes (`TAIL_SKEW`)."""
    graph = tasks.graph
    per_rank = np.bincount(
        tasks.problem.allowed[_forwards(tasks)].argmax(axis=1), minlength=tasks.problem.num_processors
    )  # forwards on each processor
    fewest = int(per_rank[per_rank > 0].min()) if per_rank.any() else 0
    extra = np.zeros(tasks.problem.num_processors, dtype=np.int64)
    if skew and "stage_to_rank" in graph.graph:
        ranks = graph.graph["stage_to_rank"]
        last_stage = {r: s for s, r in enumerate(ranks)}  # each rank's last stage (later stages overwrite)
        behind = {q: len(ranks) - 1 - s for q, s in last_stage.items()}  # stages after q's
        most = max(behind.values())
        for q, d in behind.items():
            extra[q] = round(skew * (1 - d / most)) if most else 0
    skipped: list[int] = []  # the narrower windows not tried, fixed at the first call

    def depths(j: int) -> np.ndarray:
        return np.minimum(j + 1 + extra, per_rank)

    def frees(schedule: Schedule, j: int) -> int:
        return int((schedule.start >= tail_cut(tasks, schedule, depths(j))[schedule.processor]).sum())

    def cut(schedule: Schedule, k: int) -> np.ndarray | None:
        if not skipped:
            fits = [j for j in (1, 2) if j < fewest and frees(schedule, j) <= first_tasks]
            skipped.append(max(fits, default=0))
        j = skipped[0] + k
        return tail_cut(tasks, schedule, depths(j)) if j < fewest else None

    return cut


TAIL_SKEW = 2.0
"""How many forwards deeper the tail step's windows in `best` (`widening_tails`) cut the rank that holds
the last stage than the rank farthest from it (the ranks between in proportion), where `_tail_skew`
says it applies. The backward chains that reach rank 0's freed passes begin on the last rank before
its own cut, where an even window keeps them in place: on the 1.5B interleaved row at p=16, m=32,
v=2, the even window from each rank's second-last forward (968 free passes) has its own bound 2.42%
over the row's, the window skewed by 2 from the last forward (also 968) 1.89%; in 15 s (3 seeds)
the even window found 3.10-3.26% and the skewed one 2.68-3.01% (session 56). 60 s runs of `best`,
2-core VM, alternated with skew 0 (docs/measurements.md, session 56): on the interleaved rows of 7
to 16 ranks 19 pairs better, 5 equal, 2 worse (e.g. p=16, m=32, v=2 2.12, 2.38, 2.90% against 2.41,
2.58, 3.10%; p=12, m=24, v=2 1.13, 1.35% against 2.20, 2.40%). At p=5 and p=6 worse in 5 pairs of 6,
hence `TAIL_SKEW_RANKS`. Not in a V (the first and the last stage on one rank): on the V row at
p=16, m=48 under 18 stage activations it did a little worse in both pairs (0.36 and 0.43% against
0.29 and 0.39%), and the other V rows reach their bound before the tail step."""


def _tail_skew(pipe: Pipeline, stage_to_rank: list[int]) -> float:
    """The tail step's skew where it applies: `TAIL_SKEW` from `TAIL_SKEW_RANKS` ranks on,
    `TAIL_SKEW_WIDE` from `TAIL_SKEW_WIDE_RANKS` on, none where the first and the last stage share a
    rank (a V)."""
    if pipe.num_ranks < TAIL_SKEW_RANKS or stage_to_rank[0] == stage_to_rank[-1]:
        return 0.0
    return TAIL_SKEW_WIDE if pipe.num_ranks >= TAIL_SKEW_WIDE_RANKS else TAIL_SKEW


TAIL_SKEW_RANKS = 7
"""`TAIL_SKEW` applies from this many ranks on: on the interleaved rows with 5 and 6 ranks, whose
even windows are narrow (175-245 free passes) and proven in seconds, the skewed ones did worse in
5 pairs of 6 (p=6, m=12 1.67, 1.69, 2.11% against 1.03, 1.35, 1.67%; session 56)."""


TAIL_SKEW_WIDE = 4.0
"""The tail step's skew (see `TAIL_SKEW`) from `TAIL_SKEW_WIDE_RANKS` ranks on, where the longer
pipelines paid for a deeper one. 60 s runs of `best`, 2-core VM, alternated with a skew of 2
(docs/measurements.md, session 57): on the interleaved rows of 10 to 16 ranks 13 pairs better, 1
equal, 4 worse (8 of 10 on the rows tried first, 5 of 8 on four rows tried after them, three of them
new); e.g. p=16, m=32, v=2 2.15, 2.12% against 2.48, 2.52%; p=14, m=28 2.86, 2.44% against 3.15,
3.17%; p=12, m=24 2.43% twice against 2.77% twice. Worse on p=16, m=48 (2.55, 2.55% against 2.26,
2.21%) and mixed on p=16, m=32 (3.60, 2.82% against 3.10, 3.38%). At 7 and 8 ranks it was worse in
3 pairs of 7 and better in 1, hence 2 there; at 9 better in 3 pairs, equal in 3."""


TAIL_SKEW_WIDE_RANKS = 9
"""`TAIL_SKEW_WIDE` applies from this many ranks on (see there). Set after the rows of 7, 8 and 10 to
16 ranks, then tried at 9 (session 57, alternated 60 s runs, 3 rounds): p=9, m=18 2.03, 1.87, 1.87%
with 4 against 2.12, 2.32, 2.32% with 2; p=9, m=18, v=2 1.60% in all six."""


TAIL_FIRST_TASKS = 250
"""The tail step's first window in `best` (`widening_tails`): the widest of the first three that frees
at most this many passes. A narrower window's optimum is often where the widening then stalls: on
p=6, m=12 each rank's passes from its second-last forward on are proven optimal at 1.98%, and the
window from the third-last (243 passes), proven at 1.67%, then has too little of the 60 s left.
Started there, it is proven in 18-23 s (three runs; p=6, m=18: 22-23 s). 60 s runs of `best`, 2-core
VM (session 45), with it against without, alternately, min / median / max of three runs: p=6, m=12
1.67 / 1.67 / 1.67% against 1.98 / 1.98 / 1.98%; p=6, m=18 1.15 / 1.15 / 1.15% against 1.15 / 1.15 /
1.36%; p=4, m=8 0.00 / 0.10 / 0.10% against 0.10 / 0.10 / 1.93%; two runs each: p=4, m=16, v=2 0.00%
in all four; the V row at p=8 under 10 activations 0.15% in all four; the uneven row 2.89% against
2.89% (one run each). Rows whose first window already frees more run as before: p=8, m=16, v=2 (236
passes from the last forward, 260 from the second-last), the bundled p=8 row (364 from the last),
p=10, m=20 (565), and larger."""


TAIL_WINDOW_LIMIT = 60.0
"""At most this many seconds for one window of the tail step (`solvers.lns.improve_tails`). A window
not proven optimal in them gives way to the next, wider one where it improved, and ends the step
where it found nothing, leaving the time to the coarse levels and band steps. Before (session 45),
the first window not proven took all that was left of the step, so a longer limit was hardly a
better search: `best` with 1,200 s gave 1.54% on the bundled p=8 row. Only limits of about 90 s and
more reach it; in a 60 s `best` the whole step has less (and since session 47 `TAIL_WINDOW_SHARE`
caps each window there at a third of the step). 300 s runs of `best`,
2-core VM (session 46, running about twice as fast as in session 45), alternately with the code
before, min / median / max of three:

- bundled p=8, m=24: 1.38 / 1.44 / 1.48%, against 1.64 / 1.70 / 1.70%. Traced: the first window
  proven at 1.99% in 5-9 s, then three or four windows of 60 s, each improving (1.65%, then
  1.50-1.57%, then 1.38-1.50%). With every capped window giving way, also where it found nothing:
  1.06 / 1.38 / 1.38%, five windows each;
- p=6, m=12: 1.09 / 1.48 / 1.60%, against 1.49 / 1.60 / 1.60%. The windows from each rank's third-
  and fourth-last forward are proven at 1.67% (the second finds nothing), the fifth finds nothing in
  60 s and the step ends at 91-125 s, where it went on to the end; the coarse levels and band steps
  then find the rest.

At 120 s (bundled p=8, two runs each) the second window gets 60 s and the third the rest: 1.58 and
1.64%, against 1.65% twice. At 600 s (one run) 1.22%: the third window proven at that span."""


TAIL_WINDOW_SHARE = 1 / 3
"""At most this share of the tail step for one window (and never more than `TAIL_WINDOW_LIMIT`): one
not proven in it gives way to the next, wider window where it improved, and ends the step where it
found nothing. With a window's memory kept as reservoirs past `solvers.cpsat.TAIL_EXPANSION_TASKS`
free passes, CP-SAT improves a wide window at once, so a window that is slow to prove is better left
for the next: on the bundled p=8 row the window from each rank's second-last forward is not proven
in 40 s (its own bound 1.48%), while the next one is proven at 1.22% in 20 s. 60 s runs of `best`,
2-core VM (session 47), alternately with the code before (reservoirs always expanded, each window up
to the whole step), min / median / max of three: bundled p=8 1.22 / 1.24 / 1.54% against 1.65 /
1.74 / 1.74% (two more runs of the same code that day: 1.45 and 1.36%); p=6, m=12 1.49 / 1.60 /
1.67% against 1.67% x3; the uneven row 2.79 / 2.89 / 2.89% against 2.69 / 2.69 / 2.89% (six runs
each; worse). Two runs each: p=6, m=18 1.15% and p=8, m=16, v=2 1.36% in all four; p=4, m=8 0.00
and 0.87% against 0.00%. Either part alone does less: the share with the reservoirs always
expanded gave p=8 1.99% (its second window found nothing in its third of the step), and the
reservoirs kept without the share 1.68%, one run each."""


TAIL_JUMP = True
"""Whether a tail window that had all of its seconds (`TAIL_WINDOW_SHARE`) and found nothing gives
way to a much wider one (`solvers.lns.improve_tails`' ``jump``: after window ``k``, window ``2k +
2``) instead of ending the step. Where a window finds nothing, the next one or two often do not
either, while a much wider one does: at p=6, m=12 the window from each rank's fourth-last forward
found nothing in 16 s in every run, and in one run that went on one forward at a time the fifth-last
neither; with the jump the window from the seventh-last (315 passes) or, after it, the
thirteenth-last (423) improved in the same time in five of the six 60 s runs where the jump came
with time left (one of them with a quarter of the step for a window). Kept as reservoirs
(`solvers.cpsat.TAIL_EXPANSION_TASKS`), their memory lets CP-SAT improve such wide windows at once.
Before, the step ended there and the coarse levels and band steps had the rest.

60 s runs of `best`, 2-core VM (session 48), alternately with the code before (the step ends),
min / median / max of five: p=6, m=12 0.83 / 1.49 / 1.67% against 1.49 / 1.67 / 1.98% (1.67% twice:
once the windows jumped to found nothing either, once the first window was not proven in its 16 s
and the jump came as time ran out); the uneven row 2.28 / 2.28 / 2.79% against 2.69 / 2.89 / 2.89%;
bundled p=8, m=24 1.22 / 1.45 / 1.99% against 1.37 / 1.48 / 1.56% (the 1.40% run shared the machine
for up to 20 s; in the 1.99% run the first window, 364 passes, was not proven in its 15 s, which
other runs prove in 2-15 s, and the third found nothing as the step's time ran out). Of three: p=6,
m=18 1.02 / 1.15 / 1.15% against 1.15% x3. Two runs each way: p=8, m=16, v=2 1.36% and p=4, m=8
0.00%, unchanged (every window there improved, or the bound was reached). One run each way, where no
window found nothing before the step's time was out, so they differ by CP-SAT's chance: p=10, m=20
2.91% (2.71%), p=12, m=24 3.28% (2.96%), p=12, m=36 1.93% (2.32%), V p=16 under 18 activations
1.01% (0.93%). Two runs of a first version of the same rule gave p=6, m=12 0.71% twice. At 300 s,
one run each way: p=6, m=12 0.73% against 1.18% (the old step ended at 106 s, where the fourth-last
forward's window found nothing in its 60 s; with the jump the seventh- and eighth-last improved);
bundled p=8 1.31% against 1.06%, where no window found nothing before the last and the runs parted
by chance (the third window proven at 1.22% in the second run only)."""


TAIL_JUMP_PROVEN = 0.5
"""A tail window proven optimal only after more than this share of its seconds is followed by window
``2k + 2`` (`solvers.lns.improve_tails`' ``jump_proven``; the first window, 0, by window 2) instead of
the next one, one forward wider; one proven sooner is followed by the next. On the p=6 rows the first
window (243 passes) is proven in 8.1-15.5 of its 16 s (15 traced runs in session 50; the share is
close to the quickest of them), and the window after it then found nothing in its
16 s in every traced run (session 48, and 6 of 6 in session 50), so a third of the step went by
before the wider windows that do improve began. On the bundled p=8 row the window two forwards wider
is the one that reaches 1.22% (session 47), and the jump gets there 15 s sooner where the first proof
was slow. Where windows are proven in a second or two (p=4, m=16, v=2), the next one is proven soon
too and improves: jumping after every proof left that row at 0.17% in 2 of 3 runs, where the
widening one forward at a time reaches the bound in 20 s.

60 s runs of `best`, 2-core VM (session 50), alternately with the code before, min / median / max
of three, with a jump after every proof (as first kept): p=6, m=12 1.02 / 1.09 / 1.09% against 1.67%
x3 (three more runs of the code before that day: 0.71, 0.78 and 1.67%); p=6, m=18 0.54 / 0.65 /
1.15% against 1.15% x3 (four more: 1.10 and 1.15% x3); bundled p=8 1.31 / 1.45 / 1.47% against 1.22
/ 1.48 / 1.48% (three more: 1.48, 1.55 and 1.57%). Two runs each: p=8, m=16, v=2 1.36% in all four.
One run each: p=10, m=20 2.43% against 2.95%; the uneven row 2.28% against 2.28%; p=4, m=8 at the
bound in both. The issue's and the held-out rows with that rule are in
`benchmarks/results/multichunk-s50-2core-vm.txt` and `multichunk_unseen-s50-2core-vm.txt`. With the
share of a half (one run each unless said): p=4, m=16, v=2 at the bound in 17 and 21 s (two runs);
p=6, m=12 0.63%; p=6, m=18 0.45%; bundled p=8 1.45 and 1.31% (two runs; in the first the first window
was proven in 1.7 s and the step went on one forward at a time, in the second in 7.7 s and it
jumped)."""

TAIL_FIXED_FIRST = 1.0
"""Seconds of CP-SAT's fixed search alone (one worker, no LP, no neighbourhoods) that each tail window
gets before the usual search (`solvers.lns.improve_tails`' ``fixed_first``; at most half the window's
seconds, counted in them). On the bundled p=8 row the first window's optimum is its own bound, and the
usual search with 2 workers took 3.5 s, 6.1 s, 9.5 s, 13.8 s or more than 15 s to reach it (replays
of one saved window with seeds 0-2, session 51), the fixed search 0.4-0.7 s: the step then has a
window more. CP-SAT's portfolio with 3 workers on 2 cores has the fixed search too and proved it as
fast, but slowed the proofs of the other rows (p=4, m=16, v=2 then missed the bound; p=6, m=12 1.67%
twice in 3 runs): not kept. Windows where the fixed search finds nothing lose the second.

60 s runs of `best`, 2-core VM (session 51), one process at a time: bundled p=8 1.22 / 1.35 / 1.45%
(6 runs: 3 as a wrapper of the step, 3 of this code) against 1.22 / 1.48 / 1.74% (9 runs that
day), and 1.22 / 1.22 / 1.45% in `benchmarks/results/multichunk-s51-2core-vm.txt`; p=6, m=12 0.22 /
1.05 / 1.33% (10 runs, 3 of them the benchmark's) against 0.23 / 0.92 / 1.67% (10 runs); p=6, m=18
0.64 and 0.75% against 0.42 and 1.10%; p=4, m=16, v=2 at the bound in every run, in 24-26 s (3 runs)
against 21-22 s (5 runs). A small gain at p=8; at p=6, m=12 a median 0.13% higher, well inside that
row's spread (a lottery of which optimum the first wide window finds)."""


TAIL_UNHINTED_TASKS = 350
"""A tail window that frees at least this many passes gives the first half of its usual search to CP-SAT
without the current schedule as its hint, and the rest to the hinted search from the shorter of the two
(`solvers.lns.improve_tails`' ``unhinted``; the fixed search before keeps the hint). CP-SAT's
neighbourhoods stay near a hint, and in a wide window they seldom leave it in a few seconds; its own
search from nothing lands elsewhere. Replayed for 15 s from a `best` run's tail step (session 58, one
seed unless said), the unhinted search against the hinted one: p=8, m=32 window 0 (388 passes) 0.95%
against 1.40%, windows 1 and 2 1.04 and 1.00% against 1.70 and 1.20%; p=16, m=32, v=2 windows 0 and 1
(1,016 and 1,064) 2.29 and 2.16% against 3.10 and 2.95%; the bundled p=8 row's windows 1 and 2, two
seeds each, 1.31-1.45% against 1.64% in all four. In narrow windows it is worse: p=4, m=16, v=2
(86 and 98 passes) proven in 11 s or not in 15 s where the hinted search proves them in about a
second; p=6, m=12's first window (243) not solved in 15 s, where the hinted one proves it in 11-12 s.

The whole search unhinted in windows from 350 passes, 60 s runs of `best` alternated with the code
before (2 rounds, 10 rows): 6 pairs better, 8 equal, 6 worse, p=16, m=48 1.91, 1.89% against 2.67,
2.49% but p=16, m=32, v=2 2.35, 2.29% against 1.83, 2.12% and p=10, m=20 2.32-2.50% against
2.10-2.13%: not kept. Half and half, as kept (2 rounds on the six rows that differed; one prototype
round, one of this code): 7 better, 1 equal, 4 worse; p=16, m=48 1.91, 2.04% against 2.67, 2.67%;
p=10, m=20 2.26, 2.07% against 2.32, 2.10%; the bundled p=8 row 1.38, 1.39% against 1.45, 1.45%;
p=16, m=32, v=2 2.21, 2.17% against 2.20, 2.16%; p=8, m=32 1.10, 1.10% against 1.00, 1.10%; p=6, m=12
1.17, 1.98% against 1.67, 1.67% (docs/measurements.md, session 58). Rows it had not been tried on,
alternated the same way in session 59 (2 rounds): the V row at p=16, m=48 under 18 activations 0.97,
1.04% against 1.01, 1.04%; p=4, m=16, v=2 at the bound in all four; the uneven row 2.28, 2.69% against
2.69, 2.38%. Stopping the unhinted halves after the first that finds nothing shorter did no better (4
pairs better, 7 equal, 4 worse in 3 rounds on 5 rows): not kept."""


TAIL_SHARE = 0.9
"""The share of what is left after CP-SAT that the tail step gets (`solvers.lns.improve_tails` from
`tail_cut`): every rank's passes from its last forward on, re-solved by CP-SAT at once with the rest
in place. On the held-out
interleaved rows that no other step moved in 60 s it beats torch's order within seconds. Alone from
torch's order: p=16, m=32, two stages per rank, 3.46% to 3.20% in 20 s (2.94%, proven optimal for
the window, in 14-33 s); p=8, m=32, four stages per rank, 1.45% to 1.16% in 20 s. It had 0.3 in
session 26. In 60 s `best` runs in one process (session 27, 2-core VM), 0.6 against 0.3: p=16, m=32,
v=2: 2.94 / 3.10 / 3.20% against 3.20% x3; the bundled p=8 row 1.99% x3 against 1.99 / 1.99 /
2.15%; p=8, m=32, v=4: 1.22 / 1.31% against 1.30 / 1.31 / 1.31%; p=12, m=24: 3.35 / 3.44% against
3.44 / 3.53 / 3.53%; p=8, m=16, v=2 (where the coarse levels that follow matter): 2.04 / 2.77%
against 1.87-2.77% (6 runs).

Since session 29 the step widens its window while each is proven optimal (`widening_tails`): after
each rank's last forward, from its second-last, and so on; until session 42 the wider windows ended
within half the step's time. 3 runs of 60 s per row, 2-core VM,
against the code before (commit 10aeb60, session 28's runs): the uneven row
(`benchmarks/multichunk.py`'s `uneven_row`) 3.10-3.38% to 2.69-2.89%; p=6, m=18 1.72-1.84% to
1.36-1.45%; p=4, m=16, v=2 0.17% to 0.00% (optimal) in 2 of 3; p=4, m=8 0.14-1.65% (median 1.65) to
0.14-0.58%; p=10, m=20 and p=12, m=24, v=2, where the first window is not proven in time, unchanged
within their spread (results: benchmarks/results/multichunk*.txt).

0.9 since session 42 (0.6 before), with the wider windows free to use all of it (half before). On
the rows traced that day every gain after polish came from the tail step; the coarse levels and band
steps after it found nothing but once (p=6, m=12), while the wider windows were stopped by their
share, unproven. 60 s runs on the 2-core VM, the same day, the new shares against the old: the
bundled p=8 row 1.74% x3 against 1.99% x3; p=8, m=16, v=2 1.36 / 1.50 / 1.57% against 2.04% x3;
p=8 under 18 activations 0.00% (optimal) x2 against 0.53%; p=6, m=18 1.15 / 1.36 / 1.36% against
1.36% x3; p=6, m=12 1.98% x3 against 1.98 / 1.98 / 2.72%; p=12, m=36 2.34 / 2.44% against 2.61%
(torch's order); p=4, m=8 0.00 / 0.00 / 0.10% against 0.00 / 0.35 / 0.10%; equal within a run's
spread on p=12, m=24 (3.44 / 3.46% against 3.44%), p=10, m=20 (3.13 / 3.31% against 3.13%), the
uneven row (2.89% each) and the V row at p=16 under 18 activations (1.02% each). Table:
``benchmarks/results/tail_share-2core-vm.txt``. `benchmarks/multichunk.py` (3 runs) later that day:
p=8 under 18 activations 0.00% x3, p=6, m=12 1.67 / 1.67 / 1.98%, but the bundled p=8 row 1.99% x3,
and two rows lost what the coarse levels after the tail step had found: p=4, m=8 0.10% x3 and the V
row at p=8 under 10 activations 0.08 / 0.15 / 0.15% (0.00% x3 in sessions 40-41).

The half for the wider windows (session 29 to 41) was there to bound what the widening could take,
not for a measured gain: unlimited and limited gave the same spreads in session 29 (3 runs:
unlimited p=4, m=8 0.00-0.89%, the uneven row 2.89%, p=6, m=18 1.36%; limited 0.14-0.58%,
2.69-2.89%, 1.36-1.45%)."""

CPSAT_SHARE = 0.1
"""The share of what is left after polishing that CP-SAT gets on the whole model when a schedule
exists (all of it when none does). On the 1.5B interleaved rows it either finds its best in seconds
(p=4) or nothing at all (p=6, p=8); the coarse levels and band steps use the rest better (it had a
quarter before the coarse levels came)."""

COARSE_SHARE = 0.5
"""The share of what is left after CP-SAT that CP-SAT at coarser time gets (`solvers.lns.improve_coarse`).
On the 1.5B interleaved row re-cut to p=4, where CP-SAT with the real times stops at a 2.1% gap, it
took `best` (60 s) to 0.08 / 0.92 / 1.36% in three runs; with 0.8 to the bound in all three, but then
the p=8 row kept torch's order, band steps having too little time (figures:
``benchmarks/results/multichunk-2core-vm.txt``)."""

COARSE_FIRST_TASKS = 500
"""Up to this many tasks the coarse levels run before the tail step, not after it (`_search_mode`).
On small rows they find in seconds what the tail step's narrow windows, each proven optimal without a
gain, leave for minutes: on the interleaved p=3, m=12, two stages per rank under 8 activations (216
passes), from `best`'s 60 s schedule (1.16%) 20 s of them reach the bound with either seed, and a
300 s `best` got there only through them, after 163 s of tail windows. 60 s runs of `best`, 2-core VM
(session 66), two alternated pairs per row, first against after the tail step: p=3, m=12, v=2 under 8
0.00, 0.00% against 1.96, 1.96%; p=4, m=9, v=3 under 9 0.00, 0.38% against 2.78, 3.08%; p=4, m=8, v=3
under 15 (slower links) 0.00, 0.00% against 1.33, 1.33%; the V at p=5, m=10 under 7 0.00, 0.00%
against 1.34, 0.97%; p=4, m=8 (1F1B's memory) 0.00% in all four, in 24 s against 45 s; p=4, m=16, v=2
(384 passes) 0.17, 0.00% against 0.17, 0.17%; p=5, m=10, v=3 under 18 (450) 1.31, 1.31% against 1.90,
2.35%. Larger, with the levels first up to 700: p=6, m=15, v=2 (540) 0.91, 1.14% against 1.17,
1.17%, and p=5, m=20, v=2 (600) 0.83, 0.45% against 0.97, 0.52%, within their spread; p=6, m=12, v=3
(648) worse, 2.11, 2.11% against 1.12, 1.67%. Hence 500. (Gaps as `solve` gives them, (span - bound)
/ span; until session 67 this text gave span / bound - 1, up to 0.1 points more.)"""

COARSE_SYMMETRY_TASKS = 1500
"""Up to this many tasks the coarse levels keep the micro-batch symmetry chains (`symmetry_chains`).
They remove equal schedules from CP-SAT's search, which helps where its complete search can cover
the model, and they stop its small neighbourhoods from relabelling micro-batches, which hurts where
only those move. On the 1.5B interleaved rows (60 s of `best`, two sets of 3 runs): p=4 (288 passes)
reached the bound in all six (before: 0.08-1.36% gap), p=6 (648) 1.31-2.11% and 1.41-2.49% (before:
2.48-2.79%); 30 s of coarse levels at p=6, m=18 (972) and p=8, m=16 (1,152) gave 1.45 / 1.71% and
2.75 / 3.12% with them, 1.85 / 1.92% and 3.25 / 3.12% without. At p=8, m=24 (1,728) the levels found
nothing with them in 4 runs of `best` (nor in 600 s alone), where without them they reach 1.80-2.15%."""

BAND_SHARE = 0.85
"""The share of what is left after the coarse levels that band steps get (`solvers.lns.improve_bands`);
window steps (`solvers.lns.improve_windows`) take the rest. Before the coarse levels, with 60 s on
the 1.5B interleaved rows: p=6 gap 2.79% (bubble 0.0988; torch's order 0.1050), p=8 2.25% (0.0731;
torch 0.0755). Before band steps both stayed at torch's order (3.46%, 2.50%); with a third for
CP-SAT and half the rest for bands, too few band steps ran to find these."""

BAND_STEP = 3.0
"""Seconds per band step: each re-solves the whole model, so shorter steps leave CP-SAT too little
after building it (3 s: about 20 steps a minute on the 1.5B interleaved row, 1,728 passes)."""

POLISH_SHARE = 0.5
"""At most this share of a backward mode's search polishes its starting schedule. It often reaches a
local optimum well before (6 s on the 4,608 tasks of the ZB-V row), but not always: on the V rows under
tight memory (p=16 under 18 activations, p=12 under 16) it still improves the span after a quarter of
60 s, and stops at a local optimum after about 26 s. With a quarter (until session 40) those rows gave
2.50-3.08% (5 runs) and 2.58% (3); with half 1.77% and 1.64%, and the other rows of
`benchmarks/multichunk.py` ended within their spreads (one run each, 2-core VM, session 40;
benchmarks/results/polish_share-2core-vm.txt). Where polish improves only its secondary score it
takes the whole cap, from CP-SAT and the steps after it; on the interleaved rows that cost nothing
measurable. Nor did stopping it there after 32 steps without a shorter span gain anything (7-20 s of
60 saved at p=10 and p=12; session 41, benchmarks/results/polish_plateau-2core-vm.txt)."""


def canonical(tasks: TaskGraph, schedule: Schedule) -> Schedule:
    """``schedule`` with the start times of each (stage, kind) class handed to its micro-batches in
    order: the same schedule (see `symmetry_chains`), in the form CP-SAT's symmetry constraints admit."""
    start = schedule.start.copy()
    for chain in symmetry_chains(tasks):
        start[chain] = np.sort(start[chain])
    return Schedule(processor=schedule.processor, start=start)


def solve_best(
    pipe: Pipeline,
    *,
    objective: str | None = None,
    time_limit: float = 30.0,
    workers: int = 2,
    progress=None,
    templates: list[str] | None = None,
    start: Start | None = None,
    seed: int = 0,
) -> Solution:
    """The best schedule of every template that fits (memory included), list scheduling and CP-SAT,
    with a lower bound that holds for everything searched.

    With ``start`` (an earlier run's schedule: its orders, and its own times where they still hold;
    `start_solution`), that schedule is a candidate too, before the templates, and seeds the search
    like them: the result is never slower than it, so runs of ``best`` can each go on from the last
    one's schedule. Orders that do not fit
    ``pipe`` (another partition's memory, say) are left out, and ``info["candidates"]["start"]`` says
    why ("not used: ...").

    ``seed`` seeds the search (polish's moves and CP-SAT's; `solvers.cpsat.seed_solver`): going on
    from a schedule that an earlier run's search ended on, the same seed tends to end there again, and
    another seed draws afresh (docs/measurements.md, session 64).

    CP-SAT searches, at the problem's placement (else the best template's), the split-backward graph
    and, unless `fused_is_dominated`, the fused-backward graph too; the searches share what the
    templates left of ``time_limit``. Each is seeded with the best template of its mode and the list
    schedule. The result is the fastest of all candidates, templates included. The reported bound is
    the smallest of the searched modes' proven bounds: no schedule of either backward mode at that
    placement is faster.

    ``time_limit`` holds for all of it: the candidates share one task graph per backward mode, and a
    step estimated (`Budget`) not to end in time is not started, except the first template, so that
    there is always a schedule. Templates with fixed patterns run before the greedy searches
    (`Template.greedy`), whose time grows with ranks times passes, so a short limit still tries every
    fixed pattern.

    ``info["candidates"]`` records each candidate's objective (or why it did not apply), ``info
    ["searched"]`` the modes searched with their bounds and CP-SAT statuses."""
    from layersched.schedule.greedy import simulation_steps
    from layersched.schedule.templates import TemplateError, template_names

    objective = objective or pipe.objective
    if pipe.capacity is not None and pipe.capacity < pipe.least_memory():
        raise no_schedule(pipe, "best", "infeasible")  # proven: no micro-batch fits, nothing to search
    num_tasks = pipeline_tasks(pipe)
    check_memory(num_tasks)
    t0 = time.perf_counter()
    budget = Budget(time_limit, num_tasks, start=t0)
    tried: dict[str, int | str] = {}
    found: list[Solution] = []
    graphs: dict = {}  # one task graph per backward mode and placement, shared by the candidates
    stopped = False  # Ctrl-C outside CP-SAT: keep what was found, search no further
    if start is not None:
        try:
            found.append(start_solution(pipe, start, objective, graphs))
            tried["start"] = found[-1].metrics["value"]
        except ValueError as exc:  # InvalidSchedule and Deadlock too: orders for other costs or memory
            tried["start"] = f"not used: {exc}"
    try:
        names = templates if templates is not None else template_names()
        # fixed patterns before greedy searches (a greedy one can take seconds where a pattern takes
        # milliseconds); with fused backward dominated, split-backward templates first: their graph
        # covers the fused one
        dominated = fused_is_dominated(pipe)
        names = sorted(
            names,
            key=lambda name: (
                dominated and not get_template(name).split_backward,
                get_template(name).greedy,
                not get_template(name).first_in_best,  # on a tie the search starts from the first found
            ),
        )
        for name in names:
            # the limit holds: a template that would not end in time is not started (one always is)
            tpl = get_template(name)
            try:
                check_stages_per_rank(tpl, pipe)
            except TemplateError as exc:
                tried[name] = f"not applicable: {exc}"
                continue
            if tpl.skip_in_best is not None and (why := tpl.skip_in_best(pipe)):
                tried[name] = f"not tried: {why}"
                continue
            steps = ["greedy" if tpl.greedy else "template"]
            if (tpl.split_backward, tuple(pipe.stage_to_rank())) not in graphs:
                steps.append("graph")  # about: a template of another placement builds its own
            if found and not budget.fits(*steps, seconds=tpl.seconds_per_step * simulation_steps(pipe)):
                tried[name] = "not tried: the time limit was reached"
                continue
            try:
                sol = solve_pipeline(pipe, schedule=name, objective=objective, graphs=graphs)
            except (TemplateError, InvalidSchedule, Deadlock) as exc:
                tried[name] = f"not applicable: {exc}"
                continue
            tried[name] = sol.metrics["value"]
            found.append(sol)
    except KeyboardInterrupt:
        stopped = True
    leader = min(found, key=lambda s: s.metrics["value"], default=None)
    if pipe.placement is not None or leader is None:
        stage_to_rank = pipe.stage_to_rank()
    else:
        stage_to_rank = leader.stage_to_rank
    modes = [True] if fused_is_dominated(pipe) else [True, False]
    searches = []
    for k, split in enumerate(modes if not stopped else []):  # the searches share the time left
        share = budget.left() / (len(modes) - k)
        try:
            searches.append(
                _search_mode(
                    pipe, split, stage_to_rank, found, objective, budget, share, workers, progress, tried, graphs, seed
                )
            )
        except KeyboardInterrupt:
            stopped = True
        if stopped or searches[-1].interrupted:
            break  # Ctrl-C: the best so far, and no bound for the modes not searched
    found += [s.solution for s in searches if s.solution is not None]
    interrupted = stopped or any(s.interrupted for s in searches)
    if interrupted and not found:
        raise KeyboardInterrupt  # nothing to write
    if not found:
        statuses = {s.status for s in searches}
        raise no_schedule(
            pipe, "every template, list scheduling and CP-SAT", statuses.pop() if len(statuses) == 1 else "unknown"
        )
    best = min(found, key=lambda s: s.metrics["value"])
    bounds = [s.bound for s in searches if s.bound is not None]
    if len(searches) < len(modes):  # a mode left unsearched (Ctrl-C): only what holds for both modes
        bounds.append(max(pipeline_bounds(pipe, stage_to_rank, objective).values(), default=0))
    bound = min([*bounds, best.metrics["value"]])
    # the winner's metrics, computed on its own graph; that graph's bounds (work per rank, ...) hold for
    # its backward mode only: keep the bound of the union searched
    metrics = {**best.metrics, "lower_bound": bound, "lower_bounds": {"searched": bound}}
    searched = {("split" if s.split_backward else "fused"): {"bound": s.bound, "status": s.status} for s in searches}
    info = {
        "candidates": tried,
        "cpsat_status": ", ".join(f"{k} {v['status']}" for k, v in searched.items()),
        "source": "cpsat" if any(best is s.solution for s in searches) else best.method,
        "searched": searched,
    }
    if interrupted:
        info["interrupted"] = True
    value, runtime = metrics["value"], time.perf_counter() - t0
    status = "optimal" if bound >= value else "feasible"
    result = Result(best.schedule, status, value, bound, runtime, "best", objective, info)
    return Solution(pipe, best.tasks, best.schedule, "best", objective, metrics, runtime, result, info, best.compute)
