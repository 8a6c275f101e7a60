"""What a run trains: a model builder named ``path/to/file.py:function`` or ``module:function``.

The builder takes keyword options (at least ``microbatch_size``) and returns an object with

- ``layers``: an ``nn.Sequential`` (its children's names are the layer names), a dict or list of
  ``(name, module)`` pairs, or a plain list of modules (named ``"0"``, ``"1"``, ...); the names are
  those of the model description and of a schedule's ``stage_layers``;
- ``loss_fn(output, target) -> scalar``: the loss of one micro-batch (a mean over its samples);
- ``batches(step, num_microbatches) -> [(input, target), ...]``: the micro-batches of a step,
  the same on every call and every process (seeded by ``step``).

The builder must give the same initial weights on every call (seed its own generator): each rank
builds the model and keeps its stages. Each layer takes one tensor and returns one tensor. A layer
may declare ``sublayers`` (see `Workload.units`): a schedule may then cut inside it (LayerPipe's
inter-layer cuts), naming the parts ``layer.part`` in its ``stage_layers``.

Example
-------
>>> w = load_workload("examples/models.py:mlp", microbatch_size=2)
>>> [name for name, _ in w.layers][:3], len(w.batches(0, 4))
(['fc0', 'fc1', 'fc2'], 4)
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from layersched.runtime.plan import PlanError


@dataclass
class Workload:
    """A model as named layers, a loss and reproducible micro-batches."""

    layers: list[tuple[str, nn.Module]]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    batches: Callable[[int, int], list[tuple[torch.Tensor, torch.Tensor]]]
    name: str = "model"

    @property
    def layer_names(self) -> list[str]:
        return [name for name, _ in self.layers]

    def units(self, sublayers: bool = False) -> list[tuple[str, nn.Module]]:
        """The layers, or with ``sublayers`` each layer that declares sub-layers replaced by them, named
        ``layer.part``. A layer declares them with a ``sublayers`` attribute: ``(name, module)`` pairs
        that, run in turn, compute the layer (each takes one tensor and returns one)."""
        if not sublayers:
            return list(self.layers)
        out = []
        for name, layer in self.layers:
            parts = getattr(layer, "sublayers", None)
            out.extend((f"{name}.{sub}", m) for sub, m in parts) if parts else out.append((name, layer))
        return out

    def stage_units(self, stage_layers: list[list[str]] | None) -> tuple[list[str], list[list[str]] | None]:
        """The unit names a schedule's ``stage_layers`` refer to (whole layers, or sub-layers when it
        names any), and ``stage_layers`` with each whole layer that has sub-layers spelled out as them
        when it runs at sub-layer level."""
        whole = self.layer_names
        if stage_layers is None or all(n in whole for names in stage_layers for n in names):
            return whole, stage_layers
        subs = [n for n, _ in self.units(sublayers=True)]
        parts = {name: [f"{name}.{sub}" for sub, _ in layer.sublayers] for name, layer in self.layers
                 if getattr(layer, "sublayers", None)}  # fmt: skip
        return subs, [[u for n in names for u in parts.get(n, [n])] for names in stage_layers]


def named_layers(layers) -> list[tuple[str, nn.Module]]:
    """``layers`` as ``(name, module)`` pairs: from an ``nn.Sequential``, a dict, a list of pairs or
    a list of modules."""
    if isinstance(layers, nn.Sequential | nn.ModuleDict | dict):
        items = list(layers.named_children() if isinstance(layers, nn.Module) else layers.items())
    else:
        items = [(str(i), x) if isinstance(x, nn.Module) else tuple(x) for i, x in enumerate(layers)]
    for name, module in items:
        if not isinstance(module, nn.Module):
            raise PlanError(f"layer {name!r} is a {type(module).__name__}, not a torch.nn.Module")
    return [(str(name), module) for name, module in items]


def resolve(spec: str) -> Callable:
    """The function named by ``path/to/file.py:function`` or ``package.module:function``."""
    target, sep, func = spec.rpartition(":")
    if not sep or not target or not func:
        raise PlanError(f"model {spec!r}: expected 'path/to/file.py:function' or 'module:function'")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.exists():
            raise PlanError(f"model {spec!r}: file {target} not found")
        name = f"_layersched_model_{abs(hash(str(path)))}"
        module = sys.modules.get(name)
        if module is None:
            loader = importlib.util.spec_from_file_location(name, path)
            assert loader is not None and loader.loader is not None
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module
            try:
                loader.loader.exec_module(module)
            except Exception as exc:  # the model file's own error: said in one line, the file left unloaded
                del sys.modules[name]
                raise PlanError(f"model {spec!r}: importing {target} raised {_raised(exc, str(path))}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise PlanError(f"model {spec!r}: cannot import {target} ({exc})") from None
        except Exception as exc:
            raise PlanError(f"model {spec!r}: importing {target} raised {_raised(exc, _module_file(target))}") from exc
    fn = getattr(module, func, None)
    if not callable(fn):
        raise PlanError(f"model {spec!r}: {target} has no function {func!r}")
    return fn


def _raised(exc: BaseException, user_file: str | None) -> str:
    """``exc`` in one line, with where it was raised: a syntax error's own place, else the innermost
    line of ``user_file`` in its traceback (none when it is not there: a builtin builder called with
    the wrong arguments)."""
    text = ((exc.msg if isinstance(exc, SyntaxError) else str(exc)).strip().splitlines() or [""])[0][:200]
    what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{what} ({exc.filename}, line {exc.lineno})"
    mine = [f for f in traceback.extract_tb(exc.__traceback__) if user_file and Path(f.filename) == Path(user_file)]
    return f"{what} ({mine[-1].filename}, line {mine[-1].lineno})" if mine else what


def _module_file(name: str) -> str | None:
    """The file of module ``name`` without running it (None when it cannot be found that way)."""
    try:
        spec = importlib.util.find_spec(name)
    except Exception:  # a parent package that fails on import
        return None
    return spec.origin if spec is not None else None


def _source_file(fn: Callable) -> str | None:
    """The file ``fn`` was written in; None for a builtin (``math:sqrt``), which has none."""
    try:
        return inspect.getsourcefile(fn)
    except TypeError:
        return None


def _keywords_taken(builder: Callable) -> list[str] | None:
    """The keywords ``builder`` takes by name, or None where it takes any (``**kwargs``)."""
    params = inspect.signature(builder).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _label(spec: str | Callable) -> str:
    return spec if isinstance(spec, str) else getattr(spec, "__name__", "model")


def check_options(spec: str | Callable, keys) -> None:
    """`PlanError` when the builder ``spec`` names takes no option of that name for one of ``keys`` (the
    user's ``--model-arg`` keys). `load_workload` passes a builder only the options it takes, so that
    the runner's own (``microbatch_size``) reach builders without them; a misspelt ``--model-arg``
    would be dropped there without a word. A builder with ``**kwargs`` takes any key."""
    import difflib

    takes = _keywords_taken(resolve(spec) if isinstance(spec, str) else spec)
    if takes is None:
        return
    for key in keys:
        if key not in takes:
            close = difflib.get_close_matches(key, takes, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            every = ", ".join(takes) or "none"
            raise PlanError(f"model {_label(spec)}: the builder takes no option {key!r}; {hint}it takes {every}")


def load_workload(spec: str | Callable, **options) -> Workload:
    """Build the workload ``spec`` names (or a builder function), passing only the ``options``
    the builder accepts; `PlanError` when it does not return what a run needs."""
    builder = resolve(spec) if isinstance(spec, str) else spec
    takes = _keywords_taken(builder)
    options = {k: _dtype(v) for k, v in options.items()}
    label = _label(spec)
    try:
        built = builder(**{k: v for k, v in options.items() if v is not None and (takes is None or k in takes)})
    except Exception as exc:  # the builder's own error, where it was raised; `layersched --debug` shows it all
        raise PlanError(f"model {label}: the builder raised {_raised(exc, _source_file(builder))}") from exc
    missing = [a for a in ("layers", "loss_fn", "batches") if not hasattr(built, a)]
    if missing:
        raise PlanError(
            f"model {label}: the builder's result has no {', '.join(missing)}; return an object "
            "with layers, loss_fn and batches(step, num_microbatches)"
        )
    return Workload(named_layers(built.layers), built.loss_fn, built.batches, getattr(built, "name", str(label)))


def check_layers(workload: Workload, units: list[tuple[str, nn.Module]] | None = None) -> None:
    """The layer contract, checked on one micro-batch on the meta device (no memory, no compute):
    each layer (or sub-layer, ``units``) takes one tensor and returns one tensor, the next one takes
    it, and the loss takes the last one with the target. `PlanError` naming the layer and the fix
    (a layer whose operations have no meta kernel is not checked further). Each layer runs as a copy
    whose tensors are meta tensors, so whatever its forward changes (counters, running statistics)
    changes the copy, not the model."""
    import copy

    units = workload.layers if units is None else units
    x, target = workload.batches(0, 1)[0]
    h, prev = x.to("meta"), "the input"
    for name, layer in units:
        try:
            with torch.no_grad():
                memo = {id(t): _meta(t) for t in (*layer.parameters(), *layer.buffers())}  # no storage copied
                out = copy.deepcopy(layer, memo)(h)
        except NotImplementedError:
            return  # no meta kernel: the run itself will tell
        except Exception as exc:
            raise PlanError(
                f"layer {name!r} fails on {prev} (shape {tuple(h.shape)}, {h.dtype}): {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}; a layer takes the previous layer's output tensor"
            ) from None
        if isinstance(out, tuple | list):
            raise PlanError(
                f"layer {name!r} returns a {type(out).__name__} of {len(out)}, not a tensor; a layer returns the one "
                "tensor the next layer takes: wrap it, e.g. a module whose forward returns block(x)[0] "
                "(Hugging Face blocks return (hidden_states, ...))"
            )
        if not isinstance(out, torch.Tensor):
            raise PlanError(
                f"layer {name!r} returns {type(out).__name__}, not a tensor; a layer returns the one tensor the next "
                "layer takes (for a dict output, e.g. out['last_hidden_state'])"
            )
        h, prev = out, f"the output of {name!r}"
    try:
        with torch.no_grad():
            loss = workload.loss_fn(h, target.to("meta"))
    except NotImplementedError:
        return
    except Exception as exc:
        raise PlanError(
            f"loss_fn fails on the output of the last layer {units[-1][0]!r} (shape {tuple(h.shape)}) and the target "
            f"(shape {tuple(target.shape)}): {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        ) from None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = type(loss).__name__ if not isinstance(loss, torch.Tensor) else f"a tensor of shape {tuple(loss.shape)}"
        raise PlanError(f"loss_fn returns {what}; it must return one number (a tensor with one element), e.g. a mean")


def _meta(t: torch.Tensor) -> torch.Tensor:
    m = t.detach().to("meta")
    return nn.Parameter(m, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else m


def _dtype(value):
    """A ``"torch.bfloat16"``-like text (from ``--model-arg dtype=torch.bfloat16``) as the dtype;
    anything else as it is."""
    if isinstance(value, str) and value.startswith("torch."):
        found = getattr(torch, value.removeprefix("torch."), None)
        if isinstance(found, torch.dtype):
            return found
    return value


def dropout_layers(workload: Workload) -> list[str]:
    """The layers of ``workload`` that hold an active dropout module (``torch.nn`` dropout with p > 0):
    their random draws differ between a pipelined run and one process, so no check can match them."""
    from torch import nn

    kinds = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
    found = []
    for name, layer in workload.layers:
        for m in layer.modules():
            if isinstance(m, kinds) and m.p > 0:
                found.append(name)
                break
    return found
