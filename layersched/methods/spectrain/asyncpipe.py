"""Asynchronous pipeline training (PipeDream-style 1F1B without a flush), emulated in one process.

In an asynchronous pipeline every micro-batch is a mini-batch: each stage updates its weights right
after that mini-batch's backward, and never waits for a flush. Stage ``s``'s forward of mini-batch
``i`` then runs before the updates of the mini-batches still in flight, so it sees weights that are
``lag[s]`` versions old, where `version_lags` reads ``lag[s]`` off the 1F1B schedule (the number of
that stage's backwards a sequential run would have done before the forward but 1F1B has not:
``p - 1 - s`` with ``p`` stages). The backward of mini-batch ``i`` runs on the then-current weights
(version ``i``), to which its update is applied.

This module is a **single-process exact emulation** of those version semantics, not a multi-process
run: it keeps each stage's recent weight versions and computes, per mode,

- ``sync``: forward and backward on version ``i`` (plain sequential SGD; what synchronous 1F1B with
  one mini-batch per update computes). `train` in this mode equals plain training exactly;
- ``stale``: forward on version ``i - lag``, backward on the current version ``i`` (no stashing: the
  backward's weights differ from the forward's, PipeDream's inconsistency);
- ``stash``: forward and backward on the stashed version ``i - lag`` (PipeDream's weight stashing;
  the update still goes to the current weights);
- ``spectrain``: forward on the prediction ``W_hat = W - s * lr * v`` from version ``i - lag``, with
  ``v`` the momentum buffer of that version and ``s = lag`` the versions between the forward's use
  and the update; backward on the current version (``s = 0``).

The backward recomputes each stage's forward from its saved input with the backward's weights (a
stage's input is what the previous stage sent in the forward), so all modes share one code path.
The optimizer is SGD with momentum exactly as ``torch.optim.SGD`` computes it.

Example
-------
>>> version_lags(4)
[3, 2, 1, 0]
>>> task = teacher_student(seed=0)
>>> hist = train(task, "spectrain", steps=3, eval_every=3)
>>> len(hist.loss), hist.steps_evaluated
(3, [3])
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.func import functional_call

from layersched.methods.spectrain import MODES


def one_f_one_b(num_stages: int, num_microbatches: int) -> list[list[str]]:
    """Per rank, the actions of the ``1f1b`` template (unit costs), solved and validated.

    >>> one_f_one_b(2, 2)
    [['0F0', '0F1', '0B0', '0B1'], ['1F0', '1B0', '1F1', '1B1']]
    """
    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.solve import solve_pipeline

    fields = {
        "stages": num_stages,
        "microbatches": num_microbatches,
        "forward": 1,
        "backward_input": 1,
        "backward_weight": 1,
    }
    pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "1f1b", "pipeline": fields}))
    return solve_pipeline(pipe, schedule="1f1b").actions()


def version_lags(num_stages: int) -> list[int]:
    """Per stage, how many weight versions its forwards run behind in 1F1B without a flush, read off
    the ``1f1b`` template: ``max_i (i - number of the stage's backwards before its forward i)``."""
    from layersched.schedule.graph import parse_action

    lags = []
    for order in one_f_one_b(num_stages, 2 * num_stages + 1):
        done, lag = 0, 0
        for a in order:
            _, kind, mb = parse_action(a)
            if kind == "B":
                done += 1
            else:
                lag = max(lag, mb - done)
        lags.append(lag)
    return lags


@dataclass
class Task:
    """A model split into stages, a loss, and reproducible training and test data."""

    stages: list[nn.Module]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    test: tuple[torch.Tensor, torch.Tensor]


def teacher_student(
    seed: int = 0,
    in_dim: int = 32,
    hidden: int = 64,
    classes: int = 10,
    num_stages: int = 4,
    batch_size: int = 32,
    test_size: int = 2000,
    dtype: torch.dtype = torch.float64,
) -> Task:
    """Classification whose labels a fixed random teacher network gives (argmax of its logits); the
    student is an MLP of ``num_stages`` stages (linear + ReLU, the last linear to the classes).

    >>> t = teacher_student()
    >>> x, y = t.batch(0)
    >>> x.shape, int(y.max()) < 10, len(t.stages)
    (torch.Size([32, 32]), True, 4)
    """
    g = torch.Generator().manual_seed(10_007 + seed)
    w1 = torch.randn(in_dim, 2 * hidden, generator=g, dtype=dtype) / in_dim**0.5
    w2 = torch.randn(2 * hidden, classes, generator=g, dtype=dtype) / (2 * hidden) ** 0.5

    def label(x: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(x @ w1) @ w2).argmax(dim=1)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(
            batch_size, in_dim, generator=torch.Generator().manual_seed(seed * 1_000_003 + step), dtype=dtype
        )
        return x, label(x)

    xt = torch.randn(test_size, in_dim, generator=torch.Generator().manual_seed(seed + 99), dtype=dtype)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dims = [in_dim] + [hidden] * (num_stages - 1) + [classes]
        stages = [
            nn.Sequential(nn.Linear(dims[s], dims[s + 1]), *([nn.ReLU()] if s < num_stages - 1 else []))
            for s in range(num_stages)
        ]
    for st in stages:
        st.to(dtype)
    return Task(stages, nn.functional.cross_entropy, batch, (xt, label(xt)))


@dataclass
class History:
    """Per step the training loss (as the pipeline's forward saw it) and, every ``eval_every`` steps,
    the test loss and accuracy of the current weights."""

    loss: list[float] = field(default_factory=list)
    steps_evaluated: list[int] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)


class _Stage:
    """A stage's module, its current weights and momentum, and its last ``lag + 1`` versions."""

    def __init__(self, module: nn.Module, lag: int):
        self.module = module
        self.lag = lag
        self.weights = {k: v.detach().clone() for k, v in module.named_parameters()}
        self.momentum: dict[str, torch.Tensor] | None = None
        self.versions: deque = deque([(0, self.weights, None)], maxlen=lag + 1)
        self.version = 0

    def old(self, i: int) -> tuple[int, dict, dict | None]:
        """The version the forward of mini-batch ``i`` sees: ``max(0, i - lag)``."""
        want = max(0, i - self.lag)
        return next(v for v in self.versions if v[0] == want)

    def run(self, weights: dict, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, weights, (x,))

    @torch.no_grad()
    def update(self, grads: dict[str, torch.Tensor], lr: float, mu: float) -> None:
        """``torch.optim.SGD(lr, momentum=mu)``: ``v = mu v + g`` (``v = g`` first), ``w -= lr v``; new tensors,
        so older versions stay intact."""
        if self.momentum is None:
            self.momentum = {k: g.clone() for k, g in grads.items()}
        else:
            self.momentum = {k: self.momentum[k].mul(mu).add_(grads[k]) for k in grads}
        self.weights = {k: w.add(self.momentum[k], alpha=-lr) for k, w in self.weights.items()}
        self.version += 1
        self.versions.append((self.version, self.weights, self.momentum))


def _forward_weights(st: _Stage, i: int, mode: str, lr: float) -> dict:
    if mode == "sync":
        return st.weights
    version, w, v = st.old(i)
    if mode == "spectrain" and v is not None and i > version:
        return {k: w[k] - (i - version) * lr * v[k] for k in w}
    return w


def train(
    task: Task,
    mode: str,
    steps: int,
    *,
    lr: float = 0.05,
    momentum: float = 0.9,
    eval_every: int = 25,
    lags: list[int] | None = None,
) -> History:
    """Train ``task``'s stages for ``steps`` mini-batches as an asynchronous 1F1B pipeline in ``mode``
    (one of `MODES`); the task's modules are left untouched. ``lags`` defaults to `version_lags`."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    lags = [0] * len(task.stages) if mode == "sync" else (lags or version_lags(len(task.stages)))
    stages = [_Stage(copy.deepcopy(m), lag) for m, lag in zip(task.stages, lags, strict=True)]
    hist = History()
    for i in range(steps):
        x, y = task.batch(i)
        inputs = []
        with torch.no_grad():
            h = x
            for st in stages:
                inputs.append(h)
                h = st.run(_forward_weights(st, i, mode, lr), h)
            hist.loss.append(float(task.loss_fn(h, y)))
        grad = None
        for st, h_in in zip(reversed(stages), reversed(inputs), strict=True):
            w = st.old(i)[1] if mode == "stash" else st.weights
            w = {k: v.detach().requires_grad_() for k, v in w.items()}
            h_in = h_in.detach().requires_grad_(st is not stages[0])
            out = st.run(w, h_in)
            if grad is None:
                out = task.loss_fn(out, y)
            tensors = [h_in, *w.values()] if st is not stages[0] else list(w.values())
            got = torch.autograd.grad(out, tensors, grad_outputs=grad)
            grad = got[0] if st is not stages[0] else None
            st.update(dict(zip(w, got[-len(w) :], strict=True)), lr, momentum)
        if (i + 1) % eval_every == 0 or i + 1 == steps:
            hist.steps_evaluated.append(i + 1)
            loss, acc = evaluate([(st.module, st.weights) for st in stages], task)
            hist.test_loss.append(loss)
            hist.test_accuracy.append(acc)
    return hist


@torch.no_grad()
def evaluate(stages: list[tuple[nn.Module, dict]], task: Task) -> tuple[float, float]:
    """Test loss and accuracy of the given stage weights (accuracy NaN unless the targets are class labels)."""
    h, y = task.test
    for module, w in stages:
        h = functional_call(module, w, (h,))
    acc = float((h.argmax(dim=1) == y).double().mean()) if y.ndim == 1 else float("nan")
    return float(task.loss_fn(h, y)), acc


def weight_memory(task: Task, lags: list[int] | None = None) -> list[dict]:
    """Per stage, bytes of weights, and the extra weight memory each mode needs beyond the live
    weights and the momentum buffer (which every mode keeps): stashing holds one version per
    mini-batch in flight, ``lag`` extra copies; SpecTrain computes one predicted copy (none where
    ``lag`` is 0); stale and sync none.

    >>> [r["stash_extra"] // r["weights"] for r in weight_memory(teacher_student())]
    [3, 2, 1, 0]
    """
    lags = lags or version_lags(len(task.stages))
    rows = []
    for s, (m, lag) in enumerate(zip(task.stages, lags, strict=True)):
        b = sum(p.numel() * p.element_size() for p in m.parameters())
        rows.append(
            {
                "stage": s,
                "lag": lag,
                "weights": b,
                "stash_extra": lag * b,
                "spectrain_extra": b if lag else 0,
                "stale_extra": 0,
            }
        )
    return rows
