"""Known pipeline schedules as templates: each gives every rank its ordered list of actions.

A template only decides the order; `solvers.time_orders` computes the start times from the task
graph (so transfer delays and uneven stages are honoured) and `solvers.validate` checks the result.

Example
-------
>>> from layersched.stages import pipeline_from_spec
>>> from layersched.config import ProblemSpec
>>> pipe = pipeline_from_spec(ProblemSpec.model_validate({"name": "t", "pipeline": {
...     "stages": 2, "microbatches": 3, "forward": 1, "backward_input": 1, "backward_weight": 1}}))
>>> template_orders("1f1b", pipe)[0]
['0F0', '0F1', '0B0', '0F2', '0B1', '0B2']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from layersched.stages import Pipeline


class TemplateError(ValueError):
    """A template that cannot apply to this pipeline; the message says why and what would fit."""


@dataclass(frozen=True)
class Template:
    name: str
    build: Callable[[Pipeline], list[list[str]]]
    split_backward: bool
    placement: str
    description: str
    min_stages_per_rank: int = 1
    max_stages_per_rank: int | None = 1


TEMPLATES: dict[str, Template] = {}


def template(name: str, *, split_backward: bool, placement: str = "loop", stages_per_rank: tuple[int, int | None] = (1, 1)):
    """Register a template builder ``f(pipe) -> per-rank action lists`` under ``name``."""

    def deco(fn: Callable[[Pipeline], list[list[str]]]):
        doc = (fn.__doc__ or "").strip().splitlines()[0]
        TEMPLATES[name] = Template(name, fn, split_backward, placement, doc, *stages_per_rank)
        return fn

    return deco


def template_names() -> list[str]:
    return sorted(TEMPLATES)


def get_template(name: str) -> Template:
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(template_names())}") from None


def template_orders(name: str, pipe: Pipeline) -> list[list[str]]:
    """Per-rank compute actions of template ``name``; `TemplateError` when it does not apply."""
    t = get_template(name)
    v = pipe.stages_per_rank
    if v < t.min_stages_per_rank or (t.max_stages_per_rank is not None and v > t.max_stages_per_rank):
        want = (f"exactly {t.min_stages_per_rank}" if t.min_stages_per_rank == t.max_stages_per_rank
                else f"at least {t.min_stages_per_rank}")
        raise TemplateError(f"schedule {name!r} needs {want} stage(s) per rank, the pipeline has {v}")
    return t.build(pipe)


def _one_f_one_b_order(p: int, m: int, r: int, backward: tuple[str, ...]) -> list[str]:
    """Rank r of a one-stage-per-rank pipeline: p-1-r warm-up forwards, then one forward and one
    backward in turn, then the remaining backwards."""
    warm = min(p - 1 - r, m)
    out = [f"{r}F{i}" for i in range(warm)]
    for i in range(m - warm):
        out.append(f"{r}F{warm + i}")
        out.extend(f"{r}{k}{i}" for k in backward)
    for i in range(m - warm, m):
        out.extend(f"{r}{k}{i}" for k in backward)
    return out


@template("gpipe", split_backward=False)
def gpipe(pipe: Pipeline) -> list[list[str]]:
    """GPipe: all forwards, then all backwards (fused), one stage per rank."""
    m = pipe.num_microbatches
    return [[f"{r}F{i}" for i in range(m)] + [f"{r}B{i}" for i in range(m)] for r in range(pipe.num_ranks)]


@template("1f1b", split_backward=False)
def one_f_one_b(pipe: Pipeline) -> list[list[str]]:
    """1F1B (PipeDream-flush): p-1-r warm-up forwards on rank r, then alternate, fused backward."""
    return [_one_f_one_b_order(pipe.num_ranks, pipe.num_microbatches, r, ("B",)) for r in range(pipe.num_ranks)]


@template("1f1b-split", split_backward=True)
def one_f_one_b_split(pipe: Pipeline) -> list[list[str]]:
    """1F1B with the backward split into I then W, W right after its I."""
    return [_one_f_one_b_order(pipe.num_ranks, pipe.num_microbatches, r, ("I", "W")) for r in range(pipe.num_ranks)]
