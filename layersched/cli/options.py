"""The options several commands share, declared once and checked when they are parsed.

Each ``add_*`` adds one option to an `argparse` parser with its type, default and help; the types
refuse a bad value (zero, negative, not finite) with argparse's one-line usage error, exit status 2.

Example
-------
>>> import argparse
>>> p = argparse.ArgumentParser()
>>> add_time_limit(p, 30.0, "solver time limit")
>>> p.parse_args(["--time-limit", "5"]).time_limit
5.0
>>> positive_float("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be a finite number above 0, got 0
"""

from __future__ import annotations

import argparse
import math

NEEDS_TORCH = (
    "this command needs torch, which is not installed; pip install 'layersched[torch]' "
    "(on these machines: pip install torch==2.13.0)"
)
"""What a command that trains or profiles says where torch cannot be imported."""


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    return whole_number(text, least=1)


def seed_number(text: str) -> int:
    """A random seed: an integer from 0 to 2**32 - 1 (the ranks' seeds add the rank to it)."""
    return whole_number(text, least=0, most=2**32 - 1)


def search_seed(text: str) -> int:
    """A search's seed: an integer from 0 to 2**31 - 2 (CP-SAT's own seed is it plus 1, a 32-bit
    integer; `solvers.cpsat.seed_solver`)."""
    return whole_number(text, least=0, most=2**31 - 2)


def two_or_more(text: str) -> int:
    """An integer of at least 2 (say, the points of a sweep)."""
    return whole_number(text, least=2)


def whole_number(text: str, *, least: int, most: int | None = None) -> int:
    """``text`` as an integer from ``least`` (to ``most``), or argparse's error naming both."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {text}")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(f"must be at most {most:,}, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0."""
    return _finite(text, above=0.0)


def non_negative_float(text: str) -> float:
    """A finite number of at least 0."""
    return _finite(text, at_least=0.0)


def _finite(text: str, *, above: float | None = None, at_least: float | None = None) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    too_low = (above is not None and value <= above) or (at_least is not None and value < at_least)
    if not math.isfinite(value) or too_low:
        bound = f"above {above:g}" if above is not None else f"of at least {at_least:g}"
        raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text}")
    return value


def add_time_limit(p: argparse.ArgumentParser, default: float | None, what: str) -> None:
    """``--time-limit S``: seconds, above 0."""
    tail = f" (default {default:g} s)" if default is not None else ""
    p.add_argument("--time-limit", type=positive_float, default=default, metavar="S", help=f"{what} in seconds{tail}")


def add_quiet(p: argparse.ArgumentParser, what: str = "print nothing but errors") -> None:
    """``--quiet``."""
    p.add_argument("--quiet", action="store_true", help=what)


def add_device(p: argparse.ArgumentParser, default: str | None, what: str) -> None:
    """``--device cpu|cuda``."""
    p.add_argument("--device", choices=["cpu", "cuda"], default=default, help=what)


def add_threads(p: argparse.ArgumentParser, what: str = "torch threads per process (default 1)") -> None:
    """``--threads N``: torch threads per process, at least 1."""
    p.add_argument("--threads", type=positive_int, default=1, metavar="N", help=what)


def add_timeout(p: argparse.ArgumentParser, default: float, what: str) -> None:
    """``--timeout S``: seconds before a stuck run is stopped."""
    p.add_argument("--timeout", type=positive_float, default=default, metavar="S", help=f"{what} (default {default:g})")


def add_steps(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """``--steps N``: training steps, at least 1."""
    p.add_argument("--steps", type=positive_int, default=default, metavar="N", help=f"{what} (default {default})")


def add_sgd(p: argparse.ArgumentParser, lr: float, momentum: float) -> None:
    """``--lr`` and ``--momentum`` of SGD."""
    p.add_argument("--lr", type=positive_float, default=lr, help=f"SGD learning rate (default {lr:g})")
    p.add_argument("--momentum", type=non_negative_float, default=momentum, help=f"SGD momentum (default {momentum:g})")


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model-arg KEY=VALUE`` (repeatable): keywords for the model builder, as `keywords` reads them."""
    p.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another keyword for the model builder, e.g. depth=4 (repeatable)",
    )


def keywords(items: list[str], option: str, example: str) -> dict:
    """``KEY=VALUE`` items as keywords: values read as Python literals, else kept as strings."""
    import ast

    from layersched.describe.config import SpecError

    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise SpecError(f"{option} {item!r}: expected KEY=VALUE, e.g. {example}")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value  # text; the workload reads "torch.bfloat16" and the like as dtypes
    return options
