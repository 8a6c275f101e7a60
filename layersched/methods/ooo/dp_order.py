"""Data-parallel training that applies an out-of-order backward: per-layer ``I``/``W`` order,
an asynchronous all-reduce per layer started right after its ``W``, waited for just before that
layer's next forward (where its SGD update runs).

Each of ``replicas`` processes (CPU and gloo by default) trains on its share of the micro-batches a
single-process run uses (``train_reference`` with ``replicas`` micro-batches, one per replica), with
the loss scaled by ``1 / replicas`` and the gradients summed, so the parameters after every step
equal the reference's up to rounding. An order is checked before any process starts: every ``I``
and ``W`` once, and each after the output gradient it needs.

Example
-------
>>> from layersched.methods.ooo.dataparallel import reverse_first_k
>>> check_order(reverse_first_k(3, 2), 3)
>>> check_order([("W", 0), ("I", 1), ("I", 0), ("W", 1)], 2)
Traceback (most recent call last):
...
ValueError: order: ('W', 0) needs the output gradient of layer 0, computed by ('I', 1), which comes later
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from layersched.runtime.launch import run_processes
from layersched.runtime.runner import SGD, param_name
from layersched.runtime.workload import load_workload

Order = Sequence[tuple[str, int]]


def check_order(order: Order, num_layers: int) -> None:
    """`ValueError` unless ``order`` holds every ``("I", l)`` and ``("W", l)`` once and each after
    the ``("I", l + 1)`` that computes its output gradient."""
    want = {(kind, x) for kind in "IW" for x in range(num_layers)}
    items = [(str(kind), int(x)) for kind, x in order]
    if len(items) != len(want) or set(items) != want:
        missing = sorted(want - set(items))
        raise ValueError(
            f"order: expected each of I and W once for layers 0..{num_layers - 1}"
            + (f"; missing {missing[0]}" if missing else "; an item is repeated or unknown")
        )
    pos = {item: k for k, item in enumerate(items)}
    for item in items:
        x = item[1]
        if x + 1 < num_layers and pos[("I", x + 1)] > pos[item]:
            raise ValueError(
                f"order: {item} needs the output gradient of layer {x}, computed by ('I', {x + 1}), which comes later"
            )


@dataclass
class DPRankResult:
    """One replica's losses (its share, scaled by ``1 / replicas``) and parameters after the run."""

    rank: int
    losses: list[float]
    params: dict[str, torch.Tensor]


def _train(rank: int, device: torch.device, state: tuple) -> DPRankResult:
    model, orders, steps, lr, momentum, options = state
    w = load_workload(model, **options)
    D = dist.get_world_size()
    layers = [m.to(device) for _, m in w.layers]
    params = [list(m.parameters()) for m in layers]
    opts = [SGD(p, lr=lr, momentum=momentum) for p in params]
    pending: dict[int, tuple[object, torch.Tensor]] = {}

    def finish(x: int) -> None:
        """Wait for layer x's all-reduce, copy the summed gradients back, update the layer."""
        if x not in pending:
            return
        work, flat = pending.pop(x)
        work.wait()
        offset = 0
        for p in params[x]:
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        opts[x].step()

    losses = []
    for step in range(steps):
        x_in, target = w.batches(step, D)[rank]
        inputs, outputs = [], []
        h = x_in.to(device)
        for x, layer in enumerate(layers):
            finish(x)  # the update of layer x ends before its forward
            h = h.detach().requires_grad_(x > 0)
            inputs.append(h)
            h = layer(h)
            outputs.append(h)
        loss = w.loss_fn(h, target.to(device)) / D
        losses.append(loss.item())
        grad_out = {len(layers) - 1: torch.autograd.grad(loss, h)[0]}
        for kind, x in orders[step % len(orders)]:
            if kind == "I" and x > 0:
                (grad_out[x - 1],) = torch.autograd.grad(outputs[x], inputs[x], grad_out[x], retain_graph=True)
            elif kind == "W" and params[x]:
                grads = torch.autograd.grad(outputs[x], params[x], grad_out[x], retain_graph=True)
                flat = torch.cat([g.reshape(-1) for g in grads])
                pending[x] = (dist.all_reduce(flat, async_op=True), flat)
    for x in range(len(layers)):
        finish(x)
    names = [n for n, _ in w.layers]
    out = {
        param_name(n, k): v.detach().cpu().clone()
        for n, m in zip(names, layers, strict=True)
        for k, v in m.named_parameters()
    }
    return DPRankResult(rank, losses, out)


def train_data_parallel(
    model: str,
    orders: Sequence[Order],
    replicas: int,
    *,
    steps: int = 1,
    lr: float = 0.01,
    momentum: float = 0.9,
    model_options: dict | None = None,
    timeout: float = 120.0,
    device: str = "cpu",
) -> list[DPRankResult]:
    """Train ``model`` on ``replicas`` processes; step ``t`` runs the backward in ``orders[t %
    len(orders)]``. Returns every replica's result, in rank order."""
    num_layers = len(load_workload(model, **(model_options or {})).layers)
    if not orders:
        raise ValueError("orders: give at least one backward order")
    for order in orders:
        check_order(order, num_layers)
    state = (model, [list(o) for o in orders], steps, lr, momentum, model_options or {})
    return run_processes(_train, replicas, state, timeout=timeout, device=device)
