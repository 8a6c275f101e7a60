"""Weight gradients of ``nn.Linear`` layers on a side stream: the ``W`` of a split backward that can
run beside the next ``F`` and ``I`` on one GPU.

Why not simply run ``W`` inside ``with torch.cuda.stream(side)``: PyTorch's autograd engine runs each
backward op on the stream its forward op ran on (pytorch/pytorch#7601, #8354), whatever stream is
current when ``backward`` is called, and there is no public way to move a node to another stream. So
`SideStreamStage` leaves autograd out of the weight gradients it moves: in the forward it keeps, for
every use of an ``nn.Linear`` (the bulk of the weight-gradient work of MLPs and transformers), a
reference to the input ``x`` and, through a hook on the output, during ``I`` the output gradient
``g``; ``W`` then computes ``weight.grad += g^T x`` and ``bias.grad += sum(g)`` itself, with kernels
it launches on the side stream. What runs where:

- main (current) stream: ``F``; ``I``; in ``W``, autograd on the retained graph for every other
  parameter (LayerNorm, embeddings, convolutions, ...) exactly as `layersched.runtime.runner.Stage`
  does, and for the output gradients ``I`` did not reach (the first layer of the first stage, whose
  input needs no gradient, so ``I`` has nothing to compute there); the fused ``B``.
- side stream: the Linear weight and bias gradients, after ``side.wait_stream(main)`` (the inputs and
  output gradients are ready); an event recorded after them.

Safety. The side stream reads tensors the main stream made (``x``, ``g``) and writes ``.grad`` of the
Linear parameters. The stage keeps references to what a ``W`` reads until the main stream has waited
for that ``W``'s event, so the caching allocator cannot hand their memory to the main stream while
the side stream still reads it. `SideStreamStage.sync` makes the current stream wait for every
outstanding ``W``; the fused ``B`` calls it itself, and the executor calls it before a gradient
all-reduce starts and before the optimizer step. A gradient the side stream allocated goes back to
the side stream's pool when it is freed, and the side stream's next work starts with
``side.wait_stream(main)``, so it reuses that memory only after the main stream's last use.

A Linear's parameters go to the side stream only when its ``forward`` is ``nn.Linear``'s own and no
other module of the stage holds them (weight tying); a Linear that does not run in a micro-batch's
forward (``nn.MultiheadAttention``'s ``out_proj``, whose weight the attention uses directly) gets its
gradients from autograd for that micro-batch. A module that calls a Linear and also uses its weight
directly (without holding it as its own parameter) is not detected: that direct use would get no
gradient, so don't use ``weight_stream`` with such models.
The stored output gradients cost memory between ``I`` and ``W`` (autograd would recompute them from
the layer's output gradient); in exchange ``W`` does not run the layer's backward again for them.

Only the arithmetic is checked on CPUs, where ``torch.cpu.Stream`` stands in for a stream and the
side stream's work runs at once (tests/layersched/methods/ooo/test_wstream.py: the same gradients as `Stage`,
and a pipelined run equal to the single-process reference); the overlap itself, and the stream
ordering above, need a CUDA device to observe.

Example
-------
>>> from layersched.runtime.workload import load_workload
>>> w = load_workload("examples/models.py:mlp", depth=2)
>>> stage = SideStreamStage(0, w.layers, is_first=True, is_last=True)
>>> (x, y), = w.batches(0, 1)
>>> loss = stage.forward(0, x, w.loss_fn, y)
>>> stage.backward(0, None, weights=False)  # I: no weight gradient yet
>>> stage.layers[1][1].weight.grad is None
True
>>> stage.weight(0)  # W: g^T x on the side stream
>>> stage.sync()
>>> stage.layers[1][1].weight.grad.shape
torch.Size([32, 32])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.autograd.graph import GradientEdge, get_gradient_edge

from layersched.runtime.runner import Stage


@dataclass(eq=False)
class LinearUse:
    """One call of an ``nn.Linear`` in a forward: its input (and the input's version, to catch an
    in-place change), the gradient edge of its output and, once known, the output gradient."""

    linear: nn.Linear
    x: torch.Tensor
    version: int
    edge: GradientEdge
    grad: torch.Tensor | None = None


def _own_params(module: nn.Module) -> Iterator[nn.Parameter]:
    return (p for p in module.parameters(recurse=False) if p.requires_grad)


def side_linears(layers: list[tuple[str, nn.Module]]) -> list[list[nn.Linear]]:
    """Per layer, the ``nn.Linear`` modules whose gradients `SideStreamStage` computes itself: those
    with ``nn.Linear``'s own ``forward``, in one layer only, with a parameter that needs a gradient
    and none that another module of the stage (other than such a Linear) holds too.

    >>> side_linears([("a", nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)))])
    [[Linear(in_features=2, out_features=2, bias=True)]]
    """

    layers_of = Counter(id(m) for _, layer in layers for m in layer.modules())

    def plain(m: nn.Module) -> bool:
        return isinstance(m, nn.Linear) and type(m).forward is nn.Linear.forward and layers_of[id(m)] == 1

    held_elsewhere = {
        id(p) for _, layer in layers for m in layer.modules() if not plain(m) for p in m.parameters(recurse=False)
    }

    def moves(m: nn.Module) -> bool:
        own = {id(p) for p in _own_params(m)}
        return plain(m) and bool(own) and not own & held_elsewhere

    return [[m for m in layer.modules() if moves(m)] for _, layer in layers]


@torch.no_grad()
def accumulate_linear_grads(uses: list[LinearUse]) -> None:
    """``weight.grad += g^T x`` and ``bias.grad += sum(g)`` over the leading dimensions, for every
    use (``.grad`` created where it is None), on the current stream; in the parameters' dtype.

    >>> lin = nn.Linear(3, 2)
    >>> x, g = torch.randn(4, 3), torch.randn(4, 2)
    >>> out = lin(x)
    >>> accumulate_linear_grads([LinearUse(lin, x, 0, get_gradient_edge(out), g)])
    >>> torch.allclose(lin.weight.grad, g.T @ x), torch.allclose(lin.bias.grad, g.sum(0))
    (True, True)
    """
    for use in uses:
        w, b = use.linear.weight, use.linear.bias
        g = use.grad.reshape(-1, w.shape[0]).to(w.dtype)
        if w.requires_grad:
            x = use.x.reshape(-1, w.shape[1]).to(w.dtype)
            if w.grad is None:
                w.grad = g.mT @ x
            else:
                w.grad.addmm_(g.mT, x)
        if b is not None and b.requires_grad:
            if b.grad is None:
                b.grad = g.sum(0)
            else:
                b.grad.add_(g.sum(0))


class SideStream:
    """A second stream on ``device`` (``torch.get_device_module(device).Stream``; on the CPU a
    stand-in whose work runs at once) and the waits around work launched on it. A device without
    a stream API runs the work inline."""

    def __init__(self, device: torch.device):
        self.device = device
        mod = torch.get_device_module(device)
        self.mod = mod if all(hasattr(mod, a) for a in ("Stream", "stream", "current_stream")) else None
        if self.mod is None:
            self.stream = None
        else:
            self.stream = self.mod.Stream() if device.type == "cpu" else self.mod.Stream(device=device)

    def launch(self, fn: Callable[[], None]) -> object | None:
        """Run ``fn`` on the side stream after the work the current stream holds so far; the event
        that marks its end (None where there is nothing to wait for)."""
        if self.stream is None:
            fn()
            return None
        self.stream.wait_stream(self.mod.current_stream(self.device))
        with self.mod.stream(self.stream):
            fn()
        return self.stream.record_event()

    def wait(self, event: object | None) -> None:
        """Make the current stream wait for ``event``."""
        if event is not None:
            self.mod.current_stream(self.device).wait_event(event)


class SideStreamStage(Stage):
    """A `Stage` whose ``W`` computes the gradients of its plain ``nn.Linear`` modules itself, on a
    side stream (see the module docstring). Call `sync` before anything on the current stream reads
    or writes the stage's gradients (the executor does, before a gradient all-reduce and the
    optimizer step; the fused ``B`` does it itself). On a GPU, the trace's span of a ``W`` covers
    its launch and its part on the current stream, not the side stream's kernels.

    The runner builds it where `RunConfig.stage_factory` names it (`weight_stream_stage`)."""

    option = "weight_stream"  # what chose it, for the runner's messages

    def __init__(self, index: int, layers: list[tuple[str, nn.Module]], is_first: bool, is_last: bool):
        super().__init__(index, layers, is_first, is_last)
        self.linears = side_linears(layers)
        self.layer_of = {id(m): j for j, ms in enumerate(self.linears) for m in ms}
        moved = {id(p) for ms in self.linears for m in ms for p in _own_params(m)}
        self.autograd_params = [[p for p in ps if id(p) not in moved] for ps in self.params]
        device = next((p.device for p in self.parameters()), torch.device("cpu"))
        self.side = SideStream(device)
        self.uses: dict[int, list[LinearUse]] = {}
        self.inflight: list[tuple[object | None, list[LinearUse]]] = []
        self._recording: list[LinearUse] | None = None
        self._capturing = False
        for ms in self.linears:
            for m in ms:
                m.register_forward_hook(self._on_forward, with_kwargs=True)

    def _on_forward(self, module: nn.Linear, args: tuple, kwargs: dict, output: torch.Tensor) -> None:
        if self._recording is None or not output.requires_grad:
            return
        x = args[0] if args else kwargs["input"]
        use = LinearUse(module, x, x._version, get_gradient_edge(output))
        output.register_hook(partial(self._on_grad, use))
        self._recording.append(use)

    def _on_grad(self, use: LinearUse, grad: torch.Tensor) -> None:
        if self._capturing and use.grad is None:
            use.grad = grad

    def forward(self, mb: int, x: torch.Tensor, loss_fn=None, target=None, scale: float = 1.0) -> torch.Tensor:
        """`Stage.forward`, keeping every Linear use of micro-batch ``mb``."""
        self._recording = []
        try:
            out = super().forward(mb, x, loss_fn, target, scale)
        finally:
            uses, self._recording = self._recording, None
        self.uses[mb] = uses
        return out

    def backward(self, mb: int, grad: torch.Tensor | None, weights: bool) -> torch.Tensor | None:
        """``I`` (``weights=False``): `Stage.backward`, keeping the Linear output gradients it
        computes on the way. ``B``: everything by autograd, after the side stream's work."""
        if weights:
            self.sync()
            self.uses.pop(mb, None)
            return super().backward(mb, grad, weights=True)
        self._capturing = True
        try:
            return super().backward(mb, grad, weights=False)
        finally:
            self._capturing = False

    def weight(self, mb: int) -> None:
        """Weight gradients of micro-batch ``mb``: the Linear ones on the side stream, the others by
        autograd on the current stream."""
        cells, grads, uses = self.cells.pop(mb), self.out_grads.pop(mb), self.uses.pop(mb)
        self._reap()
        self._missing_grads(cells, grads, uses)
        self._check_unchanged(uses)
        work = [u for u in uses if u.grad is not None]
        if work:
            self.inflight.append((self.side.launch(partial(accumulate_linear_grads, work)), work))
        ran = {id(u.linear) for u in uses}
        extra = [[p for m in ms if id(m) not in ran for p in _own_params(m)] for ms in self.linears]
        if any(extra):  # Linears that did not run: autograd, after side work on the same parameters
            pending = {id(p) for _, us in self.inflight for u in us for p in _own_params(u.linear)}
            if any(id(p) in pending for ps in extra for p in ps):
                self.sync()
        for (_, out), g, ps, more in zip(cells, grads, self.autograd_params, extra, strict=True):
            if (ps or more) and out.requires_grad:
                torch.autograd.backward(out, g, inputs=ps + more)

    def _missing_grads(self, cells: list, grads: list, uses: list[LinearUse]) -> None:
        """Output gradients of the Linear uses ``I`` did not reach (their input needs no gradient),
        by autograd from each layer's output gradient."""
        by_layer: dict[int, list[LinearUse]] = {}
        for u in uses:
            if u.grad is None:
                by_layer.setdefault(self.layer_of[id(u.linear)], []).append(u)
        for j, missing in by_layer.items():
            _, out = cells[j]
            if not out.requires_grad:
                continue
            found = torch.autograd.grad(out, [u.edge for u in missing], grads[j], retain_graph=True, allow_unused=True)
            for u, g in zip(missing, found, strict=True):
                u.grad = g

    def _check_unchanged(self, uses: list[LinearUse]) -> None:
        """Autograd checks that a saved tensor was not changed in place; `accumulate_linear_grads`
        reads the inputs without it, so check here."""
        for use in uses:
            if use.x._version != use.version:
                raise RuntimeError(
                    f"stage {self.index}: the input of a Linear of layer "
                    f"{self.layers[self.layer_of[id(use.linear)]][0]!r} changed in place after the Linear ran; "
                    "its weight gradient would be wrong: run without weight_stream"
                )

    def _reap(self) -> None:
        """Drop the references kept for side-stream work that has finished."""
        self.inflight = [(e, us) for e, us in self.inflight if e is not None and not e.query()]

    def sync(self) -> None:
        """Make the current stream wait for every ``W`` launched on the side stream, then drop the
        references kept for them."""
        for event, _ in self.inflight:
            self.side.wait(event)
        self.inflight.clear()


def weight_stream_stage() -> type[SideStreamStage]:
    """The stage factory for ``--weight-stream``: hand it to `RunConfig.stage_factory`."""
    return SideStreamStage
