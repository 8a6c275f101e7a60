"""`SideStreamStage`: weight gradients of nn.Linear layers computed explicitly (on a side stream on a
GPU; here, on CPUs, only the arithmetic and the bookkeeping are checked). Its gradients equal those
of the plain `Stage`, and a pipelined run with ``weight_stream`` equals the single-process reference."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from layersched.cli.run import parser  # noqa: E402
from layersched.formats.export import schedule_file  # noqa: E402
from layersched.methods.ooo.wstream import SideStreamStage, side_linears  # noqa: E402
from layersched.runtime.launch import launch_jobs  # noqa: E402
from layersched.runtime.plan import PlanError  # noqa: E402
from layersched.runtime.runner import RunConfig, Stage, prepare, train_reference  # noqa: E402
from layersched.runtime.workload import load_workload  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from tests.layersched.schedule.test_core_path import stage_pipeline  # noqa: E402
from tests.paths import ROOT  # noqa: E402

MLP = f"{ROOT / 'examples' / 'models.py'}:mlp"
GPT = f"{ROOT / 'examples' / 'models.py'}:gpt_small"


class Twice(nn.Module):
    """One Linear used twice in a forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(torch.tanh(self.lin(x)))


class Tied(nn.Module):
    """A Linear whose weight its parent also holds and uses directly."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.w = self.lin.weight

    def forward(self, x):
        return self.lin(x) @ self.w


class Attention(nn.Module):
    """nn.MultiheadAttention: its out_proj is a Linear whose forward never runs."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def mixed(microbatch_size: int = 3):
    """Layers a plain-Linear rule must not get wrong, in float64."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layers = [("norm", nn.LayerNorm(8)), ("twice", Twice()), ("tied", Tied()), ("attn", Attention())]
    for _, m in layers:
        m.double()

    def batches(step, n):
        g = torch.Generator().manual_seed(step)
        shape = (microbatch_size, 5, 8)
        return [(torch.randn(shape, generator=g, dtype=torch.float64),) * 2 for _ in range(n)]

    return SimpleNamespace(layers=layers, loss_fn=nn.functional.mse_loss, batches=batches)


def _run_stage(cls, model, take: slice, first: bool, last: bool, num_mb: int = 2):
    """F of every micro-batch, then every I, then every W, on a stage of ``model``'s layers
    ``take``; its parameter gradients and the input gradients I returned. A middle stage gets
    random output gradients; one that is not first an input that needs a gradient (hidden states
    of width 32 where the model's input is token ids)."""
    w = load_workload(model)
    layers = w.layers[take]
    stage = cls(0, layers, first, last)
    batches = w.batches(0, num_mb)
    g = torch.Generator().manual_seed(7)
    out_grads = []
    for mb, (x, y) in enumerate(batches):
        if not first:
            x = x.clone() if x.is_floating_point() else torch.randn(*x.shape, 32, generator=g, dtype=torch.float64)
            x.requires_grad_()
        out = stage.forward(mb, x, w.loss_fn, y, 1.0 / num_mb)
        out_grads.append(None if last else torch.randn(out.shape, generator=g, dtype=out.dtype))
    in_grads = [stage.backward(mb, out_grads[mb], weights=False) for mb in range(num_mb)]
    for mb in range(num_mb):
        stage.weight(mb)
    stage.sync()
    assert not stage.cells and not stage.out_grads
    grads = {f"{n}.{k}": p.grad for n, m in layers for k, p in m.named_parameters()}
    return stage, grads, in_grads


def _assert_same(model, take, first, last, monkeypatch):
    _, ref, ref_in = _run_stage(Stage, model, take, first, last)
    by_autograd = set()
    real_backward = torch.autograd.backward

    def spy(tensors, grad_tensors=None, *, inputs=None, **kwargs):
        by_autograd.update(id(p) for p in inputs or [])
        return real_backward(tensors, grad_tensors, inputs=inputs, **kwargs)

    monkeypatch.setattr(torch.autograd, "backward", spy)
    stage, got, got_in = _run_stage(SideStreamStage, model, take, first, last)
    assert not stage.uses and not stage.inflight
    by_autograd &= {id(p) for p in stage.parameters()}  # not the layer inputs of I
    assert sorted(got) == sorted(ref)
    for name in ref:
        assert (got[name] is None) == (ref[name] is None), name
        if ref[name] is not None:
            assert got[name].dtype == ref[name].dtype and got[name].shape == ref[name].shape
            torch.testing.assert_close(got[name], ref[name], rtol=1e-12, atol=1e-14, msg=name)
    for a, b in zip(got_in, ref_in, strict=True):
        assert (a is None) == (b is None) == first
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    return stage, by_autograd


@pytest.mark.parametrize(
    ("model", "take", "first", "last"),
    [
        (MLP, slice(0, 8), True, True),  # the first layer: I reaches no Linear output, W asks autograd
        (MLP, slice(2, 5), False, False),
        (GPT, slice(0, 6), True, True),
        (GPT, slice(1, 3), False, False),  # transformer blocks: LayerNorms by autograd
    ],
    ids=["mlp-whole", "mlp-middle", "gpt-whole", "gpt-blocks"],
)
def test_i_then_w_equals_the_plain_stage(model, take, first, last, monkeypatch):
    stage, by_autograd = _assert_same(model, take, first, last, monkeypatch)
    linears = [m for _, layer in stage.layers for m in layer.modules() if isinstance(m, nn.Linear)]
    assert linears and [m for ms in stage.linears for m in ms] == linears
    linear_params = {id(p) for m in linears for p in m.parameters()}
    # every Linear gradient came from g^T x, none from autograd; every other one from autograd
    assert not by_autograd & linear_params
    others = {id(p) for p in stage.parameters()} - linear_params
    assert by_autograd == others


def test_layers_without_plain_linears_keep_autograd(monkeypatch):
    stage, by_autograd = _assert_same(mixed, slice(0, 4), False, True, monkeypatch)
    norm, twice, tied, attn = (m for _, m in stage.layers)
    # the LayerNorm has no Linear; the tied Linear and out_proj (whose forward never runs) go to autograd
    assert stage.linears == [[], [twice.lin], [], [attn.mha.out_proj]]
    assert side_linears(stage.layers) == stage.linears
    expected = {id(p) for m in (norm, tied, attn) for p in m.parameters()}
    assert by_autograd == expected


def test_fused_b_after_deferred_w():
    """A fused B of one micro-batch among I+W of others accumulates into the same gradients."""
    grads = []
    for cls in (Stage, SideStreamStage):
        w = load_workload(MLP, depth=3)
        stage = cls(0, w.layers, True, True)
        batches = w.batches(0, 3)
        for mb, (x, y) in enumerate(batches):
            stage.forward(mb, x, w.loss_fn, y)
        stage.backward(0, None, weights=False)
        stage.backward(1, None, weights=False)
        stage.weight(0)
        stage.backward(2, None, weights=True)
        stage.weight(1)
        stage.sync()
        grads.append([p.grad for p in stage.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_in_place_change_of_a_linear_input_is_refused():
    lin = nn.Linear(4, 4).double()

    class Bad(nn.Module):
        def forward(self, x):
            h = x * 1
            out = lin(h)
            h.add_(1)  # lin's saved input changed after it ran
            return out

    # a first stage: I computes no gradient there, so autograd never looks at lin's saved input
    stage = SideStreamStage(0, [("bad", nn.Sequential(Bad(), lin))], True, True)
    x = torch.randn(2, 4, dtype=torch.float64)
    stage.forward(0, x, lambda out, y: out.sum(), None)
    stage.backward(0, None, weights=False)
    with pytest.raises(RuntimeError, match="changed in place after the Linear ran"):
        stage.weight(0)


def test_weight_stream_config_and_flag():
    doc = schedule_file(
        solve_pipeline(
            stage_pipeline(stages=2, microbatches=4, forward=2, backward_input=2, backward_weight=1, transfer=1),
            schedule="zb-h1",
        )
    )
    with pytest.raises(PlanError, match="^weight_stream needs runtime 'layersched', not 'torch'"):
        prepare(RunConfig(doc, MLP, runtime="torch", stage_factory=SideStreamStage), 2)
    args = ["s.json", "--model", MLP]
    assert parser().parse_args([*args, "--weight-stream"]).weight_stream
    assert not parser().parse_args(args).weight_stream


STEPS, LR, MOMENTUM = 2, 0.05, 0.9


def test_run_with_weight_stream_equals_single_process_reference():
    """zb-h1 on gpt_small over 2 pipeline ranks, and 1f1b-split on the MLP over 2 replicas (the
    all-reduce waits for W), in one set of processes."""
    pipe = stage_pipeline(stages=2, microbatches=4, forward=2, backward_input=2, backward_weight=1, transfer=1)
    gpt_doc = schedule_file(
        solve_pipeline(
            replace(pipe, stage_layers=[["embed", "block0"], ["block1", "block2", "block3", "head"]]),
            schedule="zb-h1",
        )
    )
    one = stage_pipeline(stages=1, microbatches=2, forward=2, backward_input=2, backward_weight=1, transfer=1)
    dp_doc = schedule_file(solve_pipeline(replace(one, data_parallel=2), schedule="1f1b-split"))
    assert any(a[1] == "W" for a in gpt_doc.actions[0]) and any(a[1] == "W" for a in dp_doc.actions[0])
    jobs = [
        RunConfig(doc, model, steps=STEPS, lr=LR, momentum=MOMENTUM, stage_factory=SideStreamStage)
        for doc, model in ((gpt_doc, GPT), (dp_doc, MLP))
    ]
    for job, results in zip(jobs, launch_jobs(jobs, timeout=300), strict=True):
        p = job.schedule.pipeline
        ref, ref_losses = train_reference(
            job.model, p.num_microbatches * p.data_parallel, steps=STEPS, lr=LR, momentum=MOMENTUM
        )
        init = {f"{n}.{k}": v for n, m in load_workload(job.model).layers for k, v in m.named_parameters()}
        for r in results:
            for name, value in r.params.items():
                torch.testing.assert_close(
                    value - init[name], ref[name] - init[name], rtol=1e-5, atol=1e-12, msg=f"{job.model}: {name}"
                )
        assert sorted(k for r in results if r.replica == 0 for k in r.params) == sorted(ref)
        losses = [r.losses for r in results if r.losses is not None]
        assert [sum(x) / len(x) for x in zip(*losses, strict=True)] == pytest.approx(ref_losses, rel=1e-9)
