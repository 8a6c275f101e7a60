"""Order polishing: local search on the per-processor orders of a schedule, along its critical chain.

A schedule timed at its earliest starts (`solvers.time_orders`) is fixed by its orders. Its
objective is fixed by a chain of tasks each of which starts the moment the one before it lets it
(`solvers.simulate.tight_chain`). Where consecutive tasks of the chain share a processor they form
a *block*; as in job-shop local search, only a change to a block can shorten the chain:

- a task of a block moved to just after the block (or up to `REACH` places further): whatever it
  delayed on the chain now starts earlier, and the task itself fills a later gap;
- a task of a block moved to the block's start;
- a task of a block moved to the end of its processor's order: a processor whose own span has room
  can take work off the chain that way (tried first: on Zero Bubble's V row, deferring weight passes
  of the middle ranks so is what reaches the optimum).

Where a task of the chain may run elsewhere (it is in no affinity group), it may also move to
another processor: to one that runs a predecessor or successor of it, whose transfer it then saves,
or to one of `ELSEWHERE` others drawn at random. It goes where its start time puts it in that
processor's order, or one place before. These moves are tried before the others. Against saga
on random DAGs of 100 and 1,000 tasks on 4 to 32 processors, equal and heterogeneous,
`solvers.ils.ils` (the best list heuristic's schedule, then polish with kicks, 5 s) was at most
saga's best heuristic on 24 of 24 classes; `best` alone on 20
(`benchmarks/results/solvers_saga_ils-2core-vm.txt`). `solvers.heuristics.best` now polishes its
schedule itself, with a fixed ``effort``.

Each step tries these moves in random order (``seed``): moves to another processor first, then the
moves to the end, and among them tasks without successors first (moving one delays no other task).
Once `FIRST` of them have failed, the rest are sorted by a cheap guess at the makespan each gives:
the longest path through the moved task, and through the two tasks it leaves, with everything else
at its current times. On random layered DAGs of 1,000 tasks on 32 processors (3 seeds, 5 s) that
gave 707, 698 and 689 where random order gave 713, 704 and 698.

Each step keeps the first move that makes the schedule better: a smaller objective, or the same
objective and a smaller sum of per-processor spans (for ``span``) or ends of each processor's last
task (for ``makespan``), which makes room on the chains beside the critical one. When none does, a
move that keeps the objective (another chain of the same length now fixes it) is taken instead, and
the task it moved stays put for `TABU` steps; after `SIDEWAYS` such moves in a row without a better
schedule the search stops, with the best one seen. A move is skipped when its orders deadlock or a
processor's memory would go over its capacity (tasks on a processor run one after another, so its
peak is the largest running sum of their memory changes). The search also stops at the time limit,
at a known lower bound, or where no move keeps the objective (a local optimum).

`solvers.ils.ils` starts from `solvers.heuristics.best` and kicks the search out of each local
optimum. On 100 random tasks on 8 unrelated processors it went from 355, 323 and 409 (best, before
it polished) and 348, 318 and 396 (polish alone, at a local optimum within 0.1 s) to 326, 302 and
362 in 2 s.

A move is timed incrementally (`_Timing`): only the tasks whose start it changes are re-timed, in
the topological order of the last timing, with the moved task (and what it must now precede) given
new places in that order; where none exists, the move closes a cycle and its orders deadlock. For
``makespan`` a trial also stops as soon as a re-timed task's end plus the work after it on its
processor passes the current makespan: the move cannot be kept. On those 1,000-task DAGs polish
tries 2,200-2,800 moves a second, where timing each in full it tried 500-670 (3 seeds, 5 s each,
2-core VM); on 5,000 tasks 260-480, where it tried 87-124.

Example
-------
>>> from solvers import Problem, Schedule
>>> p = Problem(duration=[4, 1, 4], num_processors=2, edges=[[1, 2]], allowed=[[1, 0], [1, 0], [0, 1]])
>>> s = Schedule(processor=[0, 0, 1], start=[0, 4, 5])
>>> polish(p, s).objective  # task 1 first: task 2 starts at 1
5
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from solvers.graph import longest_to_sinks, neighbours
from solvers.problem import OBJECTIVES, Problem, Result, Schedule
from solvers.simulate import Deadlock, tight_chain, time_orders, timed_in_order
from solvers.validate import violations

REACH = 3
"""How many places past the end of its block a task may be moved in one step."""

SIDEWAYS = 64
"""Moves in a row that keep the score (another chain of the same length) before the search stops."""

TABU = 8
"""Steps during which a task moved sideways stays where it was put."""

WORSE = "worse"
"""What `_Timing.trial` returns for a move whose makespan is sure to exceed its cutoff."""

FIRST = 8
"""Moves timed in the order drawn, each step, before the rest are sorted by their estimated makespan."""

ELSEWHERE = 3
"""Processors drawn at random, beside those of its neighbours, that a chain task may move to."""


def polish(
    problem: Problem,
    schedule: Schedule,
    /,
    *,
    objective: str = "makespan",
    time_limit: float = 10.0,
    seed: int = 0,
    bound: int = 0,
    kicks: bool = False,
    effort: int | None = None,
) -> Result:
    """Improve the orders of a valid ``schedule`` by moves on its critical chain (see the module text)
    for at most ``time_limit`` seconds, or until the objective reaches a known lower ``bound``. With
    ``kicks``, a local optimum does not end the search: a few random tasks of the best schedule so far
    are moved (to another allowed processor, or past the next task on theirs) and the search goes on
    from there, until the time limit (iterated local search; `solvers.ils.ils`). With ``effort``,
    the search also stops once it has timed that many tasks (`_Timing.work`: a full timing or a scan of the chain
    counts every task, a trial the tasks it re-times): a limit that does not depend on the machine's
    speed, so the result does not either. The result is valid and never worse than ``schedule``;
    ``info`` counts the moves tried, kept and taken sideways (and the kicks), the tasks timed
    (``work``), and says whether a local optimum was reached. ``ValueError`` for an invalid schedule."""
    t0 = time.perf_counter()
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    problem.require_rigid("polish")
    if violations(problem, schedule, limit=1):
        raise ValueError("polish: the schedule to start from is not valid")
    orders = schedule.orders(problem)
    timing = _Timing(problem, orders)
    current = timing.reset(orders)
    if violations(problem, current, limit=1):  # earliest starts broke something (zero-length ties): keep it
        current = schedule
    key = _score(problem, current, objective)
    capacity, delta = problem.capacity, problem.mem_delta
    limited = set(np.flatnonzero(capacity <= np.clip(delta, 0, None).sum()).tolist())  # may overflow
    rng = np.random.default_rng(seed)
    sink = np.bincount(problem.edges[:, 0], minlength=problem.num_tasks) == 0
    # tasks that may change processor: more than one allowed, and no affinity group to keep together
    movable = (problem.allowed.sum(axis=1) > 1) & (problem.group < 0)
    # each task's predecessors and successors, built once: a processor move looks them up per chain task
    near = neighbours(problem.num_tasks, problem.edges) if movable.any() else None
    tried = kept = sideways = full = restarts = 0
    optimum = False
    tabu: dict[int, int] = {}  # task -> the step until which it stays where a sideways move put it
    best = (key, orders, current)
    step = 0
    size = problem.num_tasks + len(problem.edges)

    def spent() -> bool:
        return time.perf_counter() - t0 >= time_limit or (effort is not None and timing.work >= effort)

    while not spent() and key[0] > bound:
        step += 1
        timing.work += size  # the chain, and each task's place
        chain = tight_chain(problem, current, objective)
        where = {t: (q, k) for q, order in enumerate(orders) for k, t in enumerate(order)}
        far, close = _moves(chain, where, orders)
        across = [] if near is None else _across(problem, current, chain, where, orders, movable, near, rng)
        rng.shuffle(across)
        rng.shuffle(far)
        rng.shuffle(close)
        # the long moves first, tasks without successors first among them (moving one delays no
        # other task): one of them may shorten several chains at once
        far.sort(key=lambda m: not sink[orders[m[0]][m[1]]])
        moves = across + [(q, k, q, to) for q, k, to in far + close]
        better = level = None
        timed_here, ranked, cut = 0, False, False
        for i, (q, k, dest, to) in enumerate(moves):
            if timed_here == FIRST and not ranked:
                # none of the first few did: the likely ones of the rest first, by the longest path
                # through the moved task at today's times (stable: the order above breaks ties)
                tail, ranked = timing.tails(), True
                moves[i:] = sorted(moves[i:], key=lambda m: timing.estimate(orders, *m, tail))
                q, k, dest, to = moves[i]
            if spent():
                cut = True  # the step ends unfinished: no sign of a local optimum
                break
            task = orders[q][k]
            if tabu.get(task, 0) >= step:
                continue
            trial = list(orders)
            source = list(orders[q])
            source.pop(k)
            order = source if dest == q else list(orders[dest])
            order.insert(to, task)
            trial[q], trial[dest] = source, order
            if _overflows(problem, trial, {q, dest} & limited):
                continue
            tried += 1
            timed_here += 1
            scored = timing.trial(orders, q, k, dest, to, objective, key[0] if objective == "makespan" else None)
            if scored is False or scored is WORSE:  # the orders deadlock, or the move lengthens the schedule
                continue
            if scored is None:  # the keys of the timing order ran out of room: time it in full
                full += 1
                timing.work += size
                try:
                    timed = time_orders(problem, trial)
                except Deadlock:
                    continue
                scored = _score(problem, timed, objective), None
            score, made = scored
            if score < key:
                better = (trial, made, score)
                break
            if score[0] == key[0] and level is None:
                level = (trial, made, score, task)
        if better is not None:
            orders, made, key = better
            current = timing.apply(made, orders) if made is not None else timing.reset(orders)
            kept += 1
            if key < best[0]:
                best, sideways = (key, orders, current), 0
            continue
        if cut:
            break
        if level is None or sideways >= SIDEWAYS:
            optimum = optimum or level is None
            if not kicks:
                break
            kicked = _kick(problem, timing, best[1], best[2], movable, rng, limited)
            if kicked is None:
                break
            orders, current = kicked
            key = _score(problem, current, objective)
            tabu.clear()
            sideways = 0
            restarts += 1
            continue
        orders, made, key, moved = level  # the same score by another chain: walk the plateau
        current = timing.apply(made, orders) if made is not None else timing.reset(orders)
        tabu[moved] = step + TABU
        sideways += 1
    key, orders, current = best
    value, given = key[0], schedule.objective(problem, objective)
    if value > given or violations(problem, current, limit=1):
        # earliest starts can lengthen a span (a first task moved earlier): keep what was given
        current, value = schedule, given
    info = {"tried": tried, "timed_in_full": full, "kept": kept, "sideways": sideways, "local_optimum": optimum}
    info["work"] = timing.work
    if kicks:
        info["kicks"] = restarts
    return Result(current, "feasible", value, 0, time.perf_counter() - t0, "polish", objective, info)


def _kick(problem, timing, orders, schedule, movable, rng, limited):
    """Orders near ``orders``: a few random tasks moved to a random allowed processor (where its
    start puts them there) or swapped with the next task on theirs; timed (``timing`` reset to them).
    None when 20 draws all deadlock or overflow memory."""
    n = problem.num_tasks
    for _ in range(20):
        trial = [list(o) for o in orders]
        proc = schedule.processor.tolist()
        for _ in range(int(rng.integers(1, 4))):
            t = int(rng.integers(n))
            q = proc[t]
            k = trial[q].index(t)
            if movable[t] and rng.random() < 0.5:
                dest = int(rng.choice(np.flatnonzero(problem.allowed[t])))
                if dest == q:
                    continue
                trial[q].pop(k)
                trial[dest].insert(_place_by_start(schedule.start, trial[dest], t), t)
                proc[t] = dest
            elif k + 1 < len(trial[q]):
                trial[q][k], trial[q][k + 1] = trial[q][k + 1], trial[q][k]
        if _overflows(problem, trial, limited):
            continue
        try:
            return trial, timing.reset(trial)
        except Deadlock:
            continue
    return None


def _overflows(problem: Problem, orders: list[list[int]], processors) -> bool:
    """Whether any of ``processors`` goes over its memory capacity running its order: tasks on a
    processor run one after another, so its peak is the largest running sum of their changes."""
    delta, capacity = problem.mem_delta, problem.capacity
    return any(np.cumsum(delta[orders[r]]).max(initial=0) > capacity[r] for r in processors)


def _place_by_start(start: np.ndarray, order: list[int], t: int) -> int:
    """Where task ``t``'s start puts it in ``order`` (after the tasks that start no later)."""
    return int(np.searchsorted(start[order], start[t], side="right")) if order else 0


def _score(problem: Problem, schedule: Schedule, objective: str) -> tuple[int, int]:
    """The objective, then the sum of per-processor spans (``span``) or last ends (``makespan``)."""
    if objective == "span":
        spans = schedule.spans(problem)
        return int(spans.max(initial=0)), int(spans.sum())
    last = np.zeros(problem.num_processors, dtype=np.int64)
    np.maximum.at(last, schedule.processor, schedule.end(problem))
    return int(last.max(initial=0)), int(last.sum())


def _moves(
    chain: list[int], where: dict[int, tuple[int, int]], orders: list[list[int]]
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(processor, position, new position) of each move on the blocks of the critical ``chain``: those
    to the end of the processor, and the others. ``where`` maps a task to (processor, position)."""
    blocks: list[list[int]] = []  # [processor, first position, last position]
    for t in chain:
        q, k = where[t]
        if blocks and blocks[-1][0] == q and blocks[-1][2] == k - 1:
            blocks[-1][2] = k
        else:
            blocks.append([q, k, k])
    far, moves = [], []
    for q, a, b in blocks:
        if b == a:
            continue
        last = len(orders[q]) - 1
        for k in range(a, b):
            moves += [(q, k, to) for to in range(b, min(b + REACH, last) + 1)]
            if b + REACH < last:
                far.append((q, k, last))
        moves += [(q, k, a) for k in range(a + 1, b + 1)]
    return far, moves


def _across(
    problem: Problem,
    schedule: Schedule,
    chain: list[int],
    where: dict[int, tuple[int, int]],
    orders: list[list[int]],
    movable: np.ndarray,
    near: tuple[np.ndarray, np.ndarray],
    rng: np.random.Generator,
) -> list[tuple[int, int, int, int]]:
    """(processor, position, new processor, position there) of each move of a task of the critical
    ``chain`` to another processor (see the module text). ``near`` holds each task's predecessors and
    successors, as (indptr, tasks)."""
    indptr, tasks = near
    start, P = schedule.start, problem.num_processors
    out = []
    for t in chain:
        if not movable[t]:
            continue
        q, k = where[t]
        beside = schedule.processor[tasks[indptr[t] : indptr[t + 1]]].tolist()
        for dest in set(beside) | set(rng.integers(0, P, size=ELSEWHERE).tolist()):
            if dest == q or not problem.allowed[t, dest]:
                continue
            at = _place_by_start(start, orders[dest], t)
            out += [(q, k, dest, to) for to in {at, max(at - 1, 0)}]
    return out


def _neighbours(orders: list[list[int]], q: int, k: int, dest: int, to: int):
    """For the move of the ``k``-th task ``t`` of processor ``q`` to place ``to`` of ``dest``: ``t``,
    the tasks before and after it on ``q`` (``a``, ``b``), the order it goes into without it
    (``rest``), and the tasks that will be before and after it there (``c``, ``d``); -1 for none."""
    order = orders[q]
    t = order[k]
    a = order[k - 1] if k else -1
    b = order[k + 1] if k + 1 < len(order) else -1
    rest = order[:k] + order[k + 1 :] if dest == q else orders[dest]
    c = rest[to - 1] if to else -1
    d = rest[to] if to < len(rest) else -1
    return t, a, b, rest, c, d


class _Timing:
    """The earliest-start timing of the current orders, kept up to date move by move.

    A move changes the processor neighbours of three tasks: the moved task, the one that followed it,
    and the one that now follows it. Only those and what they reach can start at another time, so a
    trial re-times them in a topological order, following a task's successors only where its end
    changed. That order is the one the last full timing used (`solvers.simulate.timed_in_order`), with
    the moved task given a key between its new predecessors' and successors'. Where no such key
    exists, the move reverses some dependence: `_reorder` moves the tasks concerned behind it, or
    finds that the move closes a cycle (a deadlock)."""

    def __init__(self, problem: Problem, orders: list[list[int]]):
        n = problem.num_tasks
        src, dst, delay = problem.edges[:, 0].tolist(), problem.edges[:, 1].tolist(), problem.delay.tolist()
        self.preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        self.delays: list[dict[int, int]] = [{} for _ in range(n)]  # u -> {v: the edge's delay}
        for u, v, d in zip(src, dst, delay, strict=True):
            self.preds[v].append((u, d))
            self.succs[u].append(v)
            self.delays[u][v] = d
        self.link = None if problem.link is None else problem.link.tolist()
        self.duration_on = None if problem.duration_on is None else problem.duration_on.tolist()
        self.problem = problem
        self.work = 0  # tasks timed so far: a full timing counts all of them, a trial those it re-times
        self.reset(orders)

    def reset(self, orders: list[list[int]]) -> Schedule:
        """Time ``orders`` in full (`Deadlock` if they cannot run) and return the schedule."""
        schedule, timed = timed_in_order(self.problem, orders)
        self.work += len(timed) + len(self.problem.edges)
        self.proc, self.start = schedule.processor.tolist(), schedule.start.tolist()
        self.dur = self.problem.durations_on(schedule.processor).tolist()
        self.key = [0.0] * len(self.proc)
        for i, t in enumerate(timed):
            self.key[t] = float(i)
        self.prev, self.next = [-1] * len(self.proc), [-1] * len(self.proc)
        for order in orders:
            for a, b in zip(order, order[1:], strict=False):
                self.next[a], self.prev[b] = b, a
        self.pos, self.after = [0] * len(self.proc), [0] * len(self.proc)
        self._places(orders, range(len(orders)))
        return schedule

    def _places(self, orders: list[list[int]], processors) -> None:
        """Each task's place in its processor's order, and the work after it there, for the given
        ``processors``."""
        dur = self.dur
        for r in processors:
            order = orders[r]
            work = 0
            for i in range(len(order) - 1, -1, -1):
                v = order[i]
                self.pos[v], self.after[v] = i, work
                work += dur[v]

    def trial(
        self, orders: list[list[int]], q: int, k: int, dest: int, to: int, objective: str, cutoff: int | None = None
    ):
        """The score (as `_score`) of moving the ``k``-th task of processor ``q`` to place ``to`` of
        ``dest`` (counted without the task where ``dest == q``), and what `apply` needs to make it;
        False where the moved orders deadlock, None where the move needs a full timing, and `WORSE`
        as soon as the makespan is sure to exceed ``cutoff``: a re-timed task's end plus the work after
        it on its processor is more."""
        t, a, b, rest, c, d = _neighbours(orders, q, k, dest, to)
        order = orders[q]
        prev, nxt = {t: c}, {t: d}  # the processor neighbours that change
        if a >= 0:
            nxt[a] = b
        if b >= 0:
            prev[b] = a
        if c >= 0:
            nxt[c] = t
        if d >= 0:
            prev[d] = t
        key = self.key
        before = [u for u, _ in self.preds[t]] + ([c] if c >= 0 else [])  # what must come before t
        after = self.succs[t] + ([d] if d >= 0 else [])
        lo = max((key[u] for u in before), default=None)
        hi = min((key[v] for v in after), default=None)
        moved: dict[int, float] = {}  # task -> its key in the new order, where it changes
        if lo is None:
            moved[t] = 0.0 if hi is None else hi - 1.0
        elif hi is None:
            moved[t] = lo + 1.0
        elif lo < (lo + hi) / 2 < hi:
            moved[t] = (lo + hi) / 2
        else:  # something t must precede comes before something it must follow: reorder, or deadlock
            moved = self._reorder(t, lo, set(before), after, nxt)
            if not moved:
                return moved  # False: the orders deadlock; None: time them in full
        kt = moved[t]
        proc, start, dur, link = self.proc, self.start, self.dur, self.link
        dt = self.duration_on[t][dest] if self.duration_on is not None else dur[t]
        new: dict[int, int] = {}  # tasks whose start changes -> new start
        heap = [(kt, t)] + [(moved.get(x, key[x]), x) for x in (b, d) if x >= 0]
        heapq.heapify(heap)
        queued = {t, b, d}
        self.work += len(orders)  # the score, below
        while heap:
            _, v = heapq.heappop(heap)
            self.work += 1
            pv = dest if v == t else proc[v]
            p = prev[v] if v in prev else self.prev[v]
            s = (new.get(p, start[p]) + (dt if p == t else dur[p])) if p >= 0 else 0
            for u, de in self.preds[v]:
                pu = dest if u == t else proc[u]
                e = new.get(u, start[u]) + (dt if u == t else dur[u])
                if pu != pv:
                    e += de if link is None else de * link[pu][pv]
                if e > s:
                    s = e
            if v != t and s == start[v]:
                continue  # nothing after it moves
            if cutoff is not None and v != t:
                rest_work = self.after[v]
                i = self.pos[v]
                if pv == q and i < k:
                    rest_work -= dur[t]  # t has left from behind it
                if pv == dest and (i - (q == dest and i > k)) < to:
                    rest_work += dt  # t now comes behind it
                if s + dur[v] + rest_work > cutoff:
                    return WORSE
            new[v] = s
            w = nxt[v] if v in nxt else self.next[v]
            for x in self.succs[v] + ([w] if w >= 0 else []):
                if x not in queued:
                    queued.add(x)
                    heapq.heappush(heap, (moved.get(x, key[x]), x))
        firsts, lasts = [], []
        for r, rorder in enumerate(orders):
            if r == dest:
                first, last = t if c < 0 else rest[0], t if d < 0 else rest[-1]
            elif r == q:
                if len(order) == 1:
                    continue
                first, last = b if a < 0 else order[0], a if b < 0 else order[-1]
            elif rorder:
                first, last = rorder[0], rorder[-1]
            else:
                continue
            firsts.append(new.get(first, start[first]))
            lasts.append(new.get(last, start[last]) + (dt if last == t else dur[last]))
        if objective == "span":
            spans = [e - min(f, e) if e > 0 else 0 for f, e in zip(firsts, lasts, strict=True)]
            score = (max(spans, default=0), sum(spans))
        else:
            score = (max(lasts, default=0), sum(lasts))
        return score, (t, dest, dt, moved, new, prev, nxt)

    def _reorder(self, t: int, lo: float, before: set[int], after: list[int], nxt: dict[int, int]):
        """New keys for a move after which ``t`` must follow ``before`` (the largest key of which is
        ``lo``) and precede ``after``: t just after ``lo``, then what it must precede and what that
        reaches among the keys up to ``lo``, in their old order. False where that reaches ``before``
        (the move closes a cycle: a deadlock); None where the keys have no room left."""
        key = self.key
        stack = [v for v in after if key[v] <= lo]
        shift = set(stack)
        while stack:
            v = stack.pop()
            if v in before:
                return False
            w = nxt[v] if v in nxt else self.next[v]
            for x in self.succs[v] + ([w] if w >= 0 else []):
                if x != t and x not in shift and key[x] <= lo:
                    shift.add(x)
                    stack.append(x)
        room = min((x for x in key if x > lo), default=lo + len(shift) + 2.0)
        step = (room - lo) / (len(shift) + 2)
        moved = {t: lo + step}
        for i, v in enumerate(sorted(shift, key=key.__getitem__)):
            moved[v] = lo + (i + 2) * step
        keys = [lo, *moved.values(), room]
        if any(x >= y for x, y in zip(keys, keys[1:], strict=False)):
            return None
        return moved

    def apply(self, made, orders: list[list[int]]) -> Schedule:
        """Make a move `trial` scored, whose orders are ``orders``; the schedule it gives."""
        t, dest, dt, moved, new, prev, nxt = made
        source = self.proc[t]
        self.proc[t], self.dur[t] = dest, dt
        self._places(orders, {source, dest})
        for v, k in moved.items():
            self.key[v] = k
        for v, s in new.items():
            self.start[v] = s
        for v, p in prev.items():
            self.prev[v] = p
        for v, w in nxt.items():
            self.next[v] = w
        return Schedule(processor=np.asarray(self.proc, dtype=np.int64), start=np.asarray(self.start, dtype=np.int64))

    def tails(self) -> list[int]:
        """Per task: the longest way from its start to the end of the schedule (its duration, then
        its processor successor's tail or a successor's paid delay and tail)."""
        n = len(self.proc)
        self.work += n + len(self.problem.edges)
        proc = np.asarray(self.proc, dtype=np.int64)
        dur = np.asarray(self.dur, dtype=np.int64)
        chained = np.flatnonzero(np.asarray(self.next) >= 0)
        chain = np.stack([chained, np.asarray(self.next)[chained]], axis=1)
        edges = np.concatenate([self.problem.edges, chain]).reshape(-1, 2)
        weight = np.concatenate([self.problem.edge_delays(proc), np.zeros(len(chain), dtype=np.int64)])
        order = np.argsort(np.asarray(self.key), kind="stable")  # a topological order of those edges
        return (dur + longest_to_sinks(order, n, edges, dur, weight)).tolist()

    def estimate(self, orders: list[list[int]], q: int, k: int, dest: int, to: int, tail: list[int]) -> int:
        """The longest path through the moved task and through its old neighbours, with the other
        tasks at their current times: a cheap guess at the move's makespan, to try likely moves first."""
        t, a, b, _, c, d = _neighbours(orders, q, k, dest, to)
        start, dur, proc, link = self.start, self.dur, self.proc, self.link
        dt = self.duration_on[t][dest] if self.duration_on is not None else dur[t]
        head = start[c] + dur[c] if c >= 0 else 0
        for u, de in self.preds[t]:
            pu = proc[u]
            e = start[u] + dur[u] + (0 if pu == dest else de if link is None else de * link[pu][dest])
            if e > head:
                head = e
        after = tail[d] if d >= 0 else 0
        for v in self.succs[t]:
            pv = proc[v]
            de = self.delays[t][v]
            e = tail[v] + (0 if pv == dest else de if link is None else de * link[dest][pv])
            if e > after:
                after = e
        joined = start[a] + dur[a] + tail[b] if a >= 0 and b >= 0 else 0
        return max(head + dt + after, joined)
