"""Model builders for the runner's failure tests: the MLP of examples/models.py with one layer that
breaks when it runs (only the rank holding that layer runs it), or turns the loss NaN."""

from __future__ import annotations

import os
import time

from torch import nn

from layersched.runtime.workload import resolve
from tests.paths import EXAMPLES

mlp = resolve(f"{EXAMPLES / 'models.py'}:mlp")


class Breaks(nn.Module):
    """Runs ``layer``, but on the forward of the micro-batch numbered ``after`` does ``how``."""

    def __init__(self, layer: nn.Module, how: str, after: int = 1):
        super().__init__()
        self.layer, self.how, self.after, self.calls = layer, how, after, 0

    def forward(self, x):
        self.calls += 1
        if self.calls > self.after:
            if self.how == "exit":
                os._exit(3)
            if self.how == "raise":
                raise RuntimeError("layer fc6 broke")
            if self.how == "nan":
                return self.layer(x) * float("nan")
            time.sleep(3600)
        return self.layer(x)


def _broken(how: str, microbatch_size: int = 8, after: int = 1):
    w = mlp(microbatch_size=microbatch_size)
    w.layers = [(n, Breaks(m, how, after) if n == "fc6" else m) for n, m in w.layers]
    return w


def goes_nan(microbatch_size: int = 8):
    """Its output turns NaN from the first forward on."""
    return _broken("nan", microbatch_size, after=0)


def exits(microbatch_size: int = 8):
    return _broken("exit", microbatch_size)


def raises(microbatch_size: int = 8):
    return _broken("raise", microbatch_size)


def hangs(microbatch_size: int = 8):
    return _broken("hang", microbatch_size)


def tied_gpt(microbatch_size: int = 4):
    """gpt_small with its output projection tied to the token embedding (as GPT-2 does)."""
    w = resolve(f"{EXAMPLES / 'models.py'}:gpt_small")(microbatch_size=microbatch_size, vocab=32)
    layers = dict(w.layers)
    layers["head"].out.weight = layers["embed"].tokens.weight
    return w
