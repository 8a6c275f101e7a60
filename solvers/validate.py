"""The one validator. Every schedule a solver, a template or the CLI returns passes through it.

Example
-------
>>> from solvers import Problem, Schedule, validate
>>> p = Problem(duration=[2, 3], num_processors=2, edges=[[0, 1]], delay=[1])
>>> validate(p, Schedule(processor=[0, 1], start=[0, 2]))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
solvers.validate.InvalidSchedule: precedence: task 1 starts at 2 but task 0 ends at 2 and the transfer ... (short by 1)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.problem import Problem, Schedule


@dataclass(frozen=True)
class Violation:
    """One broken constraint: which ``constraint``, which ``task`` and by how much (``amount``)."""

    constraint: str
    task: int
    amount: int
    message: str

    def __str__(self) -> str:
        return f"{self.constraint}: {self.message}"


class InvalidSchedule(ValueError):
    """Raised by `validate`; ``violations`` lists what is broken (first ones first)."""

    def __init__(self, violations: list[Violation]):
        self.violations = violations
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        super().__init__(f"{violations[0]}{more}")


def violations(problem: Problem, schedule: Schedule, limit: int = 20) -> list[Violation]:
    """All broken constraints (at most ``limit`` per kind), in the order: shape, mode, processor,
    start, affinity, precedence, overlap (or cores, for a moldable problem), memory."""
    n, lab = problem.num_tasks, problem.task_label
    if len(schedule.start) != n:
        return [
            Violation(
                "shape",
                -1,
                abs(len(schedule.start) - n),
                f"the schedule has {len(schedule.start)} tasks, the problem {n}",
            )
        ]
    out: list[Violation] = []
    proc, start = schedule.processor, schedule.start
    bad = np.flatnonzero((schedule.mode < 0) | (schedule.mode >= problem.mode_count))
    for t in bad[:limit].tolist():
        out.append(Violation("mode", t, 1, f"{lab(t)} runs in mode {schedule.mode[t]}, which it does not have"))
    if len(bad):
        return out
    end = schedule.end(problem)

    bad = np.flatnonzero((proc < 0) | (proc >= problem.num_processors))
    for t in bad[:limit].tolist():
        out.append(Violation("processor", t, 1, f"{lab(t)} is on processor {proc[t]}, which does not exist"))
    if len(bad):
        return out
    bad = np.flatnonzero(~problem.allowed[np.arange(n), proc])
    for t in bad[:limit].tolist():
        out.append(Violation("processor", t, 1, f"{lab(t)} may not run on {problem.processor_label(int(proc[t]))}"))
    bad = np.flatnonzero(start < 0)
    for t in bad[:limit].tolist():
        out.append(Violation("start", t, int(-start[t]), f"{lab(t)} starts at {start[t]} < 0"))

    grouped = np.flatnonzero(problem.group >= 0)
    if len(grouped):
        g = problem.group[grouped]
        order = np.argsort(g, kind="stable")
        g, members = g[order], grouped[order]
        same = g[1:] == g[:-1]
        split = np.flatnonzero(same & (proc[members[1:]] != proc[members[:-1]]))
        for k in split[:limit].tolist():
            a, b = int(members[k]), int(members[k + 1])
            out.append(
                Violation(
                    "affinity",
                    b,
                    1,
                    f"{lab(b)} is on {problem.processor_label(int(proc[b]))} "
                    f"but {lab(a)} of the same group is on {problem.processor_label(int(proc[a]))}",
                )
            )

    if len(problem.edges):
        u, v = problem.edges[:, 0], problem.edges[:, 1]
        need = end[u] + problem.edge_delays(proc)
        short = need - start[v]
        for e in np.flatnonzero(short > 0)[:limit].tolist():
            a, b, d = int(u[e]), int(v[e]), int(need[e] - end[u[e]])
            extra = f" and the transfer takes {d} more" if d else ""
            out.append(
                Violation(
                    "precedence",
                    b,
                    int(short[e]),
                    f"{lab(b)} starts at {start[b]} but {lab(a)} ends at {end[a]}{extra} (short by {short[e]})",
                )
            )

    if problem.is_moldable:
        out.extend(_core_violations(problem, schedule, limit))
    else:
        out.extend(_overlap_violations(problem, schedule, limit))
    out.extend(memory_violations(problem, schedule, limit))
    return out


def _core_violations(problem: Problem, schedule: Schedule, limit: int) -> list[Violation]:
    """Moldable problems: the cores in use on a processor never exceed its width (a task holds its
    cores from its start to its end; at equal times ends come first; zero-length tasks hold none)."""
    lab, out = problem.task_label, []
    proc, start, end, cores = schedule.processor, schedule.start, schedule.end(problem), schedule.cores(problem)
    wide = np.flatnonzero(cores > problem.width[proc])
    for t in wide[:limit].tolist():
        out.append(
            Violation(
                "cores",
                t,
                int(cores[t] - problem.width[proc[t]]),
                f"{lab(t)} uses {cores[t]} cores on {problem.processor_label(int(proc[t]))}, which has "
                f"{problem.width[proc[t]]}",
            )
        )
    busy = np.flatnonzero(end > start)
    times = np.concatenate([start[busy], end[busy]])
    delta = np.concatenate([cores[busy], -cores[busy]])
    procs = np.concatenate([proc[busy], proc[busy]])
    task = np.concatenate([busy, busy])
    order = np.lexsort((delta, times, procs))
    times, delta, procs, task = times[order], delta[order], procs[order], task[order]
    bounds = np.searchsorted(procs, np.arange(problem.num_processors + 1))
    for q in range(problem.num_processors):
        lo, hi = bounds[q], bounds[q + 1]
        use = np.cumsum(delta[lo:hi])
        over = np.flatnonzero(use > problem.width[q])
        for k in over[:1].tolist():
            t = int(task[lo + k])
            out.append(
                Violation(
                    "cores",
                    t,
                    int(use[k] - problem.width[q]),
                    f"{lab(t)} starts at {times[lo + k]} on {problem.processor_label(q)} while {use[k] - cores[t]} of "
                    f"its {problem.width[q]} cores are in use and it needs {cores[t]}",
                )
            )
        if len(out) >= limit:
            break
    return out


def _overlap_violations(problem: Problem, schedule: Schedule, limit: int) -> list[Violation]:
    """One task at a time per processor (tasks of zero length overlap nothing)."""
    lab, out = problem.task_label, []
    proc, start, end = schedule.processor, schedule.start, schedule.end(problem)
    order = np.lexsort((start, proc))
    p_sorted, s_sorted, e_sorted = proc[order], start[order], end[order]
    # a task overlaps an earlier one on its processor when it starts before the latest end so far
    nonzero = problem.duration[order] > 0
    o2, p2, s2, e2 = order[nonzero], p_sorted[nonzero], s_sorted[nonzero], e_sorted[nonzero]
    if len(o2) > 1:
        newproc = np.r_[True, p2[1:] != p2[:-1]]
        # running max of end within each processor segment
        seg = np.cumsum(newproc) - 1
        offset = seg * (int(e2.max()) + 1)
        running = np.maximum.accumulate(e2 + offset) - offset
        prev_end = np.r_[np.iinfo(np.int64).min, running[:-1]]
        clash = np.flatnonzero(~newproc & (s2 < prev_end))
        for k in clash[:limit].tolist():
            t = int(o2[k])
            # the task it overlaps: the latest-ending earlier task on that processor segment
            lo = int(np.flatnonzero(newproc[: k + 1])[-1])
            a = int(o2[lo + int(np.argmax(e2[lo:k]))])
            out.append(
                Violation(
                    "overlap",
                    t,
                    int(prev_end[k] - s2[k]),
                    f"{lab(t)} starts at {s2[k]} on {problem.processor_label(int(p2[k]))} "
                    f"while {lab(a)} runs until {end[a]} (overlap {prev_end[k] - s2[k]})",
                )
            )
    return out


def memory_profile(problem: Problem, schedule: Schedule) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per processor ``(times, usage, task)``: usage after each event, in time order. Allocation
    (positive delta) happens at a task's start, release (negative delta) at its end; at equal
    times releases come first."""
    mem = problem.mem_delta
    moving = np.flatnonzero(mem != 0)
    t_ev = np.where(mem[moving] > 0, schedule.start[moving], schedule.end(problem)[moving])
    p_ev = schedule.processor[moving]
    d_ev = mem[moving]
    order = np.lexsort((d_ev > 0, t_ev, p_ev))
    t_ev, p_ev, d_ev, task = t_ev[order], p_ev[order], d_ev[order], moving[order]
    out = []
    bounds = np.searchsorted(p_ev, np.arange(problem.num_processors + 1))
    for q in range(problem.num_processors):
        lo, hi = bounds[q], bounds[q + 1]
        out.append((t_ev[lo:hi], np.cumsum(d_ev[lo:hi]), task[lo:hi]))
    return out


def peak_memory(problem: Problem, schedule: Schedule) -> np.ndarray:
    """Peak memory per processor (0 for a processor without allocations)."""
    return np.array([int(u.max(initial=0)) for _, u, _ in memory_profile(problem, schedule)], dtype=np.int64)


def memory_violations(problem: Problem, schedule: Schedule, limit: int = 20) -> list[Violation]:
    out = []
    for q, (_, usage, task) in enumerate(memory_profile(problem, schedule)):
        cap = int(problem.capacity[q])
        over = np.flatnonzero(usage > cap)
        for k in over[:1].tolist():  # the first overflow per processor says enough
            t = int(task[k])
            out.append(
                Violation(
                    "memory",
                    t,
                    int(usage[k] - cap),
                    f"{problem.task_label(t)} raises memory on {problem.processor_label(q)} "
                    f"to {usage[k]}, over the capacity {cap} by {usage[k] - cap}",
                )
            )
        if len(out) >= limit:
            break
    return out


def validate(problem: Problem, schedule: Schedule) -> None:
    """Raise `InvalidSchedule` naming the task, the constraint and the amount if ``schedule`` breaks
    precedence (with transfer delays), processor eligibility, overlap (for moldable problems: the
    cores in use against each processor's width, and each task's mode), memory or affinity."""
    found = violations(problem, schedule)
    if found:
        raise InvalidSchedule(found)
