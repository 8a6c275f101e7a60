"""The static side of a run: check a schedule's action lists and plan every transfer before any
process starts.

Every input a rank receives is matched with the action that sends it; an action list that needs an
input nobody sends, sends what nobody receives, or waits in a cycle across ranks is a `PlanError`
naming the actions involved. Each direction between two ranks is a channel (a
process group of its own in the runner) whose messages both sides issue in the sender's order
(NCCL matches point-to-point operations in issue order, on one stream per communicator); all
receives are posted at the start of the iteration, so a sender never waits for its receiver to
post, and traffic one way never waits behind traffic the other way.

Pure Python: no torch. The same checks run in the launcher and in every rank before the process
group starts.

Example
-------
>>> plan = plan_actions(num_stages=2, stage_to_rank=[0, 1], num_microbatches=2,
...                     actions=[["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]])
>>> [(t.producer, t.consumer) for t in plan.transfers]
[('0F0', '1F0'), ('0F1', '1F1'), ('1B0', '0B0'), ('1B1', '0B1')]
>>> [[t.consumer for t in step.post] for step in plan.ranks[0].steps]
[['0B0', '0B1'], [], [], []]
>>> assign_layers(2, None, ["a", "b", "c"])
[['a', 'b'], ['c']]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

from layersched.schedule.graph import parse_action


class PlanError(ValueError):
    """A schedule or model that cannot run; the message names the actions, ranks or layers."""


@dataclass(frozen=True)
class Transfer:
    """One point-to-point message: an activation (stage ``boundary`` to ``boundary + 1``) or the
    gradient of that activation (back from ``boundary + 1`` to ``boundary``). ``tag`` is unique
    within an iteration; pipeline ranks ``src`` and ``dst`` differ."""

    tag: int
    kind: Literal["activation", "gradient"]
    boundary: int
    microbatch: int
    src: int
    dst: int
    producer: str
    consumer: str


@dataclass(frozen=True)
class Step:
    """One action of a rank and the communication around it: post ``post`` (receives), wait for
    ``wait``, compute, then send ``send``; ``reduce`` marks the stage's last backward on the rank,
    after which its gradient all-reduce may start."""

    action: str
    stage: int
    kind: str
    microbatch: int
    post: tuple[Transfer, ...] = ()
    wait: Transfer | None = None
    send: Transfer | None = None
    reduce: bool = False


@dataclass(frozen=True)
class RankPlan:
    rank: int
    stages: tuple[int, ...]
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Plan:
    """The checked schedule: per pipeline rank its steps, and every transfer."""

    num_stages: int
    num_microbatches: int
    stage_to_rank: tuple[int, ...]
    ranks: tuple[RankPlan, ...]
    transfers: tuple[Transfer, ...]
    order: tuple[str, ...]
    """A global order in which the actions can run (each rank's order kept)."""

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)


def plan_schedule(doc) -> Plan:
    """The `Plan` of a `layersched.formats.export.ScheduleFile`."""
    p = doc.pipeline
    if p.num_ranks != len(doc.actions):
        raise PlanError(f"actions: {len(doc.actions)} ranks listed, pipeline.num_ranks is {p.num_ranks}")
    return plan_actions(p.num_stages, p.stage_to_rank, p.num_microbatches, doc.actions)


def plan_actions(num_stages: int, stage_to_rank: list[int], num_microbatches: int, actions: list[list[str]]) -> Plan:
    """Check per-rank action lists and plan their communication; `PlanError` on any problem."""
    S, M, R = num_stages, num_microbatches, len(actions)
    if len(stage_to_rank) != S:
        raise PlanError(f"stage_to_rank has {len(stage_to_rank)} entries for {S} stages")
    if bad := [s for s, r in enumerate(stage_to_rank) if not 0 <= r < R]:
        raise PlanError(f"stage {bad[0]} is placed on rank {stage_to_rank[bad[0]]}, but there are {R} ranks")
    where: dict[str, tuple[int, int]] = {}
    for r, acts in enumerate(actions):
        for k, name in enumerate(acts):
            _check_action(name, r, S, M, stage_to_rank)
            if name in where:
                raise PlanError(f"action {name} appears twice (rank {where[name][0]} and rank {r})")
            where[name] = (r, k)
    needs = {name: _needs(name, S, where) for name in where}
    for name, deps in needs.items():
        for dep in deps:
            if dep not in where:
                raise PlanError(_unmatched(name, dep, where[name][0]))
    _check_complete(S, M, where)
    for name, (r, k) in where.items():
        for dep in needs[name]:
            dr, dk = where[dep]
            if dr == r and dk > k:
                raise PlanError(
                    f"rank {r} runs {name} (position {k}) before {dep} (position {dk}), "
                    f"which it needs; move {dep} earlier"
                )
    order = _simulate(actions, needs, where)
    position = {name: i for i, name in enumerate(order)}
    transfers = sorted(
        ((dep, name) for name in where for dep in needs[name] if where[dep][0] != where[name][0]),
        key=lambda pc: position[pc[0]],
    )
    return _build(
        S, M, stage_to_rank, actions, order, [_transfer(i, p, c, where) for i, (p, c) in enumerate(transfers)]
    )


def _check_action(name: str, r: int, S: int, M: int, stage_to_rank: list[int]) -> None:
    try:
        s, kind, mb = parse_action(name)
    except ValueError as exc:
        raise PlanError(f"rank {r}: {exc}") from None
    if kind not in "FIWB" or mb is None:
        raise PlanError(f"rank {r}: {name} is not a compute action (expected F, I, W or B with a micro-batch)")
    if s >= S or mb >= M:
        raise PlanError(
            f"rank {r}: {name} names stage {s} / micro-batch {mb}, but the pipeline has "
            f"{S} stages and {M} micro-batches"
        )
    if stage_to_rank[s] != r:
        raise PlanError(f"rank {r} lists {name}, but stage {s} is placed on rank {stage_to_rank[s]}")


def _unmatched(name: str, dep: str, rank: int) -> str:
    s, kind, i = parse_action(name)
    d, dkind, _ = parse_action(dep)
    if d == s:
        return f"rank {rank}: {name} needs {dep}, but no rank runs {dep}"
    what = f"stage {d}'s output" if dkind == "F" else f"the input gradient from stage {d}"
    alt = f" (or {d}I{i})" if dkind == "B" else ""
    return f"rank {rank}: {name} receives {what} for micro-batch {i}, but no rank runs {dep}{alt} to send it"


def _check_complete(S: int, M: int, where: dict[str, tuple[int, int]]) -> None:
    for s in range(S):
        for i in range(M):
            has = {k for k in "FIWB" if f"{s}{k}{i}" in where}
            if "F" not in has:
                raise PlanError(f"no rank runs {s}F{i} (stage {s}'s forward of micro-batch {i})")
            if "B" in has and has & {"I", "W"}:
                raise PlanError(
                    f"stage {s} micro-batch {i} has both {s}B{i} and a split backward ({s}I{i}/{s}W{i}); keep one"
                )
            if "B" not in has and has != {"F", "I", "W"}:
                missing = next(k for k in "IW" if k not in has)
                raise PlanError(
                    f"no rank runs {s}{missing}{i}: stage {s} micro-batch {i} needs "
                    f"{s}B{i}, or both {s}I{i} and {s}W{i}"
                )


def _backward(s: int, i: int, where: dict) -> str:
    """The action that computes stage ``s``'s input gradient of micro-batch ``i``."""
    return f"{s}I{i}" if f"{s}I{i}" in where else f"{s}B{i}"


def _needs(name: str, S: int, where: dict) -> list[str]:
    """Actions whose output ``name`` uses, in the order: data from another stage first."""
    s, kind, i = parse_action(name)
    if kind == "F":
        return [f"{s - 1}F{i}"] if s > 0 else []
    if kind == "W":
        return [f"{s}I{i}"]
    return ([_backward(s + 1, i, where)] if s + 1 < S else []) + [f"{s}F{i}"]


def _simulate(actions: list[list[str]], needs: dict[str, list[str]], where: dict) -> list[str]:
    """Run the lists round-robin, each action once its inputs exist: a global execution order, or
    a `PlanError` naming the cycle of ranks waiting on one another."""
    R = len(actions)
    nxt, done, order = [0] * R, set(), []
    while len(order) < len(where):
        progress = False
        for r in range(R):
            while nxt[r] < len(actions[r]) and all(d in done for d in needs[actions[r][nxt[r]]]):
                done.add(actions[r][nxt[r]])
                order.append(actions[r][nxt[r]])
                nxt[r] += 1
                progress = True
        if not progress:
            raise PlanError(_cycle_message(actions, nxt, needs, where, done))
    return order


def _cycle_message(actions, nxt, needs, where, done) -> str:
    waits = {}
    for r, acts in enumerate(actions):
        if nxt[r] < len(acts):
            dep = next(d for d in needs[acts[nxt[r]]] if d not in done)
            waits[r] = (acts[nxt[r]], dep, where[dep][0])
    r, seen = next(iter(waits)), []
    while r not in seen:
        seen.append(r)
        r = waits[r][2]
    cycle = seen[seen.index(r) :]
    links = " -> ".join(f"rank {q} waits at {waits[q][0]} for {waits[q][1]} (rank {waits[q][2]})" for q in cycle)
    return f"the schedule deadlocks: {links}; no rank can proceed"


def _transfer(tag: int, producer: str, consumer: str, where: dict) -> Transfer:
    ps, pk, mb = parse_action(producer)
    cs = parse_action(consumer)[0]
    kind: Literal["activation", "gradient"] = "activation" if pk == "F" else "gradient"
    return Transfer(tag, kind, min(ps, cs), mb, where[producer][0], where[consumer][0], producer, consumer)


def _build(S, M, stage_to_rank, actions, order, transfers: list[Transfer]) -> Plan:
    ranks = tuple(
        RankPlan(r, tuple(sorted({parse_action(a)[0] for a in acts})), _rank_steps(r, acts, transfers))
        for r, acts in enumerate(actions)
    )
    return Plan(S, M, tuple(stage_to_rank), ranks, tuple(transfers), tuple(order))


def _rank_steps(r: int, acts: list[str], transfers: list[Transfer]) -> tuple[Step, ...]:
    """Rank ``r``'s steps. Each direction between two ranks is a channel of its own whose messages
    both sides issue in the sender's order: sends right after their action, receives all posted
    at the start of the iteration (a receive posted before its message is sent never holds the
    sender up)."""
    queues: dict[tuple[int, int], deque[Transfer]] = {}
    for t in transfers:  # in a global execution order, so each channel's in its sender's order
        if r in (t.src, t.dst):
            queues.setdefault((t.src, t.dst), deque()).append(t)
    by_consumer = {t.consumer: t for t in transfers if t.dst == r}
    by_producer = {t.producer: t for t in transfers if t.src == r}
    last_backward = {parse_action(a)[0]: k for k, a in enumerate(acts) if parse_action(a)[1] in "BW"}
    posted: set[int] = set()
    steps = []
    for k, name in enumerate(acts):
        s, kind, mb = parse_action(name)
        post = []
        for (_, dst), q in queues.items():
            while dst == r and q:
                post.append(q.popleft())
        posted.update(t.tag for t in post)
        wait = by_consumer.get(name)
        assert wait is None or wait.tag in posted, f"internal: {name} waits for an unposted receive"
        send = by_producer.get(name)
        if send is not None:
            assert queues[(r, send.dst)][0] is send, f"internal: {name} sends out of channel order"
            queues[(r, send.dst)].popleft()
        steps.append(Step(name, s, kind, mb, tuple(post), wait, send, last_backward[s] == k))
    assert not any(queues.values()), "internal: transfers left unplanned"
    return tuple(steps)


def assign_layers(num_stages: int, stage_layers: list[list[str]] | None, model_layers: list[str]) -> list[list[str]]:
    """Names of the model layers of each stage: ``stage_layers`` checked against the model, or,
    when it is None, the model's layers split into ``num_stages`` contiguous chunks balanced by
    count (earlier stages get the extra layer). `PlanError` when they do not fit."""
    n = len(model_layers)
    if len(set(model_layers)) != n:
        dup = next(x for x in model_layers if model_layers.count(x) > 1)
        raise PlanError(f"the model has two layers named {dup!r}; layer names must be unique")
    if stage_layers is None:
        if n < num_stages:
            raise PlanError(
                f"the schedule has {num_stages} stages but the model has only {n} layers; "
                "use a deeper model or fewer stages"
            )
        base, extra = divmod(n, num_stages)
        bounds = [0]
        for s in range(num_stages):
            bounds.append(bounds[-1] + base + (s < extra))
        return [model_layers[bounds[s] : bounds[s + 1]] for s in range(num_stages)]
    if len(stage_layers) != num_stages:
        raise PlanError(f"pipeline.stage_layers has {len(stage_layers)} stages, pipeline.num_stages is {num_stages}")
    known = set(model_layers)
    for s, names in enumerate(stage_layers):
        if not names:
            raise PlanError(f"pipeline.stage_layers: stage {s} has no layers")
        if unknown := [x for x in names if x not in known]:
            raise PlanError(
                f"pipeline.stage_layers: layer {unknown[0]!r} of stage {s} is not in the model "
                f"(its layers: {', '.join(model_layers)})"
            )
    flat = [x for names in stage_layers for x in names]
    if flat != model_layers:
        missing = [x for x in model_layers if x not in flat]
        why = (
            f"layers {', '.join(missing)} are in no stage"
            if missing
            else "they are not the model's layers in order, each once"
        )
        raise PlanError(f"pipeline.stage_layers does not cover the model: {why}")
    return [list(names) for names in stage_layers]
