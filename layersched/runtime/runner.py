"""One rank of a run: build its stages, execute its action list, time every action.

A stage is a chain of the model's layers. Each layer runs on a detached copy of its input, so the
backward splits cleanly: ``I`` computes, layer by layer from the last, the gradient of each layer's
input (``torch.autograd.backward(..., inputs=[input], retain_graph=True)``) and sends the stage's
input gradient on; ``W`` then computes each layer's weight gradients from the retained graph and
the saved output gradients; ``B`` does both in one pass. The profiler times layers the same way.
With ``RunConfig.stage_factory`` set to the out-of-order method's side-stream stage
(`layersched.methods.ooo.wstream.SideStreamStage`), ``W`` computes the ``nn.Linear`` weight gradients
itself on a side stream; the executor makes the current stream
wait for them (``Stage.sync``) before a gradient all-reduce and the optimizer step.

Transfers follow the `layersched.runtime.plan.Plan`: receives are posted early (``irecv``), sends
are ``isend`` right after their action, stages on one rank hand tensors over without
communication. With data parallelism (world = pipeline ranks x replicas, global rank
``replica * num_ranks + pipeline_rank``), each stage's gradients are all-reduced asynchronously
after its last backward and averaged before its optimizer step (SGD with momentum).

Example
-------
>>> from layersched.runtime.runner import train_reference
>>> params, losses = train_reference("examples/models.py:mlp", num_microbatches=2, steps=1)
>>> sorted(params)[:2], len(losses)
(['fc0.0.bias', 'fc0.0.weight'], 1)
"""

from __future__ import annotations

import copy
import math
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

from layersched.runtime.plan import Plan, PlanError, Step, assign_layers, plan_schedule
from layersched.runtime.workload import Workload, check_layers, load_workload


@dataclass(frozen=True)
class RunConfig:
    """What to run: a schedule (a `layersched.formats.export.ScheduleFile`), a model builder and training
    settings. ``runtime`` picks the executor: ours, or torch.distributed.pipelining's.
    ``stage_factory`` (ours only) is a method's hook: the `Stage` subclass each rank builds, called
    like `Stage` (None: `Stage`). Its class attribute ``option``, where it has one, names the option
    that chose it in messages. For example `layersched.methods.ooo.wstream.SideStreamStage`
    (``--weight-stream``) computes the weight gradients of ``nn.Linear`` layers in ``W`` on a side
    stream. The runtime imports no method: the method hands its class in here."""

    schedule: object
    model: str
    steps: int = 1
    lr: float = 0.01
    momentum: float = 0.9
    model_options: dict = field(default_factory=dict)
    runtime: Literal["layersched", "torch"] = "layersched"
    trace: bool = True
    stage_factory: type | None = None
    optimizer: str = "sgd"  # a torch.optim class by name, any case (see `make_optimizer`)
    optimizer_args: dict = field(default_factory=dict)
    lr_schedule: str | None = None  # a torch.optim.lr_scheduler class by name, stepped once per step
    lr_schedule_args: dict = field(default_factory=dict)
    clip_grad_norm: float | None = None  # the gradients' norm over all stages is clipped to this
    checkpoint: str | None = None  # a DCP checkpoint directory written at the end (see `checkpoint`)
    checkpoint_every: int | None = None  # and after every this many steps
    resume: str | None = None  # a DCP checkpoint directory to start from, at its step
    precision: str = "fp32"  # fp32, or autocast to bf16 / fp16 (fp16 with a dynamic loss scale)
    loss_scale: float = 2.0**16  # fp16: the loss scale to start from (torch's GradScaler's default)
    seed: int = 0  # rank r's random numbers (dropout) start from seed + r, after its model is built

    @property
    def world_size(self) -> int:
        p = self.schedule.pipeline
        return p.num_ranks * p.data_parallel


@dataclass
class RankResult:
    """What one rank reports: the losses of its replica (on the rank of the last stage), its
    parameters after the run, its timed events, the start of every step (seconds since the run
    began) and its transfer records (`Timer.transfer`)."""

    rank: int
    pipeline_rank: int
    replica: int
    losses: list[float] | None
    params: dict[str, torch.Tensor]
    events: list[dict]
    step_starts: list[float]
    step_times: list[float]
    transfers: list[dict] = field(default_factory=list)
    first_step: int = 0  # the step the run started at (a resumed run: its checkpoint's)


@dataclass
class Prepared:
    """A run checked before any process group starts."""

    plan: Plan
    workload: Workload
    stage_layers: list[list[str]]
    modules: dict[str, nn.Module] | None = None  # the units stage_layers names (layers or sub-layers)
    tied: list = field(default_factory=list)  # parameters stages share (`shared_parameters`)

    def __post_init__(self) -> None:
        if self.modules is None:
            self.modules = dict(self.workload.layers)


def prepare(cfg: RunConfig, world_size: int) -> Prepared:
    """Check the schedule, the model and the world size together; `PlanError` with one clear line
    on any mismatch."""
    doc = cfg.schedule
    plan = plan_schedule(doc)
    p = doc.pipeline
    if world_size != cfg.world_size:
        raise PlanError(
            f"{world_size} processes, but the schedule needs {p.num_ranks} pipeline ranks x "
            f"{p.data_parallel} data-parallel replicas = {cfg.world_size}; "
            f"start {cfg.world_size}"
        )
    if cfg.stage_factory is not None and cfg.runtime != "layersched":
        what = getattr(cfg.stage_factory, "option", cfg.stage_factory.__name__)
        raise PlanError(
            f"{what} needs runtime 'layersched', not {cfg.runtime!r} (torch's executor runs its own "
            "backward); drop one of them"
        )
    if cfg.runtime == "torch":
        from layersched.runtime.preflight import torch_supports

        why = torch_supports(doc)
        if why:
            raise PlanError(f"runtime torch: {why}")
    workload = load_workload(cfg.model, **cfg.model_options)
    names, stage_layers = workload.stage_units(p.stage_layers)
    units = dict(workload.units(sublayers=names != workload.layer_names))
    check_layers(workload, list(units.items()))
    assigned = assign_layers(p.num_stages, stage_layers, names)
    tied = check_shared_parameters(assigned, units, cfg.runtime)
    check_training(cfg)
    if cfg.resume:
        from layersched.runtime.checkpoint import CheckpointError, check_resume

        try:
            check_resume(cfg, assigned)
        except CheckpointError as exc:
            raise PlanError(f"--resume {exc}") from None
    return Prepared(plan, workload, assigned, units, tied)


def shared_parameters(stage_layers: list[list[str]], modules: dict[str, nn.Module]) -> list[list[tuple[int, str, str]]]:
    """Parameters that layers of different stages share (a tied embedding and output head, say): per
    parameter, each stage holding it as ``(stage, layer, parameter name in the layer)``, lowest first."""
    seen: dict[int, list[tuple[int, str, str]]] = {}
    for s, names in enumerate(stage_layers):
        for layer in names:
            for pname, param in modules[layer].named_parameters(remove_duplicate=False):
                holders = seen.setdefault(id(param), [])
                if all(t != s for t, _, _ in holders):
                    holders.append((s, layer, pname))
    return [h for h in seen.values() if len(h) > 1]


def check_shared_parameters(stage_layers: list[list[str]], modules: dict[str, nn.Module], runtime: str) -> list:
    """The parameters stages share (`shared_parameters`). Our runtime keeps them in step as Megatron
    does its tied embeddings: each rank holding one keeps a copy, their gradients are summed over
    those ranks before the step, and every copy takes the same step. torch's runtime cannot: there
    a shared parameter is `PlanError` naming it and its stages."""
    tied = shared_parameters(stage_layers, modules)
    if tied and runtime != "layersched":
        (s0, l0, p0), (s1, l1, p1) = tied[0][:2]
        raise PlanError(
            f"parameter {l0}.{p0} of stage {s0} is shared with {l1}.{p1} of stage {s1} (tied weights); torch's runtime "
            "keeps one copy per stage and would train them apart: use runtime layersched (it keeps the copies in "
            "step), put both layers in one stage, or untie them"
        )
    return tied


def param_name(layer: str, name: str) -> str:
    return f"{layer}.{name}"


def _torch_class(module, name: str, what: str, option: str):
    """The class of ``module`` called ``name`` in any case; `PlanError` naming the valid ones."""
    import inspect

    base = torch.optim.Optimizer if module is torch.optim else torch.optim.lr_scheduler.LRScheduler
    found = {  # torch's private aliases (``_LRScheduler``) are no choice to offer
        n.lower(): c
        for n, c in vars(module).items()
        if inspect.isclass(c) and issubclass(c, base) and c is not base and not n.startswith("_")
    }
    if name.lower() not in found:
        valid = ", ".join(sorted(c.__name__ for c in found.values()))
        raise PlanError(f"{option} {name!r}: not a {what}; valid: {valid}")
    return found[name.lower()]


def make_optimizer(params: list[torch.Tensor], cfg: RunConfig):
    """The optimizer of ``params``: ``cfg.optimizer`` (a ``torch.optim`` class by name, any case) with
    ``lr``, ``cfg.optimizer_args`` and, for SGD, ``momentum``. Plain SGD with momentum uses `SGD`
    (torch's optimizers import torch._dynamo, two seconds in every process); the same numbers. A run
    that saves or resumes a checkpoint uses torch's, whose state torch's checkpoints know."""
    if cfg.optimizer.lower() == "sgd" and not cfg.optimizer_args and not (cfg.checkpoint or cfg.resume):
        return SGD(params, lr=cfg.lr, momentum=cfg.momentum)
    return _torch_optimizer(params, cfg.optimizer, cfg.lr, cfg.momentum, cfg.optimizer_args)


def _torch_optimizer(params, name: str, lr: float, momentum: float, args: dict):
    cls = _torch_class(torch.optim, name, "torch.optim optimizer", "--optimizer")
    kwargs = {"lr": lr, **args}
    if cls is torch.optim.SGD:
        kwargs.setdefault("momentum", momentum)
    return cls(params, **kwargs)


def make_schedule(optimizer, cfg: RunConfig):
    """``cfg.lr_schedule`` (a ``torch.optim.lr_scheduler`` class by name) on ``optimizer``, or None."""
    return _torch_schedule(optimizer, cfg.lr_schedule, cfg.lr_schedule_args)


def _torch_schedule(optimizer, name: str | None, args: dict):
    if name is None:
        return None
    return _torch_class(torch.optim.lr_scheduler, name, "learning-rate schedule", "--lr-schedule")(optimizer, **args)


def check_training(cfg: RunConfig) -> None:
    """The optimizer and schedule with their arguments, built once on a stand-in parameter before
    any process starts: a bad name or argument is one line."""
    if cfg.clip_grad_norm is not None and not (0 < cfg.clip_grad_norm < math.inf):
        raise PlanError(f"--clip-grad-norm: expected a finite number above 0, got {cfg.clip_grad_norm}")
    check_checkpointing(cfg)
    if cfg.precision not in AUTOCAST:
        raise PlanError(f"--precision {cfg.precision!r}: valid: {', '.join(AUTOCAST)}")
    if cfg.precision != "fp32" and cfg.runtime != "layersched":
        raise PlanError(
            f"--precision {cfg.precision} needs runtime 'layersched' (torch's executor runs its own forward)"
        )
    if not (0 < cfg.loss_scale < math.inf):
        raise PlanError(f"--loss-scale: expected a finite number above 0, got {cfg.loss_scale}")
    probe = [torch.zeros(1, requires_grad=True)]
    try:
        opt = make_optimizer(probe, cfg)
        if cfg.lr_schedule is not None:
            if isinstance(opt, SGD):  # torch's schedules need a torch optimizer
                opt = torch.optim.SGD(probe, lr=cfg.lr, momentum=cfg.momentum)
            make_schedule(opt, cfg)
    except PlanError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        what = f"--optimizer {cfg.optimizer}" + (f" / --lr-schedule {cfg.lr_schedule}" if cfg.lr_schedule else "")
        raise PlanError(f"{what}: {exc}") from None


AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""``--precision`` names: the dtype the forward passes autocast to (None: none)."""


class LossScaler:
    """fp16's dynamic loss scale, as ``torch.amp.GradScaler`` keeps it, agreed by every process: the
    loss is multiplied by ``scale`` before the backward passes; before the step the gradients are
    multiplied by ``1/scale`` and checked for inf/NaN on every rank (one all-reduce), and a step with
    any is skipped everywhere and halves the scale; 2000 clean steps in a row double it."""

    def __init__(self, scale: float, growth: float = 2.0, backoff: float = 0.5, interval: int = 2000):
        self.scale, self.growth, self.backoff, self.interval, self.tracker = float(scale), growth, backoff, interval, 0

    def unscale(self, params: list[torch.Tensor], device: torch.device, group=None) -> bool:
        """Unscale the gradients of ``params``; whether any gradient of any rank in ``group`` (None:
        all processes; no group when alone) is not finite."""
        grads = [p.grad for p in params if p.grad is not None]
        found = torch.zeros(1, dtype=torch.float32, device=device)
        inv = torch.full((1,), 1.0 / self.scale, dtype=torch.float32, device=device)
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(found, op=dist.ReduceOp.MAX, group=group)
        return bool(found.item())

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale, self.tracker = self.scale * self.backoff, 0
        else:
            self.tracker += 1
            if self.tracker == self.interval:
                self.scale, self.tracker = self.scale * self.growth, 0


def check_checkpointing(cfg: RunConfig) -> None:
    """`PlanError` for checkpoint options that cannot work, before any process starts."""
    if (cfg.checkpoint or cfg.resume) and cfg.runtime != "layersched":
        raise PlanError("--checkpoint and --resume need runtime 'layersched' (torch's executor keeps its own state)")
    if cfg.checkpoint_every is not None and (cfg.checkpoint_every < 1 or not cfg.checkpoint):
        raise PlanError("--checkpoint-every N: N must be at least 1, and --checkpoint DIR says where to write")
    if cfg.checkpoint and Path(cfg.checkpoint).exists() and not Path(cfg.checkpoint).is_dir():
        raise PlanError(f"--checkpoint {cfg.checkpoint}: a file is in the way; give a directory")


def train_reference(
    model: str,
    num_microbatches: int,
    steps: int = 1,
    lr: float = 0.01,
    momentum: float = 0.9,
    model_options: dict | None = None,
    *,
    optimizer: str = "sgd",
    optimizer_args: dict | None = None,
    lr_schedule: str | None = None,
    lr_schedule_args: dict | None = None,
    clip_grad_norm: float | None = None,
    precision: str = "fp32",
    loss_scale: float = 2.0**16,
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Train ``model`` in one process on the same micro-batches a run uses (all replicas'),
    with the loss averaged over them and the same ``torch.optim`` optimizer (SGD with momentum by
    default) and learning-rate schedule: the parameters and per-step losses a run must reproduce.
    ``precision`` bf16/fp16 autocasts the forward; fp16 scales the loss with ``torch.amp.GradScaler``."""
    w = load_workload(model, **(model_options or {}))
    net = nn.Sequential(*(m for _, m in w.layers))
    opt = _torch_optimizer(net.parameters(), optimizer, lr, momentum, optimizer_args or {})
    sched = _torch_schedule(opt, lr_schedule, lr_schedule_args or {})
    amp = AUTOCAST[precision]
    scaler = torch.amp.GradScaler("cpu", init_scale=loss_scale) if precision == "fp16" else None
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for x, y in w.batches(step, num_microbatches):
            with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
                loss = w.loss_fn(net(x), y) / num_microbatches
            (scaler.scale(loss) if scaler is not None else loss).backward()
            total += loss.item()
        if scaler is not None:
            scaler.unscale_(opt)
        if clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip_grad_norm)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if sched is not None:
            sched.step()
        losses.append(total)
    params = {param_name(n, k): v.detach().clone() for n, m in w.layers for k, v in m.named_parameters()}
    return params, losses


def clip_gradients(params: list[torch.Tensor], max_norm: float, group=None, also: list | None = None) -> float:
    """Scale the gradients of ``params`` so that the norm over every stage of the model is at most
    ``max_norm``, as ``torch.nn.utils.clip_grad_norm_`` does on the whole model: the squares are
    summed here, all-reduced over ``group`` (the pipeline ranks of one replica; None: this process
    holds the whole model) and the same factor applied everywhere, also to ``also`` (copies of
    shared parameters another rank counts). Returns the norm before."""
    scaled = [p.grad for p in [*params, *(also or [])] if p.grad is not None]
    grads = [p.grad for p in params if p.grad is not None]
    device = grads[0].device if grads else torch.device("cpu")
    total = torch.zeros((), dtype=torch.float64, device=device)
    for g in grads:
        total += g.detach().double().pow(2).sum()
    if group is not None:
        dist.all_reduce(total, group=group)
    norm = float(total.sqrt())
    coef = min(1.0, max_norm / (norm + 1e-6))
    if scaled:
        torch._foreach_mul_(scaled, coef)
    return norm


def seed_rank(cfg: RunConfig, rank: int) -> None:
    """Start the random numbers rank ``rank`` draws while training (dropout, on the CPU and every GPU)
    from ``cfg.seed + rank``: a run repeats with the same seed, and a run resumed from a checkpoint
    (which saves each rank's state) draws what the run never stopped would have. The model is already
    built; its builder seeds its own weights."""
    torch.manual_seed(cfg.seed + rank)


def check_against_reference(cfg: RunConfig, results: list[RankResult], rtol: float = 1e-5, atol: float = 1e-8):
    """The run's parameters against `train_reference` on the same micro-batches with the same
    optimizer and schedule: ``(ok, largest absolute difference, its parameter)``; ``ok`` when every
    parameter of every replica is within ``rtol`` and ``atol``. A resumed run is compared with the
    reference trained from the start to the step it reached."""
    p = cfg.schedule.pipeline
    ref, _ = train_reference(
        cfg.model,
        p.num_microbatches * p.data_parallel,
        steps=max(r.first_step for r in results) + cfg.steps,
        lr=cfg.lr,
        momentum=cfg.momentum,
        model_options=cfg.model_options,
        optimizer=cfg.optimizer,
        optimizer_args=cfg.optimizer_args,
        lr_schedule=cfg.lr_schedule,
        lr_schedule_args=cfg.lr_schedule_args,
        clip_grad_norm=cfg.clip_grad_norm,
        precision=cfg.precision,
        loss_scale=cfg.loss_scale,
    )
    ok, worst, where = True, 0.0, ""
    missing = sorted(set(ref) - {name for r in results for name in r.params})
    if missing:  # a check that compared nothing would pass
        return False, float("inf"), f"{missing[0]}: no rank reported it"
    for r in results:
        for name, value in r.params.items():
            want = ref[name].to(value.dtype)
            diff = float((value - want).abs().max()) if value.numel() else 0.0
            if diff >= worst:
                worst, where = diff, name
            ok = ok and bool(torch.allclose(value, want, rtol=rtol, atol=atol))
    return ok, worst, where


class SGD:
    """SGD with momentum, as ``torch.optim.SGD(params, lr, momentum)`` computes it (no dampening,
    Nesterov or weight decay). Its own few lines, because constructing a ``torch.optim`` optimizer
    imports torch._dynamo, two seconds in every process."""

    def __init__(self, params: list[torch.Tensor], lr: float, momentum: float):
        self.params, self.lr, self.momentum = list(params), lr, momentum
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params, grads = [self.params[i] for i in live], [self.params[i].grad for i in live]
        if self.momentum:
            fresh = {i for i in live if self.buffers[i] is None}
            for i in fresh:
                self.buffers[i] = self.params[i].grad.clone()
            old = [self.buffers[i] for i in live if i not in fresh]
            if old:
                torch._foreach_mul_(old, self.momentum)
                torch._foreach_add_(old, [self.params[i].grad for i in live if i not in fresh])
            grads = [self.buffers[i] for i in live]
        if params:
            torch._foreach_add_(params, grads, alpha=-self.lr)


class Stage:
    """A stage's layers and, per micro-batch in flight, each layer's input and output (graph
    attached) and, after ``I``, each layer's output gradient."""

    def __init__(self, index: int, layers: list[tuple[str, nn.Module]], is_first: bool, is_last: bool):
        self.index, self.layers = index, layers
        self.is_first, self.is_last = is_first, is_last
        self.params = [[p for p in m.parameters() if p.requires_grad] for _, m in layers]
        self.cells: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.out_grads: dict[int, list[torch.Tensor | None]] = {}

    def parameters(self) -> list[torch.Tensor]:
        """The stage's parameters, each once (a parameter tied between two of its layers too)."""
        return list({id(p): p for ps in self.params for p in ps}.values())

    def forward(self, mb: int, x: torch.Tensor, loss_fn=None, target=None, scale: float = 1.0) -> torch.Tensor:
        """Run the layers on ``x``; on the last stage return the scaled loss, else the output
        (detached, for the next stage)."""
        cells = []
        for _, layer in self.layers:
            out = layer(x)
            cells.append((x, out))
            x = out.detach().requires_grad_(out.requires_grad)
        if self.is_last:
            x, out = cells[-1]
            cells[-1] = (x, loss_fn(out, target) * scale)
        self.cells[mb] = cells
        return cells[-1][1].detach() if self.is_last else x.detach()

    def backward(self, mb: int, grad: torch.Tensor | None, weights: bool) -> torch.Tensor | None:
        """Gradients from the output gradient ``grad`` (None on the last stage): of each layer's
        input, and of the weights too when ``weights`` (a fused ``B``); returns the stage's input
        gradient (None on the first stage). Without ``weights`` the graph is kept for `weight`."""
        cells = self.cells[mb]
        out_grads: list[torch.Tensor | None] = [None] * len(cells)
        for j in range(len(cells) - 1, -1, -1):
            x, out = cells[j]
            out_grads[j] = grad
            wrt = ([x] if x.requires_grad else []) + (self.params[j] if weights else [])
            if wrt and out.requires_grad:
                torch.autograd.backward(out, grad, inputs=wrt, retain_graph=not weights)
            grad = x.grad if x.requires_grad else None
            if grad is None:
                break
        if weights:
            del self.cells[mb]
        else:
            self.out_grads[mb] = out_grads
        return None if self.is_first else grad

    def weight(self, mb: int) -> None:
        """Weight gradients of micro-batch ``mb`` from the graph and output gradients kept by ``I``."""
        cells, grads = self.cells.pop(mb), self.out_grads.pop(mb)
        for (_, out), g, params in zip(cells, grads, self.params, strict=True):
            if params and out.requires_grad:
                torch.autograd.backward(out, g, inputs=params)

    def sync(self) -> None:
        """Nothing to wait for: every action runs on the current stream (see
        `layersched.methods.ooo.wstream.SideStreamStage.sync`)."""


class Timer:
    """Times actions: ``time.perf_counter`` on the CPU, CUDA events on a GPU (read at step end).

    It also records each message's two ends (`transfer`): when its sender had it ready, and when
    its receiver had it, in step time (``time``) and on a clock common to all ranks (``clock``:
    ``time.perf_counter`` plus the rank's `clock_offset`), so a message's time in flight is its
    arrival's clock on one rank minus its departure's clock on the other."""

    def __init__(self, device: torch.device, enabled: bool = True, offset: float = 0.0):
        self.cuda, self.enabled, self.offset = device.type == "cuda", enabled, offset
        self._origin_clock = 0.0
        self.events: list[dict] = []
        self.transfers: list[dict] = []
        self._pending: list[tuple[str, int, bool, object, object]] = []
        self._pending_transfers: list[tuple[dict, object]] = []
        self._origin: object = None

    def start_step(self) -> None:
        # one reading for both origins: a rank descheduled between two readings (2 cores, 4 ranks)
        # shifted every clock of its step early by that gap, which can make a flight come out negative
        now = time.perf_counter()
        self._origin_clock = now + self.offset
        if self.cuda:
            self._origin = torch.cuda.Event(enable_timing=True)
            self._origin.record()
        else:
            self._origin = now

    @contextmanager
    def span(self, action: str, step: int, wait: bool = False) -> Iterator[None]:
        if not self.enabled or (wait and self.cuda):  # on a GPU a wait does not block the host
            yield
            return
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            yield
            b.record()
            self._pending.append((action, step, wait, a, b))
        else:
            t = time.perf_counter()
            yield
            end = time.perf_counter()
            self._add(action, step, wait, t - self._origin, end - t)

    def transfer(self, step: int, tag: int, side: str, nbytes: int, wait: float = 0.0) -> None:
        """Record one end of message ``tag``: ``side="send"`` when the sender has it ready (right
        before the send is posted), ``side="recv"`` when the receiver has it, after waiting
        ``wait`` seconds for it. The arrival is exact only when the receiver did wait; after a
        wait of a few microseconds the message had come earlier, and the time is when the receiver
        first needed it. On a GPU both ends are events on the compute stream, so an arrival is
        when that stream reached the wait (an upper bound), and the clock is approximate."""
        if not self.enabled:
            return
        rec = {"step": step, "tag": tag, "side": side, "bytes": nbytes, "wait": wait}
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._pending_transfers.append((rec, ev))
        else:
            rec["time"] = time.perf_counter() - self._origin
            rec["clock"] = self._origin_clock + rec["time"]
        self.transfers.append(rec)

    def end_step(self) -> None:
        if self.cuda and (self._pending or self._pending_transfers):
            torch.cuda.synchronize()
            for action, step, wait, a, b in self._pending:
                self._add(action, step, wait, self._origin.elapsed_time(a) / 1e3, a.elapsed_time(b) / 1e3)
            for rec, ev in self._pending_transfers:
                rec["time"] = self._origin.elapsed_time(ev) / 1e3
                rec["clock"] = self._origin_clock + rec["time"]
            self._pending.clear()
            self._pending_transfers.clear()

    def _add(self, action: str, step: int, wait: bool, start: float, duration: float) -> None:
        event = {"action": action, "step": step, "start": start, "duration": duration}
        if wait:
            event["wait"] = True
        self.events.append(event)


def clock_offset(device: torch.device, force: bool = False, rounds: int = 8) -> float:
    """Seconds to add to this process's ``time.perf_counter`` to read rank 0's. Zero when all
    ranks run on one host (the monotonic clock is the machine's); otherwise (or with ``force``)
    estimated from ping-pongs with rank 0, the one with the shortest round trip kept (error at most
    half of it). Every rank calls it, together."""
    hosts: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    if len(set(hosts)) == 1 and not force:
        return 0.0
    buf = torch.zeros(1, dtype=torch.float64, device=device)
    best = (float("inf"), 0.0)
    for r in range(1, dist.get_world_size()):
        for _ in range(rounds):
            if dist.get_rank() == 0:
                dist.recv(buf, r)
                buf.fill_(time.perf_counter())
                dist.send(buf, r)
            elif dist.get_rank() == r:
                t0 = time.perf_counter()
                dist.send(buf, 0)
                dist.recv(buf, 0)
                t1 = time.perf_counter()
                best = min(best, (t1 - t0, float(buf.item()) - (t0 + t1) / 2))
    return best[1]


def replica_groups(num_ranks: int, data_parallel: int) -> list:
    """One process group per pipeline rank over its replicas (every process creates all of them,
    in the same order, as torch requires); empty without data parallelism."""
    if data_parallel == 1:
        return []
    return [dist.new_group([d * num_ranks + r for d in range(data_parallel)]) for r in range(num_ranks)]


def pair_groups(plan: Plan, data_parallel: int) -> dict[tuple[int, int], object]:
    """One process group per direction between two global ranks that exchange tensors (keyed
    ``(src, dst)``), created by every process in the same order. Each direction's transfers then
    have a communicator and (with NCCL) a stream of their own, in which the plan's channel order
    holds, and traffic one way never waits behind traffic the other way; NCCL communicators are
    created here, eagerly, rather than by a first receive that would block its rank."""
    R = plan.num_ranks
    channels = sorted({(d * R + t.src, d * R + t.dst) for t in plan.transfers for d in range(data_parallel)})
    return {ch: dist.new_group(sorted(ch)) for ch in channels}


class Executor:
    """Runs one rank's steps of a `Plan` for several training steps."""

    def __init__(self, cfg: RunConfig, prep: Prepared, rank: int, device: torch.device):
        doc, plan = cfg.schedule, prep.plan
        self.cfg, self.plan, self.device = cfg, plan, device
        self.R, self.D = plan.num_ranks, doc.pipeline.data_parallel
        self.rank, self.pr, self.replica = rank, rank % self.R, rank // self.R
        self.M, self.S = plan.num_microbatches, plan.num_stages
        self.workload = prep.workload
        self.steps = plan.ranks[self.pr].steps
        modules = prep.modules
        mine = set(plan.ranks[self.pr].stages)
        self.stages: dict[int, Stage] = {}
        meta: list[nn.Module] = []
        local = {id(p) for s in mine for n in prep.stage_layers[s] for p in modules[n].parameters()}
        for s, names in enumerate(prep.stage_layers):
            for name in names:
                if s in mine:
                    meta.append(copy.deepcopy(modules[name]).to("meta"))
                    modules[name].to(device)
                elif any(id(p) in local for p in modules[name].parameters()):  # shares a tensor with ours
                    meta.append(copy.deepcopy(modules[name]).to("meta"))
                else:  # another rank's layer: only its shapes matter here
                    meta.append(modules[name].to("meta"))
        self.meta_stages = _split(meta, [len(n) for n in prep.stage_layers])
        stage_type = cfg.stage_factory or Stage
        for s in sorted(mine):
            layers = [(n, modules[n]) for n in prep.stage_layers[s]]
            self.stages[s] = stage_type(s, layers, s == 0, s == self.S - 1)
        self._tie(prep.tied, mine, modules)
        self.optimizers = {s: make_optimizer(ps, cfg) for s, ps in self.owned.items() if ps}
        self.schedules = {s: make_schedule(opt, cfg) for s, opt in self.optimizers.items()}
        self.group = replica_groups(self.R, self.D)[self.pr] if self.D > 1 else None
        self.cfg = cfg
        self.pipe_group = None  # the pipeline ranks of this replica, for the gradients' norm
        if cfg.clip_grad_norm is not None and self.R > 1:  # every process creates every group, in order
            pipes = [dist.new_group([d * self.R + r for r in range(self.R)]) for d in range(self.D)]
            self.pipe_group = pipes[self.replica]
        self.pairs = pair_groups(plan, self.D)
        self.stage_layers = prep.stage_layers
        self.amp = AUTOCAST[cfg.precision]
        self.scaler = LossScaler(cfg.loss_scale) if cfg.precision == "fp16" else None
        self._shapes: dict[tuple, list[tuple[torch.Size, torch.dtype]]] = {}
        self.timer = Timer(device, cfg.trace, clock_offset(device) if cfg.trace else 0.0)

    def boundary_specs(self, x: torch.Tensor) -> list[tuple[torch.Size, torch.dtype]]:
        """Shape and dtype of every stage's output for a micro-batch input like ``x`` (a forward
        on the meta device, once per input shape). With autocast (bf16/fp16) the dtypes depend on
        which operations autocast lowers on this device: the forward then runs on fake tensors of
        this device (shapes and dtypes, no memory, no compute) under the same autocast."""
        key = (tuple(x.shape), x.dtype)
        if key not in self._shapes:
            if self.amp is None:
                h, specs = x.to("meta"), []
                with torch.no_grad():
                    for layers in self.meta_stages:
                        for layer in layers:
                            h = layer(h)
                        specs.append((h.shape, h.dtype))
            else:
                specs = self._autocast_specs(x)
            self._shapes[key] = specs
        return self._shapes[key]

    def _autocast_specs(self, x: torch.Tensor) -> list[tuple[torch.Size, torch.dtype]]:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.func import functional_call

        dev, specs = self.device, []
        with FakeTensorMode(), torch.no_grad():
            h = torch.empty(x.shape, dtype=x.dtype, device=dev)
            for layers in self.meta_stages:
                for layer in layers:
                    named = (*layer.named_parameters(), *layer.named_buffers())
                    tensors = {n: torch.empty(t.shape, dtype=t.dtype, device=dev) for n, t in named}
                    with torch.autocast(dev.type, dtype=self.amp):
                        h = functional_call(layer, tensors, (h,))
                specs.append((h.shape, h.dtype))
        return specs

    def run(self) -> RankResult:
        losses: list[float] = []
        starts, times = [], []
        first = 0
        seed_rank(self.cfg, self.rank)
        if self.cfg.resume:
            from layersched.runtime.checkpoint import load

            first = load(self, self.cfg.resume)
        if self.cfg.trace:
            dist.barrier()
        t_run = time.perf_counter()
        for step in range(first, first + self.cfg.steps):
            mbs = [
                (x.to(self.device), y.to(self.device))
                for x, y in self.workload.batches(step, self.M * self.D)[
                    self.replica * self.M : (self.replica + 1) * self.M
                ]
            ]
            specs = [self.boundary_specs(x) for x, _ in mbs]
            if self.cfg.trace:
                dist.barrier()
            starts.append(time.perf_counter() - t_run)
            t = time.perf_counter()
            losses.append(self.train_step(step, mbs, specs))
            times.append(time.perf_counter() - t)
            if self.S - 1 in self.stages and not math.isfinite(losses[-1]):
                raise FloatingPointError(
                    f"step {step}: the loss is {losses[-1]} on rank {self.rank} (replica {self.replica}); "
                    "the run stops here: lower the learning rate, or check the model and its data"
                )
            every, done = self.cfg.checkpoint_every, step + 1
            if self.cfg.checkpoint and (done == first + self.cfg.steps or (every and done % every == 0)):
                from layersched.runtime.checkpoint import save

                save(self, done, self.cfg.checkpoint)
        last = self.S - 1 in self.stages
        params = {
            param_name(n, k): v.detach().cpu().clone()
            for st in self.stages.values()
            for n, m in st.layers
            for k, v in m.named_parameters()
        }
        return RankResult(
            self.rank,
            self.pr,
            self.replica,
            losses if last else None,
            params,
            self.timer.events,
            starts,
            times,
            self.timer.transfers,
            first,
        )

    def _global(self, pipeline_rank: int) -> int:
        return self.replica * self.R + pipeline_rank

    def _channel(self, src: int, dst: int):
        return self.pairs[(src, dst)]

    def train_step(self, step: int, mbs: list[tuple[torch.Tensor, torch.Tensor]], specs: list) -> float:
        """One iteration on this replica's micro-batches ``mbs``, whose stage outputs have the
        shapes ``specs``; returns the replica's loss (on the last stage's rank)."""
        self.loss_scale_used = self.scaler.scale if self.scaler is not None else 1.0
        for st in self.stages.values():
            for p in st.parameters():
                p.grad = None
        timer = self.timer
        timer.start_step()
        received: dict[int, tuple[object, torch.Tensor]] = {}
        local: dict[tuple[str, int, int], torch.Tensor] = {}
        sends: list[tuple[object, torch.Tensor]] = []
        reduces: dict[int, tuple[object, torch.Tensor]] = {}
        loss_total = torch.zeros((), dtype=torch.float64, device=self.device)
        for st in self.steps:
            for t in st.post:
                shape, dtype = specs[t.microbatch][t.boundary]
                buf = torch.empty(shape, dtype=dtype, device=self.device)
                src = self._global(t.src)
                received[t.tag] = (dist.irecv(buf, src=src, group=self._channel(src, self.rank), tag=t.tag), buf)
            data = None
            if st.wait is not None:
                work, data = received.pop(st.wait.tag)
                t_wait = time.perf_counter()
                with timer.span(st.action, step, wait=True):
                    work.wait()
                timer.transfer(step, st.wait.tag, "recv", _nbytes(data), time.perf_counter() - t_wait)
            with timer.span(st.action, step):
                out = self._compute(st, data, local, mbs)
                if st.kind == "F" and self.stages[st.stage].is_last:
                    loss_total += out
            if st.send is not None:
                out = out.contiguous()
                timer.transfer(step, st.send.tag, "send", _nbytes(out))
                dst = self._global(st.send.dst)
                sends.append((dist.isend(out, dst=dst, group=self._channel(self.rank, dst), tag=st.send.tag), out))
            if st.reduce and self.group is not None and st.stage in self.optimizers:
                reduces[st.stage] = self._start_reduce(st.stage)
        clip, scaler = self.cfg.clip_grad_norm, self.scaler
        skip = False  # fp16: a gradient somewhere is inf/NaN, so no rank steps its optimizer

        def update(s: int) -> None:
            with timer.span(f"{s}U", step):
                if not skip:
                    self.optimizers[s].step()
                if self.schedules[s] is not None:
                    self.schedules[s].step()

        # every stage's gradients first, then the steps: for the scale, the norm, or a shared parameter
        together = clip is not None or scaler is not None or bool(self.tied)
        for s in sorted(self.optimizers):
            self.stages[s].sync()  # the gradients the optimizer reads are complete
            if s in reduces:
                with timer.span(f"{s}R", step, wait=True):
                    self._finish_reduce(s, *reduces[s])
            if not together:
                update(s)
        if together:
            for st in self.stages.values():
                st.sync()
            self._sync_tied()
            mine = [p for s in sorted(self.optimizers) for p in self.owned[s]]  # each tensor once
            if scaler is not None:  # every process takes part, with or without parameters
                skip = scaler.unscale(mine, self.device)
                scaler.update(skip)
            if clip is not None and not skip:  # the norm needs every stage's gradients, on every pipeline rank
                counted = [p for p in mine if id(p) not in self.not_counted]
                clip_gradients(counted, clip, self.pipe_group, also=[p for p in mine if id(p) in self.not_counted])
            for s in sorted(self.optimizers):
                update(s)
        for work, _ in sends:
            work.wait()
        timer.end_step()
        return float(loss_total) / self.loss_scale_used

    def _compute(self, st: Step, data: torch.Tensor | None, local: dict, mbs: list) -> torch.Tensor | None:
        """Run one action; its input comes from ``data`` (received), the batch or a stage on this
        rank; its output goes to the next stage on this rank or is returned for sending."""
        stage, s, mb = self.stages[st.stage], st.stage, st.microbatch
        if st.kind == "F":
            if s == 0:
                x = mbs[mb][0]
            else:
                x = (data if data is not None else local.pop(("act", s - 1, mb))).requires_grad_()
            with torch.autocast(self.device.type, dtype=self.amp, enabled=self.amp is not None):
                out = stage.forward(mb, x, self.workload.loss_fn, mbs[mb][1], self.loss_scale_used / self.M)
            if not stage.is_last and st.send is None:
                local[("act", s, mb)] = out
            return out
        if st.kind == "W":
            stage.weight(mb)
            return None
        grad = None if stage.is_last else (data if data is not None else local.pop(("grad", s, mb)))
        out = stage.backward(mb, grad, weights=st.kind == "B")
        if out is not None and st.send is None:
            local[("grad", s - 1, mb)] = out
        return out

    def _tie(self, tied: list, mine: set[int], modules: dict[str, nn.Module]) -> None:
        """Who updates what: each stage of this rank steps the parameters it holds that no lower stage
        of this rank holds (``owned``); a parameter stages share (``tied``) is left out of the
        per-stage gradient reductions and summed at the end over the processes holding a copy, in one
        group per shared parameter (every process creates every group, in the same order)."""
        claimed: set[int] = set()
        self.owned: dict[int, list[torch.Tensor]] = {}
        for s in sorted(mine):
            self.owned[s] = [p for p in self.stages[s].parameters() if id(p) not in claimed]
            claimed.update(id(p) for p in self.owned[s])
        rank_of = self.plan.stage_to_rank
        self.tied: list[tuple[torch.Tensor, object]] = []  # this rank's copy and its group (None: alone)
        self.not_counted: set[int] = set()  # copies whose square another rank adds to the gradients' norm
        for holders in tied:
            ranks = sorted({rank_of[s] for s, _, _ in holders})
            members = sorted(d * self.R + r for d in range(self.D) for r in ranks)
            group = dist.new_group(members) if len(members) > 1 else None
            here = [(layer, pname) for s, layer, pname in holders if s in mine]
            if not here:
                continue
            tensor = modules[here[0][0]].get_parameter(here[0][1])
            self.tied.append((tensor, group))
            if rank_of[holders[0][0]] != self.pr:
                self.not_counted.add(id(tensor))
        tied_ids = {id(t) for t, _ in self.tied}
        # what each stage's data-parallel reduction carries: its own parameters, shared ones apart
        self.reduced = {s: [p for p in ps if id(p) not in tied_ids] for s, ps in self.owned.items()}

    def _sync_tied(self) -> None:
        """Sum each shared parameter's gradient over every copy (all replicas too, then the replicas'
        mean), so that every copy takes the same step as the one tensor of the single-process model."""
        for tensor, group in self.tied:
            grad = tensor.grad if tensor.grad is not None else torch.zeros_like(tensor)
            if group is not None:
                dist.all_reduce(grad, group=group)
            tensor.grad = grad / self.D if self.D > 1 else grad

    def _start_reduce(self, s: int) -> tuple[object, torch.Tensor]:
        self.stages[s].sync()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.reduced[s]]
        flat = torch.cat([g.reshape(-1) for g in grads]) if grads else torch.zeros(0, device=self.device)
        return dist.all_reduce(flat, group=self.group, async_op=True), flat

    def _finish_reduce(self, s: int, work, flat: torch.Tensor) -> None:
        work.wait()
        flat /= self.D
        k = 0
        for p in self.reduced[s]:
            n = p.numel()
            p.grad = flat[k : k + n].view_as(p).clone()
            k += n


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _split(items: list, sizes: list[int]) -> list[list]:
    out, k = [], 0
    for n in sizes:
        out.append(items[k : k + n])
        k += n
    return out
