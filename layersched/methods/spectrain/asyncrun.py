"""Asynchronous pipeline training (PipeDream-style 1F1B without a flush) in real processes.

The multi-process counterpart of the single-process emulation in `layersched.methods.spectrain.asyncpipe`:
one process per stage (gloo on the CPU, NCCL on GPUs), activations and gradients exchanged
point-to-point, every micro-batch a mini-batch, and each stage's weights updated right after that
mini-batch's backward (SGD with momentum, as ``torch.optim.SGD`` computes it).

Schedule
    Every rank runs its action list from the ``1f1b`` template (`layersched.schedule.templates`) over
    ``steps`` micro-batches, without a flush (see `rank_orders`): rank ``s`` of ``p`` starts with
    ``p - 1 - s`` warm-up forwards, then alternates one forward and one backward, each backward
    followed at once by the stage's update, and ends with the cool-down backwards. In ``sync`` mode
    the pipeline drains after every mini-batch instead: the ``1f1b`` order of one micro-batch,
    repeated, which is plain sequential SGD.

Versions
    Nothing here computes which weight version a pass sees: a forward runs on the rank's weights
    as they are when it runs, after the updates of the backwards done so far. Each update makes
    new tensors (versions are immutable), so holding a version costs memory only once the live
    weights have moved on. Per mode:

    - ``sync`` and ``stale``: forward and backward on the current weights (in ``stale`` the
      backward's weights are newer than the forward's: PipeDream's inconsistency);
    - ``stash``: each forward keeps the version it used until its mini-batch's backward, which runs
      on it (PipeDream's weight stashing); the update still goes to the current weights;
    - ``spectrain``: the forward runs on the prediction ``W - s * lr * v`` (``v`` the momentum
      buffer), with ``s`` the rank's mini-batches in flight when the forward runs (forwards done
      minus backwards done): the updates that will land between the forward and its own backward;
      the backward runs on the current weights.

    The backward recomputes the stage's forward from its saved input with the backward's weights,
    as the emulation defines it, so a run reproduces `asyncpipe.train` to rounding.

Communication
    Receives are posted one mini-batch ahead (``irecv``), sends are ``isend``. Each neighbouring
    pair of ranks has two process groups, one per direction (activations down, gradients up): each
    carries its transfers in mini-batch order on both ends, so with NCCL, which ignores tags and
    runs a communicator's operations in order, no transfer waits behind one in the other direction.
    The tag is the mini-batch index.

Example
-------
>>> rank_orders("stash", num_stages=2, steps=3)
[['0F0', '0F1', '0B0', '0F2', '0B1', '0B2'], ['1F0', '1B0', '1F1', '1B1', '1F2', '1B2']]
>>> rank_orders("sync", num_stages=2, steps=2)[0]
['0F0', '0B0', '0F1', '0B1']
>>> result = train_async("spectrain", steps=20, num_stages=2)  # doctest: +SKIP
>>> len(result.losses), [r.lag for r in result.ranks]  # doctest: +SKIP
(20, [1, 0])

From the command line (``--help`` for the options)::

    python -m layersched.cli.asyncrun --mode spectrain --mode sync --steps 300
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from layersched.methods.spectrain.asyncpipe import MODES, Task, _Stage, evaluate, one_f_one_b, teacher_student
from layersched.runtime.launch import check_device, run_processes
from layersched.schedule.graph import parse_action

STAGE_BYTES = 96 * 2**20
"""Host memory a stage's process takes (the teacher-student task is small): 120 stages lowered the 2-core
VM's available memory by 12.3 GB at their peak, 98 MiB a process; 200 stages ran in its 22 GiB."""


@dataclass
class RankReport:
    """What one rank (stage) reports for one run.

    ``losses``: per mini-batch, the training loss its forward saw (last stage only, else None);
    ``weights``: the stage's final weights; ``weight_bytes``: their size; ``lag``: the most of its
    mini-batches in flight at a forward (the weight versions its forwards ran behind);
    ``stash_copies``: the most stashed weight versions held at once besides the live weights;
    ``extra_weight_bytes``: the most weight memory held at once besides the live weights and the
    momentum (stashed versions, or SpecTrain's predicted copy); ``step_times``: per mini-batch, the
    seconds from the previous update's end (or the start) to the end of this one's update.
    """

    rank: int
    losses: list[float] | None
    weights: dict[str, torch.Tensor]
    weight_bytes: int
    lag: int
    stash_copies: int
    extra_weight_bytes: int
    step_times: list[float]


@dataclass
class AsyncRunResult:
    """One run of `train_async`: its settings and every rank's `RankReport`, in rank order."""

    mode: str
    steps: int
    lr: float
    momentum: float
    task_options: dict
    ranks: list[RankReport]

    @property
    def losses(self) -> list[float]:
        """Per mini-batch, the training loss (from the last stage)."""
        return self.ranks[-1].losses or []

    @property
    def weights(self) -> list[dict[str, torch.Tensor]]:
        """Per stage, the final weights."""
        return [r.weights for r in self.ranks]

    def task(self) -> Task:
        """The task the run trained (rebuilt from its options)."""
        return teacher_student(**self.task_options)

    def evaluate(self, task: Task | None = None) -> tuple[float, float]:
        """Test loss and accuracy of the final weights (`asyncpipe.evaluate`)."""
        task = task or self.task()
        return evaluate(list(zip(task.stages, self.weights, strict=True)), task)

    def memory(self) -> list[dict]:
        """Per stage, the measured extra weight memory (compare `asyncpipe.weight_memory`)."""
        return [
            {
                "stage": r.rank,
                "lag": r.lag,
                "weights": r.weight_bytes,
                "stash_copies": r.stash_copies,
                "extra_weight_bytes": r.extra_weight_bytes,
            }
            for r in self.ranks
        ]


def rank_orders(mode: str, num_stages: int, steps: int) -> list[list[str]]:
    """Per rank, the actions of a run: the ``1f1b`` template over ``steps`` micro-batches without a
    flush, or, in ``sync`` mode, its order for one micro-batch repeated ``steps`` times."""
    if mode != "sync":
        return one_f_one_b(num_stages, steps)
    return [
        [f"{s}{kind}{i}" for i in range(steps) for s, kind, _ in map(parse_action, order)]
        for order in one_f_one_b(num_stages, 1)
    ]


def train_async(
    mode: str,
    steps: int,
    *,
    num_stages: int = 4,
    lr: float = 0.05,
    momentum: float = 0.9,
    task_options: dict | None = None,
    timeout: float = 120.0,
    device: str = "cpu",
) -> AsyncRunResult:
    """Train `asyncpipe.teacher_student` (built from ``task_options``) for ``steps`` mini-batches as
    an asynchronous 1F1B pipeline in ``mode`` (one of `asyncpipe.MODES`), one process per stage.

    Every argument is checked (`ValueError`) before any process starts; a failed or timed-out run
    raises `layersched.runtime.launch.RunFailed`."""
    return train_async_modes(
        [mode],
        steps,
        num_stages=num_stages,
        lr=lr,
        momentum=momentum,
        task_options=task_options,
        timeout=timeout,
        device=device,
    )[mode]


def train_async_modes(
    modes: Sequence[str],
    steps: int,
    *,
    num_stages: int = 4,
    lr: float = 0.05,
    momentum: float = 0.9,
    task_options: dict | None = None,
    timeout: float = 120.0,
    device: str = "cpu",
) -> dict[str, AsyncRunResult]:
    """`train_async` for several modes, one after another in one set of processes (each from the
    same initial weights); the results by mode."""
    modes = [modes] if isinstance(modes, str) else list(dict.fromkeys(modes))
    options = _check(modes, steps, num_stages, lr, momentum, task_options, device)
    jobs = [(mode, rank_orders(mode, num_stages, steps)) for mode in modes]
    results = run_processes(
        _run_rank, num_stages, (options, jobs, lr, momentum), before=_prepare, timeout=timeout, device=device
    )
    return {
        mode: AsyncRunResult(mode, steps, lr, momentum, options, [results[r][j] for r in range(num_stages)])
        for j, mode in enumerate(modes)
    }


def _check(modes: list[str], steps, num_stages, lr, momentum, task_options: dict | None, device: str) -> dict:
    """Every argument, before any process starts; the task's options with ``num_stages``."""
    if not modes:
        raise ValueError(f"no mode given; valid: {', '.join(MODES)}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    for name, value in (("steps", steps), ("num_stages", num_stages)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    if not momentum >= 0:
        raise ValueError(f"momentum must be >= 0, got {momentum!r}")
    check_device(device, num_stages, STAGE_BYTES)  # one process per stage: the device, and memory for them
    options = dict(task_options or {})
    known = inspect.signature(teacher_student).parameters
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"task_options: unknown {', '.join(unknown)}; valid: {', '.join(known)}")
    if options.setdefault("num_stages", num_stages) != num_stages:
        raise ValueError(
            f"task_options num_stages={options['num_stages']} but num_stages={num_stages}; "
            "give one value (one process per stage)"
        )
    try:
        teacher_student(**options).batch(0)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"task_options {options}: {exc}") from None
    return options


def _prepare(world_size: int, options: dict, jobs: list, lr: float, momentum: float) -> tuple:
    """In each process, before the group starts: the task, rebuilt from its options."""
    return teacher_student(**options), jobs, lr, momentum


def _run_rank(rank: int, device: torch.device, state: tuple) -> list[RankReport]:
    """One rank: the process groups of its links, then every job's run in turn."""
    task, jobs, lr, momentum = state
    p = len(task.stages)
    # every process creates every group, in the same order; one per pair and direction
    down = [dist.new_group([s, s + 1]) for s in range(p - 1)]
    up = [dist.new_group([s, s + 1]) for s in range(p - 1)]
    _connect(rank, down, up, device)
    # each stage's output shape and dtype (every mini-batch has batch 0's); the backward pays the
    # one-time cost of a first gradient with given output gradients (a fraction of a second) here,
    # outside the timed runs
    h, shapes = task.batch(0)[0], []
    for module in task.stages:
        h = module(h)
        shapes.append((h.shape, h.dtype))
    torch.autograd.grad(h, list(task.stages[rank].parameters()), grad_outputs=torch.ones_like(h))
    return [_run_mode(rank, device, task, mode, orders[rank], shapes, down, up, lr, momentum) for mode, orders in jobs]


def _connect(rank: int, down: list, up: list, device: torch.device) -> None:
    """One small transfer in each of this rank's groups, every rank taking the groups in the same
    order: connections (NCCL communicators) are made here, without deadlock even where they start
    lazily, rather than by a run's first receive (which would block its rank) or in a timed step."""
    works = []
    for groups, sender in ((down, 0), (up, 1)):
        for s, group in enumerate(groups):
            src, dst = s + sender, s + 1 - sender
            if rank in (src, dst):
                t = torch.zeros(1, device=device)
                op = dist.isend(t, dst=dst, group=group) if rank == src else dist.irecv(t, src=src, group=group)
                works.append((op, t))
    for work, _ in works:
        work.wait()


class _Inbox:
    """Tensors from one peer over one group, taken in mini-batch order, each receive posted when the
    one before it is taken."""

    def __init__(self, peer: int, group, shape: torch.Size, dtype: torch.dtype, device: torch.device, count: int):
        self.peer, self.group, self.count = peer, group, count
        self.shape, self.dtype, self.device = shape, dtype, device
        self.pending: tuple[int, object, torch.Tensor] | None = None
        self._post(0)

    def _post(self, i: int) -> None:
        if i < self.count:
            buf = torch.empty(self.shape, dtype=self.dtype, device=self.device)
            self.pending = (i, dist.irecv(buf, src=self.peer, group=self.group, tag=i), buf)

    def take(self, i: int) -> torch.Tensor:
        assert self.pending is not None and self.pending[0] == i, f"expected mini-batch {i}, posted {self.pending}"
        _, work, buf = self.pending
        work.wait()
        self._post(i + 1)
        return buf


def _run_mode(
    rank: int,
    device: torch.device,
    task: Task,
    mode: str,
    order: list[str],
    shapes: list,
    down: list,
    up: list,
    lr: float,
    momentum: float,
) -> RankReport:
    """Run one rank's ``order`` in ``mode`` from the initial weights."""
    p = len(task.stages)
    first, last = rank == 0, rank == p - 1
    st = _Stage(task.stages[rank].to(device), lag=0)  # lag 0: keeps no old versions itself
    steps = sum(parse_action(a)[1] == "F" for a in order)
    acts = None if first else _Inbox(rank - 1, down[rank - 1], *shapes[rank - 1], device, steps)
    grads = None if last else _Inbox(rank + 1, up[rank], *shapes[rank], device, steps)
    sends: list[tuple[object, torch.Tensor]] = []
    saved: dict[int, tuple[torch.Tensor, torch.Tensor | None, dict | None]] = {}
    losses: list[float] = []
    forwards = backwards = lag = stash_copies = extra_bytes = 0

    def send(t: torch.Tensor, dst: int, group, tag: int) -> None:
        t = t.contiguous()
        sends[:] = [(w, x) for w, x in sends if not w.is_completed()]
        sends.append((dist.isend(t, dst=dst, group=group, tag=tag), t))

    def held(predicted: dict | None = None) -> None:
        """Track the weight memory held besides the live weights: stashed versions, a prediction."""
        nonlocal stash_copies, extra_bytes
        stashed = {id(w): w for _, _, w in saved.values() if w is not None and w is not st.weights}
        stash_copies = max(stash_copies, len(stashed))
        extra = [*stashed.values(), *([predicted] if predicted is not None else [])]
        extra_bytes = max(extra_bytes, sum(t.nbytes for w in extra for t in w.values()))

    dist.barrier()
    t0 = time.perf_counter()
    done = [0.0]
    for action in order:
        s, kind, i = parse_action(action)
        assert s == rank and i is not None, f"rank {rank} got action {action}"
        if kind == "F":
            x, y = task.batch(i) if first or last else (None, None)
            x = x.to(device) if first else acts.take(i)
            y = y.to(device) if last else None
            in_flight = forwards - backwards
            lag = max(lag, in_flight)
            w = st.weights
            if mode == "spectrain" and in_flight and st.momentum is not None:
                w = {k: w[k] - in_flight * lr * st.momentum[k] for k in w}
            with torch.no_grad():
                out = st.run(w, x)
            saved[i] = (x, y, st.weights if mode == "stash" else None)
            forwards += 1
            held(w if w is not st.weights else None)
            if last:
                losses.append(float(task.loss_fn(out, y)))
            else:
                send(out, rank + 1, down[rank], i)
        elif kind == "B":
            x, y, stashed = saved.pop(i)
            w = {k: v.detach().requires_grad_() for k, v in (stashed or st.weights).items()}
            h_in = x.detach().requires_grad_(not first)
            out = st.run(w, h_in)
            if last:
                out = task.loss_fn(out, y)
            tensors = list(w.values()) if first else [h_in, *w.values()]
            got = torch.autograd.grad(out, tensors, grad_outputs=None if last else grads.take(i))
            if not first:
                send(got[0], rank - 1, up[rank - 1], i)
            st.update(dict(zip(w, got[-len(w) :], strict=True)), lr, momentum)
            backwards += 1
            held()
            done.append(time.perf_counter() - t0)
        else:
            raise ValueError(f"rank {rank}: action {action} is neither a forward nor a fused backward")
    for work, _ in sends:
        work.wait()
    weights = {k: v.detach().cpu().clone() for k, v in st.weights.items()}
    return RankReport(
        rank,
        losses if last else None,
        weights,
        sum(t.nbytes for t in weights.values()),
        lag,
        stash_copies,
        extra_bytes,
        [b - a for a, b in zip(done, done[1:], strict=False)],
    )
