"""Benchmark suites and `solve --solver best`."""

import csv
import shutil

import pytest

from layersched.cli.main import main
from layersched.describe.config import SpecError
from layersched.formats.export import load_schedule, to_problem
from layersched.schedule.suite import run_suite
from solvers import validate
from tests.paths import DATA, PROBLEMS


def test_suite_rows_are_validated_results_or_reasons():
    rows = run_suite(DATA / "suite-small.yaml")
    assert len(rows) == (2 + 1) * 3
    by = {(r["problem"], r["memory"], r["method"]): r for r in rows}
    # GPipe keeps all 24 micro-batches alive: over the 1p limit (8) and the 2p limit (16)
    assert by[("zb-1.5b", "1x", "gpipe")]["status"].startswith("n/a: memory")
    assert by[("zb-1.5b", "1x", "1f1b")]["bubble_rate"] == pytest.approx(0.243054, abs=1e-6)
    assert by[("zb-1.5b", "1x", "1f1b")]["published"] == 0.1585
    for r in rows:
        if "value" in r:
            assert r["value"] >= r["lower_bound"] and 0 <= r["gap"] < 1
    # doubling the memory limit never makes a template worse
    assert by[("zb-1.5b", "2x", "1f1b")]["value"] == by[("zb-1.5b", "1x", "1f1b")]["value"]


def test_bench_cli_writes_table_csv_and_plot(tmp_path, capsys):
    assert (
        main(["bench", str(DATA / "suite-small.yaml"), "--out-dir", str(tmp_path), "--quiet", "--methods", "1f1b,list"])
        == 0
    )
    assert "suite suite-small" in capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "suite-small.csv").open()))
    assert [r["method"] for r in rows] == ["1f1b", "list"] * 3
    assert (tmp_path / "suite-small.png").read_bytes()[:4] == b"\x89PNG"


def test_a_suite_lists_problems_by_path_alone(tmp_path):
    """``problems: [a.yaml]`` is short for ``[{path: a.yaml}]`` (it was refused as "Input should be a valid
    dictionary or instance of SuiteProblem"); the files are found beside the suite file."""
    shutil.copy(PROBLEMS / "zb-1.5b.yaml", tmp_path / "a.yaml")
    (tmp_path / "s.yaml").write_text(
        "name: s\nproblems: [a.yaml, {path: a.yaml, memory_factors: [2]}]\nmethods: [1f1b]\n"
    )
    rows = run_suite(tmp_path / "s.yaml")
    assert [(r["problem"], r["memory"], r["method"]) for r in rows] == [
        ("zb-1.5b", "1x", "1f1b"),
        ("zb-1.5b", "2x", "1f1b"),
    ]
    assert rows[0]["bubble_rate"] == pytest.approx(0.243054, abs=1e-6)
    (tmp_path / "s.yaml").write_text("name: s\nproblems: [nope.yaml]\nmethods: [1f1b]\n")
    with pytest.raises(SpecError, match="nope.yaml: cannot read"):
        run_suite(tmp_path / "s.yaml")


def test_unknown_method_is_named():
    with pytest.raises(SpecError, match="unknown method 'zb-h9'"):
        run_suite(DATA / "suite-small.yaml", methods=["zb-h9"])


def test_a_problem_file_given_as_a_suite_is_named_so(capsys):
    assert main(["bench", str(PROBLEMS / "zb-1.5b.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "zb-1.5b.yaml: a problem file, not a suite; solve it with 'layersched solve'" in err[0]


def test_a_suite_cuts_a_model_with_more_stages_than_layers_inside_layers(tmp_path):
    """As `solve` does under ``cuts: best``: whole layers cannot make 8 stages of a 6-layer model."""
    import yaml

    data = yaml.safe_load((PROBLEMS / "gpt3-1.3b-a100.yaml").read_text())
    data["cluster"] = str(PROBLEMS / data["cluster"])
    data["model"]["architecture"]["num_layers"] = 4
    data["training"].update(pipeline=4, stages_per_rank=2)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    suite = {"name": "s", "problems": [{"path": "p.yaml"}], "methods": ["interleaved", "list"]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite))
    rows = run_suite(tmp_path / "s.yaml")
    assert [r["status"] for r in rows] == ["template", "feasible"], rows
    assert all(r["value"] >= r["lower_bound"] > 0 for r in rows)


def test_solve_best_is_never_worse_than_any_template(tmp_path):
    pytest.importorskip("ortools")
    out = tmp_path / "best.json"
    assert (
        main(
            [
                "solve",
                str(DATA / "zb-1.5b.yaml"),
                "--solver",
                "best",
                "--time-limit",
                "3",
                "--microbatches",
                "10",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    doc = load_schedule(out)
    validate(*to_problem(doc))
    for name in ("1f1b", "1f1b-split"):
        ref = tmp_path / f"{name}.json"
        assert (
            main(
                [
                    "solve",
                    str(DATA / "zb-1.5b.yaml"),
                    "--schedule",
                    name,
                    "--microbatches",
                    "10",
                    "--out",
                    str(ref),
                    "--quiet",
                ]
            )
            == 0
        )
        assert doc.metrics["value"] <= load_schedule(ref).metrics["value"]
    assert doc.metrics["lower_bound"] <= doc.metrics["value"]


def test_bundled_suite_is_found_from_any_directory(tmp_path, monkeypatch, capsys):
    """The bundled suites ship with the package: a bare name works outside the checkout root."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "zero-bubble", "--out-dir", "out", "--quiet", "--methods", "1f1b"]) == 0
    rows = list(csv.DictReader((tmp_path / "out" / "zero-bubble.csv").open()))
    assert {r["problem"] for r in rows} == {"zb-1.5b", "zb-6.2b", "zb-14.6b", "zb-v-6.2b", "zb-interleaved-1.5b"}
    assert {r["method"] for r in rows} == {"1f1b"}


def test_suite_given_by_bare_file_name_in_the_working_directory(tmp_path, monkeypatch, capsys):
    """A suite file named without a folder (it has a dot) is a path, not an experiment module."""
    for name in ("zb-1.5b.yaml", "tiny-model.yaml"):
        shutil.copy(DATA / name, tmp_path)
    shutil.copy(DATA / "suite-small.yaml", tmp_path / "my.suite.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "my.suite.yaml", "--out-dir", "out", "--quiet", "--methods", "1f1b"]) == 0
    assert len(list(csv.DictReader((tmp_path / "out" / "my.suite.csv").open()))) == 3


def test_unknown_suite_lists_the_known_ones(capsys):
    assert main(["bench", "zero-bubbel"]) == 2
    err = capsys.readouterr().err
    assert "'zero-bubbel'" in err and "zero-bubble" in err and "layerpipe" in err
    assert main(["bench", "missing.yaml"]) == 2
    assert "missing.yaml: no such suite file" in capsys.readouterr().err


def test_torch_peers_are_rows_beside_ours(tmp_path):
    """``torch:<name>`` methods time torch's own schedule on our graph (validated, memory included);
    without torch their rows say what they need, and a name torch does not have is refused."""
    suite = tmp_path / "peers.yaml"
    problem = (DATA.parent.parent / "problems" / "zb-interleaved-1.5b.yaml").resolve()
    methods = "[interleaved-zb, torch:interleaved-zb]"
    suite.write_text(f"name: peers\nproblems:\n  - {{path: {problem}}}\nmethods: {methods}\n")
    rows = run_suite(suite)  # no peers given: as without torch
    assert rows[1]["status"] == "n/a: torch:interleaved-zb needs torch: pip install 'layersched[torch]'"
    pytest.importorskip("torch")
    from layersched.runtime.torch_orders import peers

    ours, theirs = run_suite(suite, peers=peers())
    assert theirs["status"] == "peer" and theirs["value"] == ours["value"]  # the same order: 0.0755
    assert theirs["bubble_rate"] == pytest.approx(0.0755, abs=1e-4)
    with pytest.raises(SpecError, match="unknown method 'torch:zb-x'"):
        run_suite(suite, methods=["torch:zb-x"], peers=peers())
