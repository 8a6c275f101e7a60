"""The runner on this machine's CPUs (gloo, one thread per rank): two tables.

(a) Overhead per action, ours vs torch.distributed.pipelining's ``_PipelineScheduleRuntime`` on
    the same schedules and the same model, a tiny MLP whose compute is negligible: the median step
    time over the actions per rank. Our compute share is the measured compute time over the step.
(b) Prediction vs measurement: the model is profiled (``layersched.runtime.profiler``: layers in
    run order, the fused backward, the link between two local ranks, and the runner's own cost per
    action and message latency from a short calibration run), the problem solved with each template
    that applies, the schedule run, and the measured iteration time (mean and median over the steps
    after the first) set beside the predicted one, with the measured/predicted ratio of each action
    kind and of a message's time in flight. All of it is repeated in rounds, each with a profile of
    its own: the range of the rounds' ratios shows how much the machine moves between a profile and
    the runs after it.

Usage::

    python benchmarks/runner_bench.py              # 2 ranks, 30 steps, 4 rounds of (b)
    python benchmarks/runner_bench.py --quick      # fewer steps, gpt_small only in (b)
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from layersched.describe.config import ProblemSpec
from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import schedule_file
from layersched.runtime.launch import launch_jobs
from layersched.runtime.preflight import torch_supports
from layersched.runtime.profiler import CALIBRATION_SCHEDULES, problem_from_profile, profile
from layersched.runtime.runner import RunConfig
from layersched.runtime.trace import compare, trace_document
from layersched.schedule.solve import solve_pipeline
from layersched.schedule.templates import TemplateError, template_names

MODELS = Path(__file__).resolve().parents[1] / "examples" / "models.py"


def _step_times(results, skip: int) -> list[float]:
    """Per step after ``skip``, the slowest rank's step time."""
    return [max(r.step_times[k] for r in results) for k in range(skip, len(results[0].step_times))]


def overhead_table(ranks: int, microbatches: int, steps: int, rounds: int) -> None:
    spec = ProblemSpec.model_validate(
        {
            "name": "overhead",
            "pipeline": {
                "stages": ranks,
                "microbatches": microbatches,
                "forward": 1,
                "backward_input": 1,
                "backward_weight": 1,
            },
        }
    )
    model, options = f"{MODELS}:mlp", {"width": 4, "depth": 2 * ranks, "microbatch_size": 1}
    jobs = []
    for name in ("gpipe", "1f1b", "1f1b-split"):
        doc = schedule_file(solve_pipeline(pipeline_from_spec(spec), schedule=name))
        for runtime in ("layersched", "torch"):
            if runtime == "layersched" or not torch_supports(doc):
                jobs.append(RunConfig(doc, model, steps=steps, model_options=options, runtime=runtime))
    # the jobs run in turn, ``rounds`` times, so that load from elsewhere hits both runtimes alike
    runs = launch_jobs(jobs * rounds, timeout=900)
    print(
        f"(a) overhead per action: tiny MLP (width 4, {2 * ranks} layers, micro-batch 1), {ranks} ranks, "
        f"{microbatches} micro-batches; median over {rounds} x {steps - 3} steps"
    )
    print(
        f"{'schedule':<12}{'runtime':<12}{'actions/rank':>13}{'step (ms)':>11}{'per action (us)':>17}"
        f"{'compute share':>15}"
    )
    for j, job in enumerate(jobs):
        mine = runs[j :: len(jobs)]
        step = statistics.median(t for results in mine for t in _step_times(results, 3))
        actions = max(len(a) for a in job.schedule.actions)
        share = "-"
        if job.runtime == "layersched":
            busy = [
                sum(e["duration"] for e in r.events if e["step"] >= 3 and not e.get("wait")) / sum(r.step_times[3:])
                for results in mine
                for r in results
            ]
            share = f"{statistics.mean(busy):.1%}"
        print(
            f"{job.schedule.method:<12}{job.runtime:<12}{actions:>13}{step * 1e3:>11.3f}"
            f"{step / actions * 1e6:>17.1f}{share:>15}"
        )


def _prediction_round(
    models: list[tuple[str, dict]], ranks: int, microbatches: int, steps: int, say, reverse: bool
) -> list[dict]:
    """One round: per model, profile it (layers, link, the runner's costs), solve every template
    that applies and run the schedules right away (in reverse order with ``reverse``: this machine
    slows by up to 10% over a minute or two of load, which would otherwise fall on the schedules
    run last); per schedule, in template order, the predicted and measured figures."""
    rows = []
    for builder, options in models:
        extra = {k: v for k, v in options.items() if k != "microbatch_size"}
        prof = profile(
            f"{MODELS}:{builder}",
            options["microbatch_size"],
            repeat=20,
            num_microbatches=microbatches,
            model_options=extra,
        )
        link, overhead = prof["link"], prof["device"]["action_overhead"]
        say(
            f"profiled {builder} {options}: per action "
            + " ".join(f"{k} {v * 1e6:.0f}" for k, v in overhead.items())
            + f" us; link {link['latency'] * 1e6:.0f} us + bytes / {link['bandwidth'] / 1e9:.2f} GB/s"
        )
        pipe = pipeline_from_spec(problem_from_profile(prof, microbatches=microbatches, pipeline=ranks))
        jobs = []
        for name in template_names():
            try:
                doc = schedule_file(solve_pipeline(pipe, schedule=name))
            except TemplateError as exc:
                say(f"  {name}: skipped ({exc})")
                continue
            jobs.append(RunConfig(doc, f"{MODELS}:{builder}", steps=steps, model_options=options))
        runs = launch_jobs(jobs[::-1], timeout=900)[::-1] if reverse else launch_jobs(jobs, timeout=900)
        for job, res in zip(jobs, runs, strict=True):
            cmp = compare(job.schedule, trace_document(job.schedule, res))
            by = {row.what: row for row in cmp.rows}
            rows.append(
                {
                    "model": builder,
                    "schedule": job.schedule.method,
                    "predicted": by["iteration"].predicted,
                    "mean": by["iteration"].measured,
                    "median": statistics.median(_step_times(res, 1)),
                    "kinds": {k: by[k].ratio for k in ("F", "B", "I", "W", "transfer") if k in by and by[k].ratio},
                }
            )
    return rows


def prediction_table(models: list[tuple[str, dict]], ranks: int, microbatches: int, steps: int, rounds: int) -> None:
    """``rounds`` rounds of `_prediction_round`, each with its own profile (every other one running
    the schedules in reverse), so that the spread shows how far the machine itself moves between a
    profile and the runs that follow it."""
    per_round = []
    for k in range(rounds):
        say = print if k == 0 else lambda _: None
        per_round.append(_prediction_round(models, ranks, microbatches, steps, say=say, reverse=k % 2 == 1))
    print(
        f"(b) predicted vs measured iteration, {ranks} ranks, {microbatches} micro-batches, steps 1..{steps - 1}, "
        f"{rounds} round(s) of profile + runs"
    )
    print(
        f"{'model':<11}{'schedule':<12}{'predicted':>10}{'mean':>9}{'median':>9}{'median/pred':>12}"
        f"{'rounds':>13}{'F':>7}{'B':>7}{'I':>7}{'W':>7}{'X':>7}"
    )
    ratios = []
    for j, first in enumerate(per_round[0]):
        mine = [rows[j] for rows in per_round]
        each = [r["median"] / r["predicted"] for r in mine]
        ratio = statistics.median(each)
        ratios.append(ratio)
        kinds = "".join(
            f"{statistics.median(r['kinds'][k] for r in mine):>7.2f}" if k in first["kinds"] else f"{'-':>7}"
            for k in ("F", "B", "I", "W", "transfer")
        )
        spread = f"{min(each):.2f}-{max(each):.2f}"
        label = first["schedule"] + ("*" if first["schedule"] in CALIBRATION_SCHEDULES else "")
        print(
            f"{first['model']:<11}{label:<12}{statistics.median(r['predicted'] for r in mine) * 1e3:>10.2f}"
            f"{statistics.median(r['mean'] for r in mine) * 1e3:>9.2f}"
            f"{statistics.median(r['median'] for r in mine) * 1e3:>9.2f}{ratio:>12.3f}{spread:>13}{kinds}"
        )
    print(
        "times in ms, medians over the rounds; median/pred: the median over the rounds of each round's median "
        "step over its prediction, 'rounds' their range; F/B/I/W: measured/predicted mean action time; X: the "
        "same for a message's time in flight; *: a schedule the profile's calibration runs (the runner's "
        "per-action costs are fitted to its iteration time)"
    )
    for what, keep in (("all", lambda s: True), ("not calibrated on", lambda s: s not in CALIBRATION_SCHEDULES)):
        mine = [r for r, row in zip(ratios, per_round[0], strict=True) if keep(row["schedule"])]
        within = sum(abs(r - 1) <= 0.1 for r in mine)
        print(
            f"{what}: median/predicted {min(mine):.3f} to {max(mine):.3f}, geometric mean "
            f"{statistics.geometric_mean(mine):.3f}; within 10%: {within} of {len(mine)}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument(
        "--rounds", type=int, default=4, help="rounds of profile + runs in (b), every other one in reverse (default 4)"
    )
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    steps = 10 if args.quick else args.steps
    overhead_table(args.ranks, 2 * args.microbatches, steps, rounds=1 if args.quick else 3)
    print()
    models = [("gpt_small", {"microbatch_size": 4})]
    if not args.quick:
        models.append(("mlp", {"microbatch_size": 64, "width": 256}))
    prediction_table(models, args.ranks, args.microbatches, steps, rounds=1 if args.quick else args.rounds)


if __name__ == "__main__":
    main()
