"""The layer contract (one tensor in, one tensor out; the loss one number), checked before any
process starts: a broken layer is one line naming it and the fix, in `run` and in `profile`."""

import re

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from layersched.cli.main import main  # noqa: E402
from layersched.runtime.plan import PlanError  # noqa: E402
from layersched.runtime.workload import Workload, check_layers  # noqa: E402


class Pair(nn.Module):  # like a Hugging Face block: (hidden_states, present)
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x), None


class Dict(nn.Module):
    def forward(self, x):
        return {"last_hidden_state": x}


def workload(*layers, loss=None):
    def batches(step, n):
        g = torch.Generator().manual_seed(step)
        return [(torch.randn(2, 4, generator=g), torch.randn(2, 4, generator=g)) for _ in range(n)]

    named = [(f"l{k}", m) for k, m in enumerate(layers)]
    return Workload(named, loss or nn.functional.mse_loss, batches)


def test_a_good_model_passes_and_keeps_its_weights():
    w = workload(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    check_layers(w)
    assert w.layers[0][1].weight.device.type == "cpu"  # checked on meta copies of the tensors only


@pytest.mark.parametrize(
    "layers,message",
    [
        ((nn.Linear(4, 4), Pair()), r"layer 'l1' returns a tuple of 2, not a tensor; .*block\(x\)\[0\]"),
        ((Dict(),), r"layer 'l0' returns dict, not a tensor; .*out\['last_hidden_state'\]"),
        ((nn.Linear(4, 8), nn.Linear(4, 4)), r"layer 'l1' fails on the output of 'l0' \(shape \(2, 8\)"),
    ],
)
def test_a_broken_layer_is_named_with_the_fix(layers, message):
    with pytest.raises(PlanError, match=message):
        check_layers(workload(*layers))


def test_a_loss_that_is_not_one_number_is_refused():
    with pytest.raises(PlanError, match=r"loss_fn returns a tensor of shape \(2, 4\); it must return one number"):
        check_layers(workload(nn.Linear(4, 4), loss=lambda out, y: out - y))


def test_profile_of_a_broken_model_is_one_line(tmp_path, capsys):
    model = tmp_path / "broken.py"
    model.write_text(
        "import torch\nfrom torch import nn\n"
        "class Pair(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        return self.fc(x), None\n"
        "class W:\n"
        "    layers = [nn.Linear(4, 4), Pair()]\n"
        "    loss_fn = staticmethod(nn.functional.mse_loss)\n"
        "    @staticmethod\n"
        "    def batches(step, n):\n        return [(torch.randn(2, 4), torch.randn(2, 4)) for _ in range(n)]\n"
        "def build(microbatch_size=2):\n    return W()\n"
    )
    out = str(tmp_path / "p.yaml")
    code = main(["profile", f"{model}:build", "--microbatch", "2", "--out", out, "--link", "estimate"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "layer '1' returns a tuple of 2" in err[0], err


def test_the_check_changes_nothing_in_the_model():
    class Counts(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x

    bn, counter = nn.BatchNorm1d(4), Counts()
    w = workload(nn.Linear(4, 4), bn, counter)
    check_layers(w)
    assert counter.calls == 0 and int(bn.num_batches_tracked) == 0 and torch.equal(bn.running_mean, torch.zeros(4))


@pytest.mark.parametrize(
    "source, needle",
    [
        (
            "def build(**kw):\n    raise RuntimeError('no data here')\n",
            "the builder raised RuntimeError: no data here ({path}, line 2)",
        ),
        ("def build(:\n    pass\n", "importing {path} raised SyntaxError: invalid syntax ({path}, line 1)"),
        (
            "import json\njson.loads('{{')\ndef build(**kw):\n    pass\n",
            "importing {path} raised JSONDecodeError: Expecting property name enclosed in double quotes",
        ),
    ],
    ids=["builder-raises", "syntax-error", "import-raises"],
)
def test_a_model_file_whose_own_code_fails_is_one_line_naming_where(tmp_path, capsys, source, needle):
    """The model's own code failing (its builder, or the file on import) was a traceback from deep in
    the loader; it is one line naming the error and the line of the user's file, in `profile` and in
    the runner, and `--debug` still shows the traceback."""
    path = tmp_path / "model.py"
    path.write_text(source)
    code = main(["profile", f"{path}:build", "--microbatch", "2", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("layersched profile: error: model "), err
    assert needle.format(path=path) in err[0]
    # a second try reads the file again and fails the same way (a half-imported file is not kept)
    with pytest.raises(PlanError, match=re.escape(needle.format(path=path))):
        main(["--debug", "profile", f"{path}:build", "--microbatch", "2", "--out", str(tmp_path / "p.yaml")])


def test_a_builtin_named_as_the_builder_that_raises_is_one_line(tmp_path, capsys):
    """A builtin has no source file to point at; finding one raised TypeError inside the error message."""
    code = main(["profile", "math:sqrt", "--microbatch", "2", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "model math:sqrt: the builder raised TypeError: " in err[0], err
    assert "workload.py" not in err[0]  # no place in layersched's own code is given as where it failed


def test_a_model_module_named_by_import_path_that_fails_names_its_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "failing_model_module.py").write_text("import json\njson.loads('{')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["profile", "failing_model_module:build", "--microbatch", "2", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "importing failing_model_module raised JSONDecodeError: " in err[0]
    assert err[0].endswith(f"({tmp_path / 'failing_model_module.py'}, line 2)")
