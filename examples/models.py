"""Small models to run schedules with: ``examples/models.py:mlp`` and ``examples/models.py:gpt_small``.

Each builder returns a `layersched.runtime.workload.Workload`: named layers (the names a problem
file and a schedule's ``stage_layers`` use), a loss and reproducible micro-batches. Weights are
seeded, so every rank builds the same model; float64 by default, so a pipelined run and a
single-process run agree to rounding.

Run one with a schedule::

    layersched solve problems/mlp-tiny.yaml --out schedule.json      # layers fc0..fc3
    torchrun --nproc-per-node 2 -m layersched.run schedule.json --model examples/models.py:mlp \\
        --model-arg depth=4 --steps 20

Example
-------
>>> w = gpt_small(microbatch_size=2)
>>> w.layer_names
['embed', 'block0', 'block1', 'block2', 'block3', 'head']
>>> x, y = w.batches(0, 1)[0]
>>> w.loss_fn(torch.nn.Sequential(*(m for _, m in w.layers))(x), y).item() > 0
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from layersched.runtime.workload import Workload


def mlp(
    microbatch_size: int = 8,
    width: int = 32,
    depth: int = 8,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    dropout: float = 0.0,
) -> Workload:
    """``depth`` layers ``fc0..``, each a linear map and a ReLU (the last without), regression loss.
    With ``dropout`` > 0 each ReLU is followed by dropout (a run then draws random numbers; it cannot
    equal the single-process reference, but a run resumed from a checkpoint equals one never stopped)."""

    def hidden() -> nn.Module:
        act = [nn.ReLU(), nn.Dropout(dropout)] if dropout else [nn.ReLU()]
        return nn.Sequential(nn.Linear(width, width), *act)

    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        torch.manual_seed(seed)
        layers = [(f"fc{i}", hidden() if i < depth - 1 else nn.Linear(width, width)) for i in range(depth)]
    for _, layer in layers:
        layer.to(dtype)

    def batches(step: int, num_microbatches: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(1_000_003 * (seed + 1) + step)
        shape = (microbatch_size, width)
        return [
            (torch.randn(shape, generator=g, dtype=dtype), torch.randn(shape, generator=g, dtype=dtype))
            for _ in range(num_microbatches)
        ]

    return Workload(layers, F.mse_loss, batches, name="mlp")


class Embedding(nn.Module):
    """Token and position embeddings."""

    def __init__(self, vocab: int, seq_len: int, hidden: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(seq_len, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))


class Attention(nn.Module):
    """A block's first part: ``x + proj(causal self-attention(norm(x)))``."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = (
            z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in self.qkv(self.norm1(x)).split(h, dim=2)
        )
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(att.transpose(1, 2).reshape(b, t, h))


class MLP(nn.Module):
    """A block's second part: ``x + mlp(norm(x))``."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm2 = nn.LayerNorm(hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(self.norm2(x))


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and an MLP, each with a residual. It declares
    the two as ``sublayers`` (``attn``, ``mlp``): a schedule may cut between them."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.attn, self.mlp = Attention(hidden, heads), MLP(hidden)

    @property
    def sublayers(self) -> list[tuple[str, nn.Module]]:
        return [("attn", self.attn), ("mlp", self.mlp)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attn(x))


class Head(nn.Module):
    """Final norm and the projection to the vocabulary."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.norm, self.out = nn.LayerNorm(hidden), nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


def _next_token_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def gpt_small(
    microbatch_size: int = 4,
    seq_len: int = 16,
    vocab: int = 64,
    hidden: int = 32,
    heads: int = 4,
    num_layers: int = 4,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> Workload:
    """A small GPT: ``embed``, ``block0..``, ``head``; next-token cross-entropy on random tokens."""
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        torch.manual_seed(seed)
        layers = (
            [("embed", Embedding(vocab, seq_len, hidden))]
            + [(f"block{i}", Block(hidden, heads)) for i in range(num_layers)]
            + [("head", Head(hidden, vocab))]
        )
    for _, layer in layers:
        layer.to(dtype)

    def batches(step: int, num_microbatches: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(1_000_003 * (seed + 1) + step)
        out = []
        for _ in range(num_microbatches):
            ids = torch.randint(vocab, (microbatch_size, seq_len + 1), generator=g)
            out.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
        return out

    return Workload(layers, _next_token_loss, batches, name="gpt_small")
