"""The layersched command line, in-process and as a real subprocess; the built wheel from outside."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from layersched.cli.main import main
from layersched.formats.export import load_schedule, to_problem
from solvers import validate
from tests.paths import ROOT

DATA = ROOT / "tests" / "data"


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "layersched.cli", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_solve_show_validate_export(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--schedule", "1f1b", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bubble rate 0.2431" in text and f"wrote {out}" in text
    doc = load_schedule(out)
    validate(*to_problem(doc))
    assert main(["show", str(out), "--plot", str(tmp_path / "s.svg"), "--width", "50"]) == 0
    shown = capsys.readouterr().out
    assert "rank7 |" in shown and "peak memory" in shown
    svg = (tmp_path / "s.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert main(["show", str(out), "--plot", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["validate", str(out)]) == 0
    assert main(["export", str(out), "--format", "torch-csv", "--out", str(tmp_path / "s.csv")]) == 0
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert len(rows) == 8 and rows[0].split(",")[:2] == ["0F0", "0F1"]


def test_list_names_best_the_suites_and_the_experiments(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "--solver best" in out
    assert "zero-bubble" in out and "models" in out  # bundled suites
    assert "layerpipe" in out and "spectrain" in out  # experiments


def test_list_gives_each_template_its_stages_per_rank_and_a_whole_sentence(capsys, monkeypatch):
    """A template that does not fit the problem's stages per rank points at `layersched list`: its
    column says what each takes. Each description is a whole sentence (interleaved-zb's stopped at
    "the order of torch's", the first line of a two-line summary)."""
    from layersched.schedule.templates import TEMPLATES

    monkeypatch.setenv("COLUMNS", "250")
    assert main(["list"]) == 0
    rows = {line.split("│")[1].strip(): line.split("│")[2:5] for line in capsys.readouterr().out.splitlines()
            if line.count("│") == 5}  # fmt: skip
    assert set(rows) == set(TEMPLATES)
    assert [c.strip() for c in rows["zb-v"][:2]] == ["split I/W", "2"]
    assert [c.strip() for c in rows["1f1b"][:2]] == ["fused", "1"]
    assert rows["interleaved-zb"][1].strip() == "2 or more"
    assert all(t.description.endswith(".") and "``" not in t.description for t in TEMPLATES.values())
    assert "ScheduleInterleavedZeroBubble: loop placement" in TEMPLATES["interleaved-zb"].description


def test_a_template_for_other_stages_per_rank_says_how_to_get_there(tmp_path, capsys):
    code = main(
        ["solve", str(ROOT / "problems" / "zb-1.5b.yaml"), "--schedule", "zb-v", "--out", str(tmp_path / "s.json")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "layersched solve: error: schedule 'zb-v' needs exactly 2 stage(s) per rank, the pipeline has 1; give the "
        "problem stages_per_rank: 2 (under pipeline: or training:), or pick a schedule for 1 ('layersched list')"
    ]


def test_summary_prints_each_figure_once(tmp_path, capsys):
    """The summary names each figure once; the other objective appears only when it differs."""
    out = tmp_path / "s.json"
    assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--schedule", "1f1b", "--out", str(out)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    doc = load_schedule(out)
    m = doc.metrics
    assert m["span"] == m["value"]
    assert line.count(f"{m['value']} ") == 1, line
    assert ("makespan" in line) == (m["makespan"] != m["value"])
    assert "lower bound" in line and "bubble rate 0.2431" in line


def test_plot_axes_use_the_summarys_units(tmp_path, monkeypatch):
    """Gantt and memory axes in ms and GiB (as the summary prints them), not raw ns and bytes."""
    import matplotlib.figure

    from layersched.formats.plot import plot_schedule

    out = tmp_path / "s.json"
    assert main(["solve", "problems/gpt3-1.3b-a100.yaml", "--out", str(out), "--quiet"]) == 0
    doc = load_schedule(out)
    seen = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        seen["fig"] = fig
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    plot_schedule(doc, tmp_path / "s.svg")
    gantt, memory = seen["fig"].axes
    assert memory.get_xlabel() == "time (ms)" and memory.get_ylabel() == "memory (GiB)"
    assert gantt.get_xlim()[1] == pytest.approx(doc.metrics["makespan"] / 1e6)
    top = max(line.get_ydata().max() for line in memory.get_lines() if len(line.get_ydata()) > 2)
    assert top == pytest.approx(max(doc.metrics["peak_memory"]) / 2**30)


def test_model_level_problem_and_microbatch_override(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["solve", str(DATA / "tiny-model.yaml"), "--microbatches", "6", "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    doc = load_schedule(out)
    assert doc.pipeline.num_microbatches == 6 and doc.pipeline.data_parallel == 2
    assert doc.pipeline.stage_layers == [["l0", "l1"], ["l2", "l3"]]
    assert main(["validate", str(out)]) == 0


def test_pipeline_override_splits_a_model_level_problem_again(tmp_path, capsys):
    out = tmp_path / "p.json"
    tiny = str(DATA / "tiny-model.yaml")
    assert main(["solve", tiny, "--pipeline", "1", "--out", str(out), "--quiet"]) == 0
    doc = load_schedule(out)
    assert doc.pipeline.num_ranks == 1 and doc.pipeline.stage_layers == [["l0", "l1", "l2", "l3"]]
    capsys.readouterr()
    assert main(["solve", tiny, "--pipeline", "4", "--out", str(out), "--quiet"]) == 2
    assert "pipeline x data_parallel = 8 devices, but the cluster has 4" in capsys.readouterr().err
    assert main(["solve", tiny, "--pipeline", "0", "--out", str(out), "--quiet"]) == 2
    assert "--pipeline: must be at least 1, got 0" in capsys.readouterr().err
    assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--pipeline", "2", "--out", str(out), "--quiet"]) == 2
    assert "gives its stages directly" in capsys.readouterr().err
    assert load_schedule(out).pipeline.num_ranks == 1  # the failed runs left the last good file alone


def test_generic_solver_from_cli(tmp_path):
    pytest.importorskip("solvers.listsched")
    out = tmp_path / "l.json"
    assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--solver", "list", "--out", str(out), "--quiet"]) == 0
    doc = load_schedule(out)
    validate(*to_problem(doc))
    assert doc.method == "list"


def test_errors_are_one_line_exit_2_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((DATA / "zb-1.5b.yaml").read_text().replace("  forward:", "  forwrd:"))
    r = run_cli("solve", bad, "--out", tmp_path / "x.json")
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == f"layersched solve: error: {bad}: pipeline.forwrd: unknown key; did you mean 'forward'? (and 1 more error)"
    )
    assert "Traceback" not in r.stderr and not (tmp_path / "x.json").exists()
    bad.write_text(bad.read_text().replace("  backward_input:", "  backward_inpt:"))  # two unknown, two missing
    r = run_cli("solve", bad, "--out", tmp_path / "x.json")
    assert r.returncode == 2 and r.stderr.strip().endswith("(and 3 more errors)")
    r = run_cli("solve", DATA / "zb-1.5b.yaml", "--schedule", "nope")
    assert r.returncode == 2 and "unknown schedule 'nope'; valid: " in r.stderr
    r = run_cli("--debug", "solve", bad)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_validate_rejects_edited_file_naming_the_task(tmp_path):
    out = tmp_path / "s.json"
    assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--out", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    next(t for t in data["tasks"] if t["name"] == "5B3")["start"] -= 5
    out.write_text(json.dumps(data))
    r = run_cli("validate", out)
    assert r.returncode == 2
    assert "precedence: 5B3 starts at" in r.stderr and "short by 5" in r.stderr
    data = json.loads(out.read_text())
    next(t for t in data["tasks"] if t["name"] == "5B3")["start"] += 5
    data["metrics"]["span"] += 1
    out.write_text(json.dumps(data))
    r = run_cli("validate", out)
    assert r.returncode == 2 and "metrics: span do not match the tasks" in r.stderr


def test_import_layersched_loads_no_torch_and_solvers_loads_no_layersched():
    code = (
        "import sys, layersched.cli.main, layersched.schedule.solve, layersched.formats.export; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    code = (
        "import sys, solvers; bad = [m for m in sys.modules if m.split('.')[0] in "
        "('layersched', 'pydantic', 'torch', 'ortools')]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_built_wheel_works_outside_the_checkout(tmp_path):
    """Build the wheel, install it into a fresh virtual environment and run the CLI from elsewhere."""
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("layersched-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("solvers/") for n in names) and any(n.startswith("layersched/") for n in names)
    assert "layersched/formats/schema/schedule.schema.json" in names
    # every package of the checkout ships (they are named one by one in pyproject.toml)
    for init in [*ROOT.glob("layersched/**/__init__.py"), *ROOT.glob("solvers/**/__init__.py")]:
        assert str(init.relative_to(ROOT)) in names, f"{init.parent.name} is missing from the wheel"
    env_dir = tmp_path / "venv"
    # An isolated environment. Its dependencies come, on purpose, from the interpreter running this test
    # (the project's .venv): a .pth line adds that environment's site-packages *after* the new one's. A
    # path line in a .pth is not itself scanned for .pth files, so the editable install's finder there
    # never runs, and layersched can only come from the wheel. (system_site_packages would expose the
    # *base* interpreter instead, which has none of the dependencies on a fresh machine.)
    venv.EnvBuilder(system_site_packages=False, with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site_dir = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site_dir) / "layersched-test-deps.pth").write_text("".join(f"{d}\n" for d in sorted(ours)))
    subprocess.run([py, "-m", "pip", "install", "--no-deps", "--quiet", str(wheel)], check=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copy(DATA / "zb-1.5b.yaml", work)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def there(*args) -> subprocess.CompletedProcess:  # run in the new environment, outside the checkout
        return subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True, timeout=120)

    where = there(py, "-c", "import layersched, solvers; print(layersched.__file__, solvers.__file__)")
    assert where.returncode == 0, where.stderr
    assert str(ROOT) not in where.stdout, f"imported from the checkout: {where.stdout}"
    exe = env_dir / "bin" / "layersched"
    r = there(exe, "solve", "zb-1.5b.yaml", "--out", "s.json")
    assert r.returncode == 0, r.stderr
    assert "bubble rate 0.2431" in r.stdout
    r = there(exe, "validate", "s.json")
    assert r.returncode == 0, r.stderr
    # the bundled suites ship in the wheel and are found by name from any directory
    r = there(exe, "bench", "zero-bubble", "--methods", "1f1b", "--quiet", "--out-dir", "b")
    assert r.returncode == 0, r.stderr
    assert "zb-14.6b" in r.stdout and (work / "b" / "zero-bubble.csv").is_file()


def test_progress_lines_count_from_the_start_of_the_solve(tmp_path, capsys, monkeypatch):
    """Each step of `best` reports ``elapsed`` from its own start; the lines `solve` prints count the
    seconds since the solve began, so they never go back."""
    import re
    import time

    import layersched.schedule.solve as solve_module

    real = solve_module.solve_pipeline

    def two_steps(pipe, **options):
        report = options.pop("progress")
        report({"incumbent": 20, "bound": 10, "gap": 0.5, "elapsed": 5.0})  # late in a first step
        time.sleep(0.2)
        report({"incumbent": 15, "bound": 10, "gap": 1 / 3, "elapsed": 0.1})  # early in the next one
        return real(pipe, schedule="1f1b", objective=options.get("objective"))

    monkeypatch.setattr(solve_module, "solve_pipeline", two_steps)
    out = tmp_path / "s.json"
    assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--solver", "best", "--time-limit", "5", "--out", str(out)]) == 0
    seconds = [float(s) for s in re.findall(r"^\s+([\d.]+) s  incumbent", capsys.readouterr().out, re.M)]
    assert len(seconds) == 2 and seconds[1] >= seconds[0] + 0.15 and seconds[0] < 5.0


def test_solve_says_when_the_search_was_still_improving(tmp_path, capsys, monkeypatch):
    """Where the last shorter schedule came in the last quarter of the time limit and the result is above
    its bound, `solve` says that more time, or --start with the file it wrote, may find more; not where
    the search last improved early."""
    import re
    import time

    import layersched.schedule.solve as solve_module

    real = solve_module.solve_pipeline

    def improving_at(seconds: float):
        def solve(pipe, **options):
            time.sleep(seconds)
            options["progress"]({"incumbent": 20, "bound": 10, "gap": 0.5, "elapsed": 0.0})
            return real(pipe, schedule="1f1b", objective=options.get("objective"))  # above the bound

        return solve

    out = tmp_path / "s.json"
    args = ["solve", str(DATA / "zb-1.5b.yaml"), "--solver", "best", "--time-limit", "1", "--out", str(out)]
    monkeypatch.setattr(solve_module, "solve_pipeline", improving_at(0.9))
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    late = re.search(r"still improving: the search found a shorter schedule at ([\d.]+) s of its 1 s", said)
    assert late and float(late.group(1)) >= 0.75 and f"--start {out} --seed 1 " in said  # the next seed
    assert main([*args, "--seed", "4"]) == 0
    assert f"--start {out} --seed 5 " in " ".join(capsys.readouterr().out.split())
    monkeypatch.setattr(solve_module, "solve_pipeline", improving_at(0.3))
    assert main(args) == 0
    assert "still improving" not in capsys.readouterr().out


def test_solve_passes_its_seed_to_the_search_and_refuses_it_where_nothing_is_random(tmp_path, capsys, monkeypatch):
    """``--seed`` reaches the solver (best, cpsat, lns, ils); with a template or a solver without random
    choices it is refused with the solvers that take one, and a negative or too large seed by argparse."""
    import layersched.schedule.solve as solve_module

    real, given = solve_module.solve_pipeline, []

    def spy(pipe, **options):
        if options.get("solver"):  # not the templates' own calls
            given.append(options.get("seed"))
        return real(pipe, **options)

    monkeypatch.setattr(solve_module, "solve_pipeline", spy)
    out = str(tmp_path / "s.json")
    problem = str(DATA / "zb-1.5b.yaml")
    quiet = ["--out", out, "--quiet"]
    assert main(["solve", problem, "--solver", "best", "--time-limit", "2", "--seed", "3", *quiet]) == 0
    assert main(["solve", problem, "--solver", "ils", "--time-limit", "1", "--seed", "2", *quiet]) == 0
    assert main(["solve", problem, "--solver", "best", "--time-limit", "2", *quiet]) == 0
    assert given == [3, 2, None]  # without --seed the search's own default
    for how in (["--solver", "list"], ["--schedule", "1f1b"]):
        assert main(["solve", problem, *how, "--seed", "1", "--out", out]) == 2
        err = capsys.readouterr().err
        assert "--seed: " in err and "has no random choices; only --solver best, cpsat, lns, ils take a seed" in err
    for bad in ("-1", str(2**31 - 1), "x"):
        assert main(["solve", problem, "--solver", "best", "--seed", bad]) == 2
        assert "argument --seed: must be " in capsys.readouterr().err


def _arguments(parser, path=("layersched",)):
    """Every (command path, argument) of ``parser`` and its subcommands, --help left out."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), f"the {name} command itself", helps.get(name)
                yield from _arguments(sub, path + (name,))
        elif not isinstance(action, argparse._HelpAction):
            yield path, "/".join(action.option_strings) or action.dest, action.help


def test_every_command_and_argument_explains_itself():
    """`layersched COMMAND --help` (and the runner's) shows a line for every command and argument."""
    from layersched.cli.asyncrun import _parser as asyncrun_parser
    from layersched.cli.main import _parser
    from layersched.cli.run import parser as run_parser

    silent = []
    parsers = ((_parser(), ("layersched",)), (run_parser(), ("layersched.run",)), (asyncrun_parser(), ("asyncrun",)))
    for parser, path in parsers:
        silent += [f"{' '.join(p)}: {arg}" for p, arg, text in _arguments(parser, path) if not (text or "").strip()]
    assert not silent, "no help text: " + "; ".join(silent)
