"""Hostile input at the boundary: one line naming what to change, exit 2, no traceback, nothing half
written, nothing that is not a regular file replaced. One test per class, then a fuzz test."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersched.cli.main import main
from layersched.schedule.budget import SETUP_SECONDS
from layersched.schedule.templates import template_names
from solvers import solver_names
from tests.layersched.strategies import any_stage_fields
from tests.paths import DATA, PROBLEMS

SMALL = {
    "name": "small",
    "pipeline": {"stages": 2, "microbatches": 4, "forward": 2, "backward_input": 2, "backward_weight": 1},
}


def run(capsys, *args) -> tuple[int, list[str]]:
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    return code, err


def problem(tmp_path, data=SMALL, name="p.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


# -- options are checked when parsed ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["solve", "{p}", "--time-limit", "0"], "--time-limit: must be a finite number above 0, got 0"),
        (["solve", "{p}", "--time-limit", "-5"], "--time-limit: must be a finite number above 0, got -5"),
        (["solve", "{p}", "--time-limit", "nan"], "--time-limit: must be a finite number above 0, got nan"),
        (["solve", "{p}", "--microbatches", "0"], "--microbatches: must be at least 1, got 0"),
        (["partition", "problems/bert-large-v100.yaml", "-P", "0"], "--processors/-P: must be at least 1, got 0"),
        (["show", "{p}", "--width", "0"], "--width: must be at least 1, got 0"),
        (["bench", "zero-bubble", "--time-limit", "inf"], "--time-limit: must be a finite number above 0, got inf"),
        (["frontier", "{p}", "--points", "1"], "--points: must be at least 2, got 1"),
        (["frontier", "{p}", "--points", "0"], "--points: must be at least 2, got 0"),
    ],
)
def test_bad_option_values_are_refused_when_parsed(tmp_path, capsys, args, needle):
    p = problem(tmp_path)
    code, err = run(capsys, *[a.format(p=p) for a in args])
    assert code == 2 and needle in err[-1]


# -- output paths ---------------------------------------------------------------------------------


def test_output_paths(tmp_path, capsys):
    p = problem(tmp_path)
    solve = ["solve", p, "--schedule", "1f1b", "--quiet", "--out"]
    code, err = run(capsys, *solve, tmp_path)
    assert code == 2 and err == [f"layersched solve: error: {tmp_path}: is a directory; name a file to write"]
    code, err = run(capsys, *solve, "")
    assert code == 2 and "output path is empty" in err[0]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = run(capsys, *solve, blocker / "s.json")
    assert code == 2 and "is a file" in err[0] and blocker.read_text() == "x"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, err = run(capsys, *solve, fifo)
    assert code == 2 and "not a regular file" in err[0] and stat.S_ISFIFO(fifo.stat().st_mode)
    # a missing folder is made; a symbolic link is followed, and stays a link
    out = tmp_path / "new" / "deeper" / "s.json"
    assert main([*map(str, solve), str(out)]) == 0 and json.loads(out.read_text())["format_version"]
    link = tmp_path / "link.json"
    link.symlink_to(out)
    assert main([*map(str, solve), str(link)]) == 0 and link.is_symlink() and out.is_file()
    # no temporary file is left behind by any of this
    assert not [f for f in tmp_path.rglob(".*.tmp")]


@pytest.mark.parametrize("command", ["solve", "bench", "frontier", "profile"])
def test_a_bad_output_path_is_refused_before_the_work(tmp_path, capsys, monkeypatch, command):
    """The output file or folder was checked only when written: a bad one lost the whole search (a
    `bench` of `best` runs, a `frontier` sweep, `profile`'s timing runs) at its end. Now the work does
    not start."""
    import layersched.cli.bench
    import layersched.schedule.frontier
    import layersched.schedule.solve

    def never(*a, **k):
        raise AssertionError("the work started")

    monkeypatch.setattr(layersched.schedule.solve, "solve_pipeline", never)
    monkeypatch.setattr(layersched.cli.bench, "run_bench", never)
    monkeypatch.setattr(layersched.schedule.frontier, "frontier", never)
    if command == "profile":
        pytest.importorskip("torch")
        import layersched.runtime.profiler

        monkeypatch.setattr(layersched.runtime.profiler, "profile", never)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = {
        "solve": ["solve", problem(tmp_path), "--solver", "best", "--out", blocker / "s.json"],
        "bench": ["bench", "zero-bubble", "--methods", "best", "--out-dir", blocker / "out"],
        "frontier": ["frontier", problem(tmp_path), "--out-dir", blocker / "out"],
        "profile": ["profile", "examples/models.py:gpt_small", "--microbatch", "2", "--out", blocker / "p.yaml"],
    }[command]
    code, err = run(capsys, *args)
    assert code == 2 and len(err) == 1 and "cannot create its folder: a part of" in err[0] and "is a file" in err[0]
    assert blocker.read_text() == "x"
    wrong = blocker if command in ("bench", "frontier") else tmp_path  # a file for a folder, a folder for a file
    code, err = run(capsys, *args[:-1], wrong)
    assert code == 2 and len(err) == 1 and ("is a directory" in err[0] or "is a file; name a folder" in err[0])


def test_dev_full_is_never_replaced(tmp_path, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    code, err = run(capsys, "solve", problem(tmp_path), "--schedule", "1f1b", "--quiet", "--out", "/dev/full")
    assert code == 2 and "/dev/full: is not a regular file" in err[0]
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_plot_suffix_gives_that_format_or_is_refused(tmp_path, capsys):
    s = tmp_path / "s.json"
    assert main(["solve", str(problem(tmp_path)), "--schedule", "1f1b", "--quiet", "--out", str(s)]) == 0
    assert main(["show", str(s), "--plot", str(tmp_path / "missing" / "g.png")]) == 0
    assert (tmp_path / "missing" / "g.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["show", str(s), "--plot", str(tmp_path / "g.pdf")]) == 0
    assert (tmp_path / "g.pdf").read_bytes()[:5] == b"%PDF-"
    capsys.readouterr()
    code, err = run(capsys, "show", s, "--plot", tmp_path / "g.txt")
    assert code == 2 and "name it .png, .svg or .pdf" in err[0] and not (tmp_path / "g.txt").exists()


def test_out_dir_naming_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = run(capsys, "bench", DATA / "suite-small.yaml", "--methods", "1f1b", "--quiet", "--out-dir", blocker)
    assert code == 2 and "is a file" in err[0] and blocker.read_text() == "x"


# -- input files ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, needle",
    [
        ("dup.yaml", b"name: a\nname: b\n", "key 'name' appears twice (first on line 1); keep one"),
        ("dup.json", b'{"name": "a", "name": "b"}', "key 'name' appears twice in one object"),
        ("latin1.yaml", b"name: caf\xe9\n", "not UTF-8 text (byte 0xe9 on line 1); save it as UTF-8"),
        ("inf.yaml", b"name: t\npipeline: {stages: 2, microbatches: 2, forward: .inf, backward_input: 1, "
         b"backward_weight: 1}\n", "pipeline.forward: Input should be a finite number"),
        ("big.yaml", b"name: t\npipeline: {stages: 2, microbatches: 2, forward: 4611686018427387904, "
         b"backward_input: 1, backward_weight: 1}\n", "pipeline.forward: Input should be less than or equal to"),
        ("stages.yaml", b"name: t\npipeline: {stages: 4611686018427387904, microbatches: 2, forward: 1, "
         b"backward_input: 1, backward_weight: 1}\n", "pipeline.stages: Input should be less than or equal to 4096"),
        ("deep.yaml", b"name: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
        # YAML reads yes/no/on/off as true/false, which pydantic would take for 1 and 0
        ("yes.yaml", b"name: t\npipeline: {stages: 2, microbatches: 2, forward: yes, backward_input: 1, "
         b"backward_weight: 1}\n", "pipeline.forward: expected a number, got true"),
        ("on.yaml", b"name: t\npipeline: {stages: 2, microbatches: on, forward: 1, backward_input: 1, "
         b"backward_weight: 1}\n", "pipeline.microbatches: expected a number, got true"),
        # a schedule names its stages' layers, and the runner finds them by name
        ("twins.yaml", b"name: t\nmodel: {name: m, layers: [" + b"{name: fc, forward: 1, backward_input: 1, "
         b"backward_weight: 1}, " * 2 + b"]}\ncluster: " + str(PROBLEMS / "clusters/a100-8.yaml").encode() +
         b"\ntraining: {microbatches: 2, pipeline: 2}\n", "model: two layers are named 'fc'; give each its own name"),
    ],
)  # fmt: skip
def test_bad_input_files(tmp_path, capsys, name, content, needle):
    path = tmp_path / name
    path.write_bytes(content)
    code, err = run(capsys, "solve", path, "--out", tmp_path / "s.json")
    assert code == 2 and len(err) == 1 and str(path) in err[0] and needle in err[0]
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize(
    "field",
    [
        ("cluster", "device", "peak_flops"), ("cluster", "device", "memory_bandwidth"),
        ("cluster", "device", "flops_efficiency"), ("cluster", "device", "bandwidth_efficiency"),
        ("cluster", "intra_node", "bandwidth"),
    ],
)  # fmt: skip
def test_a_cluster_number_given_as_yes_is_refused(tmp_path, capsys, field):
    """A cluster's rates and efficiencies took ``true`` (YAML's ``yes``, ``on``) for 1 and solved."""
    doc = _model_level_base()
    doc["cluster"][field[1]][field[2]] = True
    code, err = run(capsys, "solve", problem(tmp_path, doc), "--out", tmp_path / "s.json")
    assert code == 2 and len(err) == 1 and f"{'.'.join(field)}: expected a number, got true" in err[0]


@pytest.mark.parametrize("where", ["time_limit", "memory_factors", "published"])
def test_a_suite_number_given_as_yes_is_refused(tmp_path, capsys, where):
    suite = {"name": "s", "problems": [{"path": str(PROBLEMS / "zb-1.5b.yaml")}], "methods": ["1f1b"]}
    needle = {"time_limit": "time_limit", "memory_factors": "problems.0.memory_factors.0",
              "published": "problems.0.published.x"}[where]  # fmt: skip
    if where == "time_limit":
        suite["time_limit"] = True
    elif where == "memory_factors":
        suite["problems"][0]["memory_factors"] = [True]
    else:
        suite["problems"][0]["published"] = {"x": True}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    code, err = run(capsys, "bench", path, "--out-dir", tmp_path / "out")
    assert code == 2 and len(err) == 1 and f"{needle}: expected a number, got true" in err[0], err


def test_a_file_too_large_or_without_end_is_refused_without_filling_memory(tmp_path, capsys, monkeypatch):
    """`layersched solve /dev/zero` read until the machine's memory was gone (14 GB in 20 s). Now a
    regular file is judged by its size and anything else is read up to the cap; a pipe under it works."""
    import threading

    from layersched.describe import config

    monkeypatch.setattr(config, "MAX_FILE_BYTES", 4096)
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(SMALL) + "#" * 5000 + "\n")
    for path in (big, "/dev/zero"):
        code, err = run(capsys, "solve", path, "--out", tmp_path / "s.json")
        assert code == 2 and err == [
            f"layersched solve: error: {path}: more than 4,096 bytes, larger than any problem, schedule or trace "
            "file this tool reads; check the path"
        ]
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(yaml.safe_dump(SMALL)))
    writer.start()
    assert run(capsys, "solve", fifo, "--quiet", "--out", tmp_path / "s.json")[0] == 0
    writer.join()


def test_yaml_aliases_cannot_expand_without_bound(tmp_path, capsys):
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 9):  # 10^9 values from a few hundred bytes
        text += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]\n"
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    code, err = run(capsys, "solve", path)
    assert code == 2 and "holds more than 1000000 values once its aliases are expanded" in err[0]


def test_template_or_solver_named_in_the_file_names_the_file_and_field(tmp_path, capsys):
    bad = {**SMALL, "pipeline": {**SMALL["pipeline"], "schedule": "zb-h9"}}
    code, err = run(capsys, "solve", problem(tmp_path, bad))
    assert code == 2 and f"{tmp_path / 'p.yaml'}: pipeline.schedule: unknown schedule 'zb-h9'" in err[0]
    bad = {**SMALL, "pipeline": {**SMALL["pipeline"], "solver": "nope"}}
    code, err = run(capsys, "solve", problem(tmp_path, bad))
    valid = "best, cpop, cpsat, fcp, heft, ils, list, lns, peft"
    assert code == 2 and f"pipeline.solver: unknown solver 'nope'; valid: {valid}" in err[0]


def test_a_name_in_the_file_is_checked_also_where_an_option_overrides_it(tmp_path, capsys):
    """A typo in the file's ``schedule`` went unnoticed while the file was solved with ``--solver``,
    and its ``solver`` while solved with ``--schedule``; nothing is written either way."""
    out = tmp_path / "s.json"
    bad = {**SMALL, "pipeline": {**SMALL["pipeline"], "schedule": "zb-h9"}}
    code, err = run(capsys, "solve", problem(tmp_path, bad), "--solver", "list", "--out", out)
    assert code == 2 and f"{tmp_path / 'p.yaml'}: pipeline.schedule: unknown schedule 'zb-h9'" in err[0]
    bad = {**SMALL, "pipeline": {**SMALL["pipeline"], "solver": "nope"}}
    code, err = run(capsys, "solve", problem(tmp_path, bad), "--schedule", "1f1b", "--out", out)
    assert code == 2 and f"{tmp_path / 'p.yaml'}: pipeline.solver: unknown solver 'nope'" in err[0]
    code, err = run(capsys, "solve", problem(tmp_path, SMALL), "--schedule", "zb-h9", "--out", out)
    assert code == 2 and err[0].startswith("layersched solve: error: --schedule: unknown schedule 'zb-h9'")
    assert not out.exists()
    code, _ = run(capsys, "solve", problem(tmp_path, SMALL), "--solver", "list", "--out", out, "--quiet")
    assert code == 0 and out.exists()


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("forward", [2, 10**30], "pipeline.forward.1: Input should be less than or equal to 1000000000000000"),
        ("forward", ["two", 2], "pipeline.forward.0: Input should be a valid integer, unable to parse string"),
        ("placement", [0, -1], "pipeline.placement.1: Input should be greater than or equal to 0"),
        ("forward", -2, "pipeline.forward: Input should be greater than or equal to 0"),
        ("placement", "zigzag", "pipeline.placement: Input should be 'loop' or 'v'"),
    ],
)
def test_a_bad_item_of_a_list_is_named_not_the_other_shape_the_field_may_take(tmp_path, capsys, field, value, needle):
    """A cost may be a number or a list, a placement a word or a list: a list with one bad item was
    reported as the field not being a number, or not 'loop' or 'v'."""
    bad = {**SMALL, "pipeline": {**SMALL["pipeline"], field: value}}
    code, err = run(capsys, "solve", problem(tmp_path, bad), "--out", tmp_path / "s.json")
    assert code == 2 and f"{tmp_path / 'p.yaml'}: {needle}" in err[0], err


def test_a_template_over_the_memory_limit_is_named_with_the_way_out(tmp_path, capsys):
    """GPipe keeps every micro-batch's activations on rank 0: over a limit of two it breaks the
    limit. The one line names the template, the broken rule and the search that keeps it."""
    tight = {**SMALL, "pipeline": {**SMALL["pipeline"], "memory_forward": 1, "memory_limit": 2, "schedule": "gpipe"}}
    out = tmp_path / "s.json"
    code, err = run(capsys, "solve", problem(tmp_path, tight), "--out", out)
    assert code == 2 and len(err) == 1
    assert "schedule 'gpipe' breaks this problem's rules: memory: 0F2 raises memory on rank0" in err[0]
    assert "--solver best searches orders that keep them" in err[0]
    assert not out.exists()
    code, _ = run(capsys, "solve", problem(tmp_path, tight), "--solver", "best", "--out", out, "--quiet")
    assert code == 0 and out.exists()


# -- no schedule found --------------------------------------------------------------------------------


@pytest.mark.parametrize("solver", ["list", "heft", "cpsat", "lns", "best"])
def test_no_schedule_is_one_line_with_the_least_memory(tmp_path, capsys, solver):
    tight = {**SMALL, "pipeline": {**SMALL["pipeline"], "memory_forward": 4, "memory_limit": 3}}
    code, err = run(capsys, "solve", problem(tmp_path, tight), "--solver", solver, "--time-limit", "2", "--quiet")
    assert code == 2 and len(err) == 1
    assert "the memory limit 3 unit is below the least any schedule needs, 4 unit" in err[0]
    assert "raise memory_limit to at least 4" in err[0]


def model_level_doc() -> dict:
    """The bundled GPT-3 1.3B problem, its cluster file named by an absolute path (to be written elsewhere)."""
    doc = yaml.safe_load((PROBLEMS / "gpt3-1.3b-a100.yaml").read_text())
    doc["cluster"] = str(PROBLEMS / doc["cluster"])
    return doc


def test_a_model_level_limit_below_one_micro_batch_is_one_line(tmp_path, capsys):
    """A model's memory in bytes times its times made the memory-time bound of a limit far below one
    micro-batch pass CP-SAT's domains, and `best` stopped with a traceback ("invalid model")."""
    doc = model_level_doc()
    doc["training"]["memory_limit"] = 1
    code, err = run(capsys, "solve", problem(tmp_path, doc), "--solver", "best", "--time-limit", "5", "--quiet")
    assert code == 2 and len(err) == 1
    assert "the memory limit 1 bytes is below the least any schedule needs" in err[0]


def test_an_architecture_too_large_for_the_cost_model_is_one_line(tmp_path, capsys):
    """A sequence of 10**9 tokens gives a layer 8e19 bytes of activations and a forward of 1.6e8 s, past
    what a layer may hold (the time is named first since layer times are held to a million seconds):
    pydantic's report of the cost model's own layer came out over four lines."""
    doc = model_level_doc()
    doc["model"]["architecture"]["seq_len"] = 10**9
    code, err = run(capsys, "solve", problem(tmp_path, doc), "--quiet")
    assert code == 2 and len(err) == 1
    assert "the cost model gives layer 'block0' forward = 1.554e+08: input should be less than or equal to" in err[0]
    assert "sizes (hidden, seq_len, microbatch_size, ...) are too large" in err[0]


@pytest.mark.parametrize(
    "where, value, needle",
    [
        # a layer's time in seconds that no whole number of nanoseconds holds: an OverflowError before
        ("layer", 1e30, "model.layers.0.forward: Input should be less than or equal to 1000000"),
        # each layer's optimizer step in range, but not the two of the first stage together
        ("optimizer", 6e5, "optimizer of stage 0 comes to 1.2e+15 ns, more than the 1e+15 a problem may hold"),
        # each stage fits, but one iteration's passes add up to more than a schedule file holds
        ("layer", 1e6, "the passes and transfers of one iteration add up to 4e+15 time units, more than the 1e+15"),
        # the same for a stage-level file: it solved, then writing failed with 1,726 validation errors
        ("stage", 10**15, "the passes and transfers of one iteration add up to 8e+15 time units, more than the 1e+15"),
    ],
)
@pytest.mark.parametrize("solver", [None, "best"])
def test_times_too_large_for_a_schedule_are_one_line(tmp_path, capsys, where, value, needle, solver):
    if where != "stage":
        doc = _model_level_base()
        for layer in doc["model"]["layers"][: 1 if where == "layer" else 2]:
            layer[where if where == "optimizer" else "forward"] = value
    else:
        doc = {**SMALL, "pipeline": {**SMALL["pipeline"], "forward": value}}
    out = tmp_path / "s.json"
    args = ["--solver", solver, "--time-limit", "5"] if solver else []
    code, err = run(capsys, "solve", problem(tmp_path, doc), *args, "--out", out, "--quiet")
    assert code == 2 and not out.exists()
    assert len(err) == 1 and needle in err[0]


@pytest.mark.parametrize("solver", [None, "best"])
def test_a_task_graph_larger_than_the_free_memory_is_refused_before_any_work(tmp_path, capsys, monkeypatch, solver):
    """64 stages and a million micro-batches (192 million tasks) ran for minutes and grew past 8 GB
    before any message; now the estimate against the memory available refuses it at once. Here the
    machine is made to have 10 KB free, which a 2-stage problem of 4 micro-batches (28 tasks) exceeds."""
    from layersched.schedule import budget

    assert (budget.available_memory() or 1) > 0
    monkeypatch.setattr(budget, "available_memory", lambda: 10_000)
    out = tmp_path / "s.json"
    args = ["--solver", solver] if solver else []
    code, err = run(capsys, "solve", problem(tmp_path), *args, "--out", out, "--quiet")
    assert code == 2 and len(err) == 1 and not out.exists()
    assert "the task graph has 28 tasks; with its schedule and file that needs about 112.0 KiB" in err[0]
    assert "more than the 9.8 KiB this machine has available" in err[0]
    assert "use fewer micro-batches or stages" in err[0]


# -- fuzz: mutations of valid files through the CLI entry point ----------------------------------------

VALUES = st.sampled_from([0, -1, 1, 3, 2**62, 1e30, float("nan"), float("inf"), "x", "", None, [], {}, [1, 2], True])


def _mutate(data, draw_path, value, how):
    """Replace, delete or add one key somewhere in ``data`` (a copy)."""
    data = json.loads(json.dumps(data))
    node = data
    for key in draw_path[:-1]:
        if isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
            continue
        if not isinstance(node, dict) or key not in node:
            break
        node = node[key]
    if isinstance(node, list) and node and isinstance(draw_path[-1], int):  # an item of a list
        k = draw_path[-1] % len(node)
        if how == "delete":
            del node[k]
        else:
            node[k] = value
        return data
    if not isinstance(node, dict):
        return data
    key = draw_path[-1] if draw_path[-1] in node else next(iter(node), "name")
    if how == "replace":
        node[key] = value
    elif how == "delete":
        node.pop(key, None)
    else:
        node[f"{key}_extra"] = value
    return data


KEYS = [
    ["name"], ["pipeline"], ["pipeline", "stages"], ["pipeline", "microbatches"], ["pipeline", "forward"],
    ["pipeline", "backward_input"], ["pipeline", "transfer"], ["pipeline", "memory_forward"],
    ["pipeline", "memory_limit"], ["pipeline", "stages_per_rank"], ["pipeline", "placement"],
    ["pipeline", "schedule"], ["pipeline", "objective"],
]  # fmt: skip
BASE = {
    "name": "fuzz",
    "pipeline": {
        "stages": 4, "microbatches": 4, "forward": 2, "backward_input": 2, "backward_weight": 1, "transfer": 1,
        "memory_forward": 4, "memory_freed_by_weight": 1, "memory_limit": 16, "stages_per_rank": 1,
    },
}  # fmt: skip


def _solve_exits_0_or_2(tmp_path, capsys, problem_file) -> tuple[int, str]:
    """``solve`` on a fuzzed file: exit 0 with the schedule written, or exit 2 with one line and
    nothing written; never a traceback. Returns the exit status and what went to stderr."""
    out = tmp_path / "s.json"
    out.unlink(missing_ok=True)
    code = main(["solve", str(problem_file), "--solver", "list", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    assert (code == 0) == out.exists()
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("layersched solve: error: ")
    return code, err


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(KEYS),
    value=VALUES,
    how=st.sampled_from(["replace", "delete", "add"]),
    form=st.sampled_from(["yaml", "json", "truncated", "bytes", "duplicate"]),
    cut=st.integers(0, 200),
    junk=st.binary(min_size=1, max_size=8),
)
def test_fuzz_problem_files_exit_0_or_2_without_traceback(tmp_path, capsys, path, value, how, form, cut, junk):
    data = _mutate(BASE, path, value, how)
    text = json.dumps(data) if form == "json" else yaml.safe_dump(data)
    raw = text.encode()
    if form == "truncated":
        raw = raw[: cut % (len(raw) + 1)]
    elif form == "duplicate":
        raw += b"name: again\n"
    elif form == "bytes":
        raw = raw[: cut % (len(raw) + 1)] + junk + raw[cut % (len(raw) + 1) :]
    f = tmp_path / ("p.json" if form == "json" else "p.yaml")
    f.write_bytes(raw)
    _solve_exits_0_or_2(tmp_path, capsys, f)


HOW = [
    *(["--schedule", name] for name in template_names()),
    *(["--solver", name, "--time-limit", "0.5"] for name in solver_names()),
]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(fields=any_stage_fields(), how=st.sampled_from(HOW), objective=st.sampled_from([None, "span", "makespan"]))
def test_random_valid_problems_through_every_command(tmp_path_factory, capsys, fields, how, objective):
    """Where the fuzz above breaks files, this draws well-formed ones of any shape (any placement,
    uneven costs, memory limits from one activation up) and takes each through solve with a drawn
    template or solver, then validate, show, both exports and preflight: exit 0, or one line with
    exit 2 where a step refuses (the torchtitan export and preflight, which exits 1 there, only for a
    placement torchtitan's rule refuses), and a solver within its limit's allowance. Session 77 ran
    1,600 such files outside the suite."""
    tmp = tmp_path_factory.mktemp("chain")
    if objective:
        fields = {**fields, "objective": objective}
    problem, out = tmp / "p.yaml", tmp / "s.json"
    problem.write_text(yaml.safe_dump({"name": "chain", "pipeline": fields}))
    t0 = time.perf_counter()
    code = main(["solve", str(problem), *how, "--quiet", "--out", str(out)])
    took = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err and (code == 0) == out.exists()
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("layersched solve: error: "), err
        return
    if "--time-limit" in how:
        assert took < 0.5 + SETUP_SECONDS  # `--time-limit` holds for the whole command, with its allowance
    for args in (
        ["validate", str(out)],
        ["show", str(out)],
        ["export", str(out), "--format", "torch-csv", "--out", str(tmp / "s.csv")],
        ["export", str(out), "--format", "torchtitan", "--out", str(tmp / "s.toml")],
        ["preflight", str(out)],
    ):
        code = main(args)
        printed = capsys.readouterr()
        assert "Traceback" not in printed.err, args
        if args[0] == "preflight" and code == 1:  # torch's checks pass; torchtitan places stages loop or V only
            failed = [line for line in printed.out.splitlines() if line.startswith("FAIL")]
            assert len(failed) == 1 and failed[0].startswith("FAIL  torchtitan placement"), printed.out
        elif args[0] == "preflight" and code == 2:
            assert len(printed.err.strip().splitlines()) == 1 and "torch" in printed.err, printed.err
        elif "torchtitan" in args and code == 2:  # the same rule, before anything is written
            assert len(printed.err.strip().splitlines()) == 1 and "placement loop or v" in printed.err, printed.err
            assert not (tmp / "s.toml").exists()
        else:
            assert code == 0, (args, printed.err)


def _model_level_base() -> dict:
    """The bundled four-layer toy with its cluster written inline, so that the fuzz reaches its fields."""
    doc = yaml.safe_load((PROBLEMS / "mlp-tiny.yaml").read_text())
    doc["cluster"] = yaml.safe_load((PROBLEMS / doc["cluster"]).read_text())
    return doc


MODEL_KEYS = [
    *[["model", "layers", i, k] for i in (0, 2) for k in (
        "forward", "backward_input", "backward_weight", "backward", "optimizer", "activation_bytes",
        "kept_for_weight_grad", "param_bytes", "output_bytes")],
    *[["cluster", "device", k] for k in (
        "peak_flops", "memory_bandwidth", "memory_bytes", "flops_efficiency", "bandwidth_efficiency",
        "action_overhead")],
    ["cluster", "intra_node", "bandwidth"], ["cluster", "intra_node", "latency"], ["cluster", "nodes"],
    *[["training", k] for k in ("microbatches", "microbatch_size", "pipeline", "memory_limit",
                                "optimizer_bytes_per_param", "data_parallel", "stages_per_rank")],
]  # fmt: skip


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(MODEL_KEYS), value=VALUES, how=st.sampled_from(["replace", "delete"]))
def test_fuzz_model_level_files_exit_0_or_2_without_traceback(tmp_path, capsys, path, value, how):
    """The fuzz above on a model-level file: a layer's forward of 1e30 s was an OverflowError there,
    and a cluster's rates took true for 1."""
    data = _mutate(_model_level_base(), path, value, how)
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(data))
    code, err = _solve_exits_0_or_2(tmp_path, capsys, f)
    node = _model_level_base()
    for key in path[:-1]:
        node = node[key]
    if value is True and how == "replace" and path[-1] in node:  # (`_mutate` changes another key where
        assert code == 2 and "expected a number, got true" in err  # this one is missing)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["format_version", "tasks", "actions", "metrics", "pipeline", "name", "objective"]),
       value=VALUES, how=st.sampled_from(["replace", "delete"]))  # fmt: skip
def test_fuzz_schedule_files_for_show_validate_export(tmp_path, capsys, key, value, how):
    s = tmp_path / "s.json"
    if not s.exists():
        assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--schedule", "1f1b", "--quiet", "--out", str(s)]) == 0
    data = _mutate(json.loads(s.read_text()), [key], value, how)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    for command in (["validate", str(bad)], ["show", str(bad), "--width", "20"], ["export", str(bad)]):
        code = main(command)
        err = capsys.readouterr().err
        assert code in (0, 2) and "Traceback" not in err, (command, err)


TRACE_KEYS = [
    ["format"], ["version"], ["data_parallel"], ["ranks"], ["ranks", 0], ["ranks", 1, "rank"],
    ["ranks", 0, "replica"], ["ranks", 0, "step_starts"], ["ranks", 1, "step_starts", 1], ["ranks", 0, "step_times"],
    ["ranks", 0, "events"], ["ranks", 0, "events", 3], ["ranks", 1, "events", 0, "action"],
    ["ranks", 0, "events", 2, "step"], ["ranks", 1, "events", 5, "start"], ["ranks", 0, "events", 1, "duration"],
    ["ranks", 0, "events", 0, "wait"], ["ranks", 0, "transfers"], ["ranks", 0, "transfers", 0],
    ["ranks", 1, "transfers", 0, "side"], ["ranks", 1, "transfers", 0, "clock"], ["ranks", 0, "transfers", 0, "bytes"],
    ["ranks", 1, "transfers", 0, "tag"], ["ranks", 1, "transfers", 0, "step"], ["ranks", 1, "losses"],
]  # fmt: skip


def _trace(schedule: dict, steps: int = 2) -> dict:
    """A trace as `layersched.run --trace` writes it, for ``schedule``'s actions: each pass measured at
    its planned time in ms, and one message from rank 0 to rank 1 per step that rank 1 waited for."""
    ranks = []
    for r, actions in enumerate(schedule["actions"]):
        events, transfers = [], []
        for step in range(steps):
            events += [{"action": a, "step": step, "start": 1e-3 * k, "duration": 1e-3} for k, a in enumerate(actions)]
            side = {"side": "send", "wait": 0.0} if r == 0 else {"side": "recv", "wait": 2e-3}
            transfers.append(
                {"step": step, "tag": 0, "bytes": 64, "time": 0.01, "clock": step + 0.01 * (r + 1), **side}
            )
        ranks.append({
            "rank": r, "pipeline_rank": r, "replica": 0, "step_starts": [0.1 * k for k in range(steps)],
            "step_times": [0.05] * steps, "events": events, "transfers": transfers, "losses": None,
        })  # fmt: skip
    return {"format": "layersched-trace", "version": 1, "schedule": schedule["name"], "method": schedule["method"],
            "runtime": "layersched", "num_ranks": len(ranks), "data_parallel": 1, "world_size": len(ranks),
            "time_unit": "s", "ranks": ranks}  # fmt: skip


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(TRACE_KEYS), value=VALUES, how=st.sampled_from(["replace", "delete", "add"]))
def test_fuzz_trace_files_for_compare(tmp_path, capsys, path, value, how):
    """A trace file edited by hand or cut short: `compare` answers with one line naming the field, never a
    traceback (it raised KeyError, TypeError or IndexError from deep inside before its fields were checked)."""
    s = tmp_path / "s.json"
    if not s.exists():
        assert main(["solve", str(problem(tmp_path)), "--schedule", "1f1b", "--quiet", "--out", str(s)]) == 0
        assert main(["compare", str(s), str(_write(tmp_path / "good.json", _trace(json.loads(s.read_text()))))]) == 0
        capsys.readouterr()
    bad = _write(tmp_path / "trace.json", _mutate(_trace(json.loads(s.read_text())), path, value, how))
    code = main(["compare", str(s), str(bad)])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err, (path, value, how, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith(f"layersched compare: error: {bad}: ")


def test_a_trace_event_in_a_step_the_rank_never_started_is_named(tmp_path, capsys):
    s = tmp_path / "s.json"
    assert main(["solve", str(problem(tmp_path)), "--schedule", "1f1b", "--quiet", "--out", str(s)]) == 0
    trace = _trace(json.loads(s.read_text()))
    trace["ranks"][1]["events"][0]["step"] = 7
    code, err = run(capsys, "compare", s, _write(tmp_path / "t.json", trace))
    assert code == 2 and "ranks.1: event '1F0' is in step 7, but the rank has 2 step starts" in err[0]


def test_a_trace_of_a_run_whose_loss_diverged_still_compares(tmp_path, capsys):
    """Its numbers must be finite, except the losses: a step may diverge (NaN, inf) and its timing still counts."""
    s = tmp_path / "s.json"
    assert main(["solve", str(problem(tmp_path)), "--schedule", "1f1b", "--quiet", "--out", str(s)]) == 0
    trace = _trace(json.loads(s.read_text()))
    trace["ranks"][1]["losses"] = [float("nan"), float("inf")]
    assert main(["compare", str(s), _write(tmp_path / "t.json", trace)]) == 0
    trace["ranks"][1]["step_times"][0] = float("nan")
    code, err = run(capsys, "compare", s, _write(tmp_path / "t.json", trace))
    assert code == 2 and "ranks.1.step_times.0: Input should be a finite number" in err[0]


def _write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


# -- missing optional parts --------------------------------------------------------------------------------

NO_TORCH = (
    "import sys\n"
    "class NoTorch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] == 'torch':\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, NoTorch())\n"
)
"""Python source that makes every import of torch fail, as on a machine without it (for ``python -c``)."""


def test_a_torch_command_without_torch_names_the_extra(tmp_path):
    """`profile` where torch cannot be imported: one line naming the extra, not a traceback."""
    import subprocess
    import sys

    from tests.paths import ROOT

    code = (
        NO_TORCH + "from layersched.cli.main import main\n"
        f"out = {str(tmp_path / 'x.yaml')!r}\n"
        "sys.exit(main(['profile', 'examples/models.py:mlp', '--microbatch', '4', '--out', out]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs torch" in lines[0] and "layersched[torch]" in lines[0]
    assert not (tmp_path / "x.yaml").exists()


def test_asyncrun_without_torch_helps_and_names_the_extra():
    """``python -m layersched.cli.asyncrun`` where torch cannot be imported: ``--help`` works (a fresh clone's
    ``make test`` failed building its parser), and a run is one line naming the extra."""
    import subprocess
    import sys

    from tests.paths import ROOT

    code = NO_TORCH + "from layersched.cli.asyncrun import main\nsys.exit(main(sys.argv[1:]))\n"

    def asyncrun(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", code, *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)

    helped = asyncrun("--help")
    assert helped.returncode == 0 and "--mode {sync,stale,stash,spectrain}" in helped.stdout
    r = asyncrun("--steps", "2")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs torch" in lines[0] and "layersched[torch]" in lines[0]


def test_cuda_asked_for_where_there_is_none(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, err = run(capsys, "profile", "examples/models.py:mlp", "--microbatch", "4", "--out", tmp_path / "x.yaml",
                    "--device", "cuda")  # fmt: skip
    assert code == 2 and "--device cuda:" in err[0] and "use --device cpu" in err[0]


# -- validate is independent of what the file says about its own graph -----------------------------------


def _edit(tmp_path, change) -> tuple[int, list[str]]:
    out = tmp_path / "s.json"
    if not out.exists():
        assert main(["solve", str(DATA / "zb-1.5b.yaml"), "--schedule", "zb-h1", "--quiet", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    change(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code = main(["validate", str(bad)])
    return code, bad


def test_a_precedence_broken_with_its_edge_deleted_is_caught(tmp_path, capsys):
    def cheat(data):
        data["edges"] = [e for e in data["edges"] if e[:2] != ["3F2", "4F2"]]
        next(t for t in data["tasks"] if t["name"] == "4F2")["start"] -= 1

    code, _ = _edit(tmp_path, cheat)
    err = capsys.readouterr().err
    assert code == 2 and "edges: 3F2 -> 4F2 is missing; the pipeline's structure needs it" in err


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda d: d.pop("format_version"), "format_version: missing"),
        (lambda d: d.update(metrics={}), "metrics: value, span, makespan, peak_memory missing"),
        (lambda d: next(t for t in d["tasks"] if t["name"] == "2F5").update(duration=1), "tasks: 2F5 takes 1"),
        (lambda d: d["tasks"].append({**d["tasks"][0], "name": "9F0"}), "tasks: 9F0 is not part of this pipeline"),
        (lambda d: d["edges"].append(["0F0", "7W9", 0]), "edges: 0F0 -> 7W9 is not part of this pipeline"),
        (lambda d: d["edges"].__setitem__(0, [*d["edges"][0][:2], d["edges"][0][2] + 7]), "has delay"),
        # the placement record and the tasks' processors must agree: preflight and the torchtitan export
        # read the record, the runner and torch's CSV the tasks
        (lambda d: d["pipeline"]["stage_to_rank"].__setitem__(-1, 0), "tasks: 7F0 runs on processor 7"),
        (lambda d: next(t for t in d["tasks"] if t["name"] == "2W5").update(allowed=[2, 3]), "tasks: 2W5 may run on"),
    ],
)
def test_validate_rebuilds_the_graph_and_the_metrics(tmp_path, capsys, change, needle):
    code, bad = _edit(tmp_path, change)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(bad) in err[0] and needle in err[0]


# -- Ctrl-C ------------------------------------------------------------------------------------------------


def test_ctrl_c_stops_cp_sat_and_marks_the_result_interrupted(monkeypatch, request):
    """SIGINT during a 30 s CP-SAT search (Zero Bubble's 1.5B at 2p, which it does not prove in time):
    the search stops within seconds, keeps its incumbent and says it was interrupted (CP-SAT alone
    would swallow the signal and return as if its time were up)."""
    import signal
    import threading
    import time
    from dataclasses import replace

    from layersched.describe.config import load_problem
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.solve import solve_pipeline, symmetry_chains
    from solvers.cpsat import cpsat
    from tests.paths import PROBLEMS

    pipe = pipeline_from_spec(load_problem(PROBLEMS / "zb-1.5b.yaml"))
    pipe = replace(pipe, capacity=2 * pipe.capacity)
    seed = solve_pipeline(pipe, schedule="zb-h2")
    searching = threading.Event()  # the signal comes once the search runs (a loaded machine builds slowly)

    def interrupt() -> None:
        if searching.wait(60):
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGINT)

    import solvers.cpsat

    # a process started in the background by a non-interactive shell ignores SIGINT, and Python then
    # installs no handler (a fresh-clone check run that way failed here): give it Python's own
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    real = solvers.cpsat.solve_interruptibly

    def search(*args):
        searching.set()
        return real(*args)

    monkeypatch.setattr(solvers.cpsat, "solve_interruptibly", search)
    threading.Thread(target=interrupt, daemon=True).start()
    t0 = time.perf_counter()
    r = cpsat(
        seed.tasks.problem, objective="span", time_limit=30, hint=seed.schedule, symmetry=symmetry_chains(seed.tasks)
    )
    assert r.info.get("interrupted") and r.schedule is not None and r.objective <= seed.metrics["value"]
    assert time.perf_counter() - t0 < 20  # far below the 30 s limit: it stopped on the signal


@pytest.mark.slow
@pytest.mark.parametrize("solver, wait", [("best", 12), ("lns", 4)])
def test_ctrl_c_on_the_command_line(tmp_path, solver, wait):
    """The CLI as a subprocess, SIGINT mid-search: exit 130 soon after; with best, the schedule found
    so far is written, valid, and the message says so with its gap; with nothing found, no file."""
    import signal
    import subprocess
    import sys
    import time

    from tests.paths import ROOT

    out = tmp_path / "s.json"
    args = ["solve", "problems/zb-v-6.2b.yaml", "--solver", solver, "--time-limit", "120", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "layersched.cli", *args], cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    time.sleep(wait)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130 and "Traceback" not in err
    assert time.perf_counter() - sent < 15
    if out.exists():
        assert "interrupted: wrote the best schedule found so far" in err and "gap" in err
        assert main(["validate", str(out)]) == 0
    else:
        assert "interrupted; nothing written" in err
    if solver == "best":
        assert out.exists()  # the templates had a schedule before CP-SAT started


@pytest.mark.parametrize("where", ["start", "duration", "memory", "delay"])
def test_schedule_file_numbers_out_of_range_are_one_line(tmp_path, capsys, where):
    def huge(data):
        if where == "delay":
            data["edges"][0][2] = 2**70
        else:
            data["tasks"][3][where] = 2**70

    code, bad = _edit(tmp_path, huge)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Input should be less than or equal to 1000000000000000" in err[0]


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda d: d["processors"][0].update(capacity=False), "processors.0.capacity: expected a number, got false"),
        (lambda d: d["tasks"][2].update(start=True), "tasks.2.start: expected a number, got true"),
        (lambda d: d["pipeline"].update(num_ranks=0), "pipeline.num_ranks: Input should be greater than or equal to 1"),
        (lambda d: d["pipeline"].update(num_microbatches=-3), "pipeline.num_microbatches: Input should be greater"),
        (lambda d: d["pipeline"]["stage_to_rank"].__setitem__(0, -1), "pipeline.stage_to_rank.0: Input should be"),
    ],
)
def test_schedule_file_numbers_are_numbers_in_range(tmp_path, capsys, change, needle):
    """A schedule file's numbers follow the problem file's rules: ``capacity: false`` was read as a
    capacity of 0 and ``num_ranks: 0`` reached the graph rebuilding."""
    code, _ = _edit(tmp_path, change)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err


# -- time limits hold on any size ---------------------------------------------------------------------------


def test_cp_sat_declines_a_model_it_cannot_build_within_the_limit():
    """Declined before building: without a hint nothing stands; with one, the hint does. (Without
    ``keep_processor`` CP-SAT would make its own hint with `best` in a quarter of the limit, and
    whether HEFT ends 15,000 tasks within 25 ms depends on the machine: the test once failed so.)"""
    import numpy as np

    from solvers import Problem
    from solvers.cpsat import BUILD_SHARE, build_seconds, cpsat
    from solvers.listsched import list_schedule

    p = Problem(duration=[1] * 15_000, num_processors=2)
    assert build_seconds(p) > BUILD_SHARE * 0.1
    free = np.full(p.num_tasks, -1)  # every task free, and no hint of CP-SAT's own
    r = cpsat(p, time_limit=0.1, keep_processor=free)
    assert r.schedule is None and r.status == "unknown" and "would take about" in r.info["reason"]
    hint = list_schedule(p).schedule
    r = cpsat(p, time_limit=0.1, hint=hint)
    assert r.info["not_run"] and "would take about" in r.info["reason"]
    assert r.schedule is hint and r.info["source"] == "hint"


def test_cp_sat_counts_the_processors_a_task_may_run_on_when_it_judges_the_build():
    """Each further processor a task may run on is an optional interval, a Boolean and its transfers:
    a random DAG of 5,000 tasks on 32 processors took 4.9 s to model, and tasks and edges alone
    estimated 0.5 s, so a 2.5 s call ran 6 s. 3,000 free tasks on 32 processors are declined under a
    1 s limit, at once, and the hint stands; on one processor the same tasks are modelled."""
    import time

    from solvers import Problem
    from solvers.cpsat import build_seconds, cpsat
    from solvers.listsched import list_schedule

    wide, narrow = Problem(duration=[1] * 3000, num_processors=32), Problem(duration=[1] * 3000, num_processors=1)
    assert build_seconds(wide) > 20 * build_seconds(narrow)
    hint = list_schedule(wide).schedule
    t0 = time.perf_counter()
    r = cpsat(wide, time_limit=1.0, hint=hint)
    assert time.perf_counter() - t0 < 1.0
    assert r.info["not_run"] and "would take about" in r.info["reason"] and r.schedule is hint
    assert not cpsat(narrow, time_limit=1.0, hint=list_schedule(narrow).schedule).info.get("not_run")


def test_cp_sat_declines_more_tasks_than_it_can_stop_on():
    """Above MAX_SEARCH_TASKS CP-SAT ran minutes past its limit and ignored stop_search: declined,
    whatever the limit, and the hint (here the list schedule) stands."""
    from solvers import Problem
    from solvers.cpsat import MAX_SEARCH_TASKS, cpsat

    p = Problem(duration=[1] * (MAX_SEARCH_TASKS + 1), num_processors=2)
    r = cpsat(p, time_limit=600)
    assert r.info["not_run"] and "does not stop near its time limit" in r.info["reason"]
    assert r.schedule is not None and r.info["source"] == "hint"


def pipeline_problem(tmp_path, stages: int, microbatches: int):
    costs = {"forward": 2, "backward_input": 2, "backward_weight": 1, "transfer": 1}
    return problem(tmp_path, {"name": "big", "pipeline": {"stages": stages, "microbatches": microbatches, **costs}})


@pytest.mark.parametrize("solver", ["best", "list", "heft", "lns", "cpsat"])
def test_a_limit_too_small_for_one_schedule_is_refused_before_any_work(tmp_path, capsys, solver):
    """The issue's case: 64 stages x 4096 micro-batches (786,560 tasks) with --time-limit 10. Building
    the graph and writing the file alone take longer here, so every solver refuses at once, with the
    estimate and what would do."""
    import time

    path = pipeline_problem(tmp_path, 64, 4096)
    t0 = time.perf_counter()
    code, err = run(capsys, "solve", path, "--solver", solver, "--time-limit", "10", "--out", str(tmp_path / "s.json"))
    assert time.perf_counter() - t0 < 5  # nothing was built
    assert code == 2 and len(err) == 1 and not (tmp_path / "s.json").exists()
    assert "--time-limit 10: too small for 786,560 tasks" in err[0]
    assert "(estimated); give at least" in err[0] and "fewer micro-batches" in err[0]


def test_best_stops_trying_candidates_when_the_time_is_up():
    """64 x 256 (49,152 tasks) with 2 s: the first template always runs; the later ones and the list
    schedule are skipped once they would not end in time, and say so."""
    from layersched.describe.config import ProblemSpec
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.solve import solve_best

    spec = {"name": "p", "pipeline": {"stages": 64, "microbatches": 256, "forward": 2, "backward_input": 2,
                                      "backward_weight": 1, "transfer": 1}}  # fmt: skip
    pipe = pipeline_from_spec(ProblemSpec.model_validate(spec))
    sol = solve_best(pipe, time_limit=2.0)
    tried = sol.info["candidates"]
    assert any(isinstance(v, int) for v in tried.values())
    assert any(str(v).endswith("the time limit was reached") for v in tried.values())
    assert sol.runtime < 2.0 + 3.0  # the first template and one step begun just in time, on a loaded machine


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["best", "list", "heft", "lns"])
def test_solvers_end_within_their_limit_on_a_large_problem(tmp_path, solver):
    """64 stages x 1024 micro-batches (196,608 tasks), --time-limit 20: the whole command, Python's
    start and the file included, ends within the limit plus `SETUP_SECONDS`, with a valid schedule.
    (benchmarks/time_limits.py measures the same with spread.)"""
    import subprocess
    import sys

    from tests.paths import ROOT

    path = pipeline_problem(tmp_path, 64, 1024)
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "layersched.cli", "solve", str(path), "--solver", solver, "--time-limit", "20",
         "--out", str(tmp_path / "s.json"), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    assert main(["validate", str(tmp_path / "s.json")]) == 0
    assert wall < 20 + SETUP_SECONDS, f"{solver} took {wall:.1f} s for a 20 s limit"
