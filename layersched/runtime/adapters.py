"""Models from the ecosystems users come from, as workloads: Hugging Face causal language models.

``--model layersched.runtime.adapters:hf_gpt2`` (or ``hf_llama``) builds the model from a config with
random weights (no download; ``--model-arg layers=4``, ``hidden=128``, ``tie=True`` ...) and cuts it
into the layers a schedule places: the embedding, each decoder block, and the head (final norm and
output projection). What a user would otherwise write by hand is here:

- the embedding adds GPT-2's learned positions (Llama's rotary positions are computed in each block
  from the sequence, as its model does);
- each block gets the causal mask (and Llama its rotary angles) and returns the one tensor the next
  block takes, whatever tuple its Hugging Face version returns;
- dropout is 0, so a run can equal the single-process reference;
- the loss is Hugging Face's causal LM loss: cross entropy of each position's logits against the
  next token.

``tie=True`` ties the output projection to the token embedding, as GPT-2 ships: stages holding the
two keep their copies in step (see `layersched.runtime.runner.check_shared_parameters`).

Needs ``transformers`` (``pip install 'layersched[hf]'``).

torchvision models would come the same way; on this project's machines torchvision has no build for
the local torch, so that adapter is not here yet.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from layersched.runtime.plan import PlanError
from layersched.runtime.workload import Workload


def _transformers():
    try:
        import transformers
    except ImportError:
        raise PlanError("the Hugging Face adapters need transformers: pip install 'layersched[hf]'") from None
    return transformers


def _causal_mask(h: torch.Tensor) -> torch.Tensor:
    """Additive mask of shape (1, 1, T, T): 0 on and below the diagonal, the dtype's minimum above."""
    T = h.shape[1]
    upper = torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1)
    return torch.zeros(T, T, dtype=h.dtype, device=h.device).masked_fill(upper, torch.finfo(h.dtype).min)[None, None]


def _hidden(out):
    """The hidden states of a block's output, a tensor or a tuple starting with it."""
    return out[0] if isinstance(out, tuple | list) else out


class GPT2Embedding(nn.Module):
    def __init__(self, wte: nn.Embedding, wpe: nn.Embedding):
        super().__init__()
        self.wte, self.wpe = wte, wpe

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.wte(ids) + self.wpe(positions)[None]


class GPT2Layer(nn.Module):
    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return _hidden(self.block(h, attention_mask=_causal_mask(h)))


class LlamaLayer(nn.Module):
    def __init__(self, block: nn.Module, rotary: nn.Module):
        super().__init__()
        self.block = block
        self.rotary = [rotary]  # shared, parameter-free (a list keeps it out of this module's state)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(h.shape[1], device=h.device)[None]
        angles = self.rotary[0](h, positions)
        out = self.block(h, attention_mask=_causal_mask(h), position_ids=positions, position_embeddings=angles)
        return _hidden(out)


class Head(nn.Module):
    def __init__(self, norm: nn.Module, out: nn.Linear):
        super().__init__()
        self.norm, self.out = norm, out

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(h))


def causal_lm_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Hugging Face's causal LM loss: position t predicts token t+1 (mean over the batch's positions)."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def _token_batches(vocab: int, seq: int, microbatch_size: int, seed: int):
    def batches(step: int, num_microbatches: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(1_000_003 * (seed + 1) + step)
        out = []
        for _ in range(num_microbatches):
            ids = torch.randint(0, vocab, (microbatch_size, seq), generator=g)
            out.append((ids, ids))
        return out

    return batches


def _built(model_class, config, seed: int, dtype: torch.dtype) -> nn.Module:
    """The Hugging Face model of ``config`` with the random weights ``seed`` gives, in ``dtype``."""
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        torch.manual_seed(seed)
        return model_class(config).to(dtype)


def _workload(named, model: nn.Module, name: str, vocab: int, seq: int, microbatch_size: int, seed: int) -> Workload:
    w = Workload(named, causal_lm_loss, _token_batches(vocab, seq, microbatch_size, seed), name=name)
    w.hf_model = model  # the whole model, to check the layers against
    return w


def hf_gpt2(
    microbatch_size: int = 4,
    layers: int = 4,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 128,
    seq: int = 16,
    tie: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Workload:
    """A Hugging Face GPT-2 (``GPT2LMHeadModel``) from a config, random weights, dropout 0."""
    tf = _transformers()
    config = tf.GPT2Config(
        n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab, n_positions=seq,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = _built(tf.GPT2LMHeadModel, config, seed, dtype)
    t = model.transformer
    named = [("embed", GPT2Embedding(t.wte, t.wpe))]
    named += [(f"h{i}", GPT2Layer(block)) for i, block in enumerate(t.h)]
    named.append(("head", Head(t.ln_f, model.lm_head)))
    return _workload(named, model, "hf-gpt2", vocab, seq, microbatch_size, seed)


def hf_llama(
    microbatch_size: int = 4,
    layers: int = 4,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 128,
    seq: int = 16,
    tie: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Workload:
    """A small Hugging Face Llama (``LlamaForCausalLM``) from a config, random weights."""
    tf = _transformers()
    config = tf.LlamaConfig(
        num_hidden_layers=layers, hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=heads,
        num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=seq, tie_word_embeddings=tie,
        attention_dropout=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = _built(tf.LlamaForCausalLM, config, seed, dtype)
    m = model.model
    named = [("embed", m.embed_tokens)]
    named += [(f"layers{i}", LlamaLayer(block, m.rotary_emb)) for i, block in enumerate(m.layers)]
    named.append(("head", Head(m.norm, model.lm_head)))
    return _workload(named, model, "hf-llama", vocab, seq, microbatch_size, seed)
