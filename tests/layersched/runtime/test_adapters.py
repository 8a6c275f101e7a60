"""The Hugging Face adapters: the layers compute the Hugging Face model's own logits and loss, and
train through the runner equal to the single-process reference, tied or not, on 2 and 4 gloo ranks."""

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from layersched.formats.export import schedule_file  # noqa: E402
from layersched.runtime.adapters import hf_gpt2, hf_llama  # noqa: E402
from layersched.runtime.launch import launch_jobs  # noqa: E402
from layersched.runtime.runner import RunConfig, check_against_reference  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from tests.layersched.runtime.test_runner_plan import stage_pipe  # noqa: E402

GPT2, LLAMA = "layersched.runtime.adapters:hf_gpt2", "layersched.runtime.adapters:hf_llama"


@pytest.mark.parametrize("build,tie", [(hf_gpt2, False), (hf_gpt2, True), (hf_llama, False), (hf_llama, True)])
def test_the_layers_are_the_hugging_face_model(build, tie):
    w = build(tie=tie)
    ids, labels = w.batches(0, 1)[0]
    h = ids
    with torch.no_grad():
        for _, layer in w.layers:
            h = layer(h)
        want = w.hf_model(ids, labels=labels)
    torch.testing.assert_close(h, want.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.loss_fn(h, labels), want.loss, rtol=1e-5, atol=1e-6)
    head, embed = dict(w.layers)["head"].out.weight, w.hf_model.get_input_embeddings().weight
    assert (head is embed) == tie


CASES = [  # the default run trains one of each model; -m slow the other two
    pytest.param(GPT2, False, [["embed", "h0", "h1"], ["h2", "h3", "head"]], marks=pytest.mark.slow),
    (GPT2, True, [["embed", "h0"], ["h1"], ["h2"], ["h3", "head"]]),  # the tie spans ranks 0 and 3
    (LLAMA, False, [["embed", "layers0", "layers1"], ["layers2", "layers3", "head"]]),
    pytest.param(
        LLAMA, True, [["embed", "layers0"], ["layers1"], ["layers2"], ["layers3", "head"]], marks=pytest.mark.slow
    ),
]


@pytest.mark.parametrize("model,tie,layers", CASES, ids=["gpt2-2", "gpt2-tied-4", "llama-2", "llama-tied-4"])
def test_hugging_face_models_train_as_the_reference(model, tie, layers):
    pipe = replace(stage_pipe(len(layers), 4), stage_layers=layers)
    doc = schedule_file(solve_pipeline(pipe, schedule="1f1b-split"))
    options = {"tie": tie, "dtype": torch.float64}  # float64: rtol 1e-5 after AdamW, which divides by tiny gradients
    cfg = RunConfig(doc, model, steps=2, lr=0.01, model_options=options, trace=False, optimizer="adamw")
    [results] = launch_jobs([cfg], timeout=300)
    ok, worst, where = check_against_reference(cfg, results)
    assert ok, f"{where}: {worst}"
