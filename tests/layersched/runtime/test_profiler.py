"""The profiler: per-layer figures that match the layers' shapes, a problem file that loads, and
the whole path profile -> problem file -> solve -> run -> compare."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from layersched.cli.main import main  # noqa: E402
from layersched.describe.config import LayerSpec, load_problem  # noqa: E402
from layersched.describe.stages import pipeline_from_spec  # noqa: E402
from layersched.formats.export import load_schedule  # noqa: E402
from layersched.runtime.launch import launch_local  # noqa: E402
from layersched.runtime.profiler import measure_runtime, problem_from_profile, profile, write_problem  # noqa: E402
from layersched.runtime.runner import train_reference  # noqa: E402
from layersched.runtime.trace import compare  # noqa: E402
from layersched.schedule.solve import solve_pipeline  # noqa: E402
from tests.paths import ROOT  # noqa: E402

MLP = f"{ROOT / 'examples' / 'models.py'}:mlp"
GPT = f"{ROOT / 'examples' / 'models.py'}:gpt_small"
LINK = {"bandwidth": 1e9, "latency": 1e-4}


def test_mlp_figures_follow_from_its_shapes():
    prof = profile(MLP, microbatch=8, repeat=3, link=LINK)
    layers = prof["layers"]
    assert [x["name"] for x in layers] == [f"fc{i}" for i in range(8)]
    f64, mb, width = 8, 8, 32
    act = mb * width * f64
    for i, x in enumerate(layers):
        LayerSpec(**x)  # every entry is a valid layer description
        assert x["param_bytes"] == (width * width + width) * f64
        assert x["output_bytes"] == act
        assert x["kept_for_weight_grad"] == act  # the linear map's input, for its weight gradient
        # the linear map saves its input, the ReLU its output; the last layer's loss saves more
        assert x["activation_bytes"] == 2 * act if i < 7 else x["activation_bytes"] > act
        assert x["forward"] > 0 and x["backward_weight"] > 0 and x["backward"] > 0 and x["optimizer"] > 0
        assert (x["backward_input"] > 0) == (i > 0)  # the first layer's input is data
    assert prof["link"] == LINK and prof["dtype"] == "float64" and prof["device"]["peak_flops"] > 0


def test_gpt_problem_file_loads_and_splits(tmp_path):
    prof = profile(GPT, microbatch=2, repeat=2, link=None)
    spec = problem_from_profile(prof, microbatches=4, pipeline=3, schedule="1f1b-split")
    write_problem(spec, tmp_path / "gpt.yaml")
    loaded = load_problem(tmp_path / "gpt.yaml")
    assert loaded == spec
    pipe = pipeline_from_spec(loaded)
    assert [n for names in pipe.stage_layers for n in names] == [
        "embed",
        "block0",
        "block1",
        "block2",
        "block3",
        "head",
    ]
    blocks = [x for x in prof["layers"] if x["name"].startswith("block")]  # measured part by part
    parts = [p for x in blocks for p in x["sublayers"]]
    assert [p["name"] for p in parts[:2]] == ["block0.attn", "block0.mlp"]
    assert all(0 < p["kept_for_weight_grad"] < p["activation_bytes"] for p in parts)
    assert prof["layers"][0]["backward_input"] == 0.0  # token ids have no gradient


def test_profile_solve_run_compare(tmp_path):
    """The CLI path: ``layersched profile`` (link measured), ``solve``, a run, ``compare``."""
    problem, schedule = tmp_path / "mlp.yaml", tmp_path / "schedule.json"
    assert (
        main(
            [
                "profile",
                MLP,
                "--microbatch",
                "8",
                "--out",
                str(problem),
                "--microbatches",
                "4",
                "--repeat",
                "3",
                "--schedule",
                "1f1b-split",
            ]
        )
        == 0
    )
    spec = load_problem(problem)
    assert spec.cluster.intra_node.bandwidth > 0 and spec.training.microbatch_size == 8
    # the short calibration run measured what the runner costs beyond the layers: a cost per kind,
    # never negative. Any kind may come out at 0 (CI saw W at 0; a full suite run once saw all
    # four): `fit_overhead` takes from every kind what the calibration's iterations did not need,
    # down to 0 where they ran no slower than the profile's layer times alone predict
    overhead = spec.cluster.device.action_overhead
    assert set(overhead) == set("FIWB") and all(v >= 0 for v in overhead.values())
    assert spec.cluster.intra_node.latency > 0
    assert all(layer.backward is not None for layer in spec.model.layers)
    assert main(["solve", str(problem), "--out", str(schedule), "--quiet"]) == 0
    doc = load_schedule(schedule)
    assert doc.pipeline.stage_layers is not None and doc.time_unit == "ns"
    results = launch_local(doc, MLP, steps=3, lr=0.05, trace=tmp_path / "run-trace.json")
    ref, losses = train_reference(MLP, 4, steps=3, lr=0.05)
    got = {k: v for r in results for k, v in r.params.items()}
    for name, value in ref.items():
        torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-12)
    assert next(r.losses for r in results if r.losses) == pytest.approx(losses, rel=1e-9)
    cmp = compare(schedule, tmp_path / "run-trace.json")
    assert not cmp.fitted and cmp.steps == [1, 2]
    assert main(["compare", str(schedule), str(tmp_path / "run-trace.json")]) == 0


def test_profile_rejects_bad_arguments(tmp_path, capsys):
    assert main(["profile", MLP, "--microbatch", "0", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "--microbatch: must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_profile_takes_the_model_args_a_run_takes(tmp_path, capsys):
    """`profile --model-arg` builds the model as `run --model-arg` does (before, profile had no way to:
    it timed the builder's defaults), says so in the problem's description, and refuses a key the
    builder does not take before any timing."""
    from layersched.describe.config import load_problem

    args = ["profile", MLP, "--microbatch", "2", "--repeat", "1", "--link", "estimate", "--out"]
    assert main([*args, str(tmp_path / "a.yaml"), "--model-arg", "depth=3", "--model-arg", "width=16"]) == 0
    spec = load_problem(tmp_path / "a.yaml")
    assert [layer.name for layer in spec.model.layers] == ["fc0", "fc1", "fc2"]
    assert spec.model.layers[0].param_bytes == (16 * 16 + 16) * 8  # float64 weights and bias of width 16
    assert f"profiled from {MLP} with depth=3, width=16 at micro-batch size 2" in spec.description
    capsys.readouterr()
    assert main([*args, str(tmp_path / "b.yaml"), "--model-arg", "detph=3"]) == 2
    assert "the builder takes no option 'detph'; did you mean 'depth'?" in capsys.readouterr().err
    assert not (tmp_path / "b.yaml").exists()


def test_measure_runtime_reads_the_cost_beyond_the_layers_of_a_run(monkeypatch):
    """The estimator on runs whose numbers are known: every compute action takes its layers'
    profiled time plus a figure of its kind, every step spends another 10 us per action outside any
    action, and each message is 200 us in flight. A profile that already carries an overhead is measured
    against its layers' own times, not against layers plus the old overhead."""
    import layersched.runtime.launch as launch
    from layersched.runtime.runner import RankResult

    prof = profile(MLP, microbatch=8, repeat=2, link=LINK, num_microbatches=4)
    prof["device"]["action_overhead"] = 1.0  # a stale figure, to be ignored
    # every time the estimate reads fixed: measured ones, uneven on a loaded machine (another test beside
    # this one), gave schedules whose waits alone passed the measured iterations, and no shift could fit
    for layer in prof["layers"]:
        layer.update(forward=2e-5, backward_input=2e-5, backward_weight=1e-5, backward=3e-5, optimizer=1e-5)
    steps = 4

    extra = {"F": 30e-6, "I": 20e-6, "W": 10e-6, "B": 50e-6}

    stall = {"seconds": 0.0}  # a step's time beyond its actions and the 10 us after each

    def fake_run(jobs, **_):
        assert [cfg.schedule.method for cfg in jobs] == ["1f1b-split", "1f1b"]
        return [fake_results(cfg.schedule) for cfg in jobs]

    def fake_results(doc):
        seconds = {t.name: t.duration * 1e-9 for t in doc.tasks}
        assert max(seconds.values()) < 0.1  # the schedule's times are the layers' own
        out = []
        for rank, actions in enumerate(doc.actions):
            events = []
            for k in range(steps):
                t = 0.0
                for a in actions:
                    events.append({"action": a, "step": k, "start": t, "duration": seconds[a] + extra[a[1]]})
                    t += seconds[a] + extra[a[1]] + 10e-6
            # one message a step from rank 0 to rank 1, 200 us plus its bytes over the bandwidth
            side = [{"side": "send", "clock": k}, {"side": "recv", "clock": k + 200e-6 + 800 / 1e9, "wait": 1e-3}]
            transfers = [{"step": k, "tag": 0, "bytes": 800, **side[rank]} for k in range(steps)]
            times = [t + stall["seconds"]] * steps
            out.append(RankResult(rank, rank, 0, None, {}, events, [float(k) for k in range(steps)], times, transfers))
        return out

    monkeypatch.setattr(launch, "launch_jobs", fake_run)
    runtime = measure_runtime(prof, steps=steps, fit=False)
    assert runtime["action_overhead"] == pytest.approx({k: v + 10e-6 for k, v in extra.items()}, rel=1e-6)
    assert runtime["latency"] == pytest.approx(200e-6, rel=1e-6)
    # fitted: one common shift of every kind, so that the two schedules' predicted iterations add
    # up to the measured ones (the stall of 2 ms a step is spread over the actions as 'outside'
    # time; the waits the schedules have on top of it make the shift negative)
    stall["seconds"] = 2e-3
    unfitted = measure_runtime(prof, steps=steps, fit=False)["action_overhead"]
    fitted = measure_runtime(prof, steps=steps)
    # no kind goes below 0: a kind the shift would take there stays at 0 (seen on a loaded machine)
    shift = min(fitted["action_overhead"][k] - v for k, v in unfitted.items())
    assert shift < 0
    for k, v in unfitted.items():
        assert fitted["action_overhead"][k] == pytest.approx(max(v + shift, 0.0), abs=1e-9), k
    assert set(fitted["iterations"]) == {"1f1b-split", "1f1b"}
    cal = {**prof, "device": {**prof["device"], "action_overhead": fitted["action_overhead"]}}
    cal["link"] = {**prof["link"], "latency": fitted["latency"]}
    pipe = pipeline_from_spec(problem_from_profile(cal, microbatches=4, pipeline=2))
    total = 0.0
    for name in fitted["iterations"]:
        sol = solve_pipeline(pipe, schedule=name)
        total += sol.schedule.makespan(sol.tasks.problem) * 1e-9
    assert total == pytest.approx(sum(fitted["iterations"].values()), rel=1e-5)  # to the ns the schedules count


def test_profile_warns_when_the_ranks_outnumber_the_cores(tmp_path, capsys, monkeypatch):
    import layersched.cli.measure as commands

    monkeypatch.setattr(commands.os, "cpu_count", lambda: 2)
    args = ["profile", MLP, "--microbatch", "2", "--repeat", "1", "--link", "estimate", "--out"]
    assert main([*args, str(tmp_path / "a.yaml"), "--pipeline", "4"]) == 0
    assert "4 ranks x 1 thread(s) on 2 CPU cores" in " ".join(capsys.readouterr().out.split())
    assert main([*args, str(tmp_path / "b.yaml"), "--pipeline", "2"]) == 0
    assert "CPU cores" not in capsys.readouterr().out
