"""Several stages per rank: ``best`` against the peers on the multi-chunk rows, and what it costs.

For each row, at the problem's own memory limit (1F1B's activations):
- the peers, timed on our graph and validated: torch's ``ScheduleInterleavedZeroBubble``,
  ``ScheduleZBVZeroBubble`` and ``ScheduleDualPipeV`` orders (where torch is installed; a row says
  why one does not apply, e.g. over the memory limit), and the published figure of the ZB authors'
  V generator;
- ``layersched solve --solver best --time-limit L`` as a subprocess, ``--runs`` times: its bubble
  rate, its proven gap, where it came from, its wall time and peak memory (min / median / max).

Rows: the bundled ``zb-v-6.2b`` (p=16) and ``zb-interleaved-1.5b`` (p=8); the V row re-cut to
p=32, m=256 (the issue's largest: 4 GB at most, within the limit); the interleaved row re-cut to
p=4, m=8 and p=6, m=12 (rows of the same kind, smaller: where the search reaches the bound, and where
it stops doing so); the interleaved row under 18 stage activations per rank, 3/4 of 1F1B's (no
peer's order fits there); and the V row at p=16 and p=8 under V-Half's memory, Zero Bubble's
``(p+2)//2`` micro-batches (``p+2`` stage activations; no torch order fits there, our ``v-half`` and
``v-min`` templates are listed beside).

``--rows more`` runs rows of the same two kinds that the development above never tuned on: the
interleaved row at p=12 (m=2p and m=3p) and with two stages per rank (p=8, m=16); the V row at p=8
(m=24) and p=24 (m=48); and the V row at p=12, m=36 over links 2.5 times slower (transfer 4025).
``--rows unseen`` runs more such rows, first run in session 28 (after every step of the search was
tuned): the interleaved row at p=6 (m=18), p=10 (m=20), with two stages per rank at p=4 (m=16) and
p=12 (m=24), and at p=6 under 14 stage activations per rank; the V row at p=6 (m=18), p=10 (m=40)
and p=12 under 16 stage activations; and `uneven_row`, stages of unequal cost. ``--rows fresh`` runs
eight more, first run in session 54 (`fresh_rows`). ``--rows random`` draws ``--count`` rows of the
same two kinds at random (`random_rows`, ``--seed``): a check on rows nobody chose. ``--rows uneven``
runs `uneven_row` and four more re-cuts with the same unequal first and last stage (`uneven_rows`).

After the tables a line says on how many rows `best` (its longest run) is at or below the best peer
that fits (`beats_peers`), and one on how many meet the issue's proven-gap target for their rank
count (`target_line`: at most 1% for p <= 8, 2% for p = 16).

Usage: python benchmarks/multichunk.py [--runs 3] [--time-limit 60] [--rows issue|more|unseen|fresh|random|uneven]
       [--seed 0] [--count 12]
(the issue's rows: about 20 minutes on 2 cores at the defaults)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from machine_speed import HEADING, describe, speed
from rich.console import Console
from rich.table import Table

from layersched.cli.options import positive_float, positive_int
from layersched.describe.config import load_problem
from layersched.describe.stages import pipeline_from_spec
from layersched.schedule.solve import solve_orders, solve_pipeline

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = {"zb-v-6.2b": ("ZB authors' V generator", 0.0697)}


def recut(
    tmp: Path,
    base: str,
    ranks: int,
    microbatches: int,
    activations: int | None = None,
    *,
    stages_per_rank: int | None = None,
    transfer: int | None = None,
) -> Path:
    """The bundled row ``base`` re-cut to ``ranks`` ranks and ``microbatches`` (the same per-chunk
    costs; the same stages per rank unless ``stages_per_rank`` is given, the same transfer time unless
    ``transfer`` is), under 1F1B's memory as the row has it: ``ranks`` activations of each stage on a
    rank; or under ``activations`` stage activations per rank."""
    doc = yaml.safe_load((ROOT / "problems" / f"{base}.yaml").read_text())
    p = doc["pipeline"]
    v = stages_per_rank or p["stages_per_rank"]
    held = v * ranks if activations is None else activations
    doc["name"] = f"{base}-p{ranks}-m{microbatches}" + ("" if activations is None else f"-a{activations}")
    if stages_per_rank is not None:
        doc["name"] += f"-v{v}"
    if transfer is not None:
        doc["name"] += f"-c{transfer}"
        p["transfer"] = transfer
    p.update(stages=v * ranks, stages_per_rank=v, microbatches=microbatches, memory_limit=held * p["memory_forward"])
    doc["description"] = (
        f"{base} re-cut: p={ranks}, m={microbatches}, {v} stages per rank, {held} stage activations per rank"
    )
    return _write(tmp, doc)


def _write(tmp: Path, doc: dict) -> Path:
    """The problem ``doc`` as ``tmp/<its name>.yaml``."""
    path = tmp / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def more_rows(tmp: Path) -> list[Path]:
    """Rows of the same kinds that no search was tuned on (``--rows more``)."""
    return [
        recut(tmp, "zb-interleaved-1.5b", 12, 24),
        recut(tmp, "zb-interleaved-1.5b", 12, 36),
        recut(tmp, "zb-interleaved-1.5b", 8, 16, stages_per_rank=2),
        recut(tmp, "zb-v-6.2b", 8, 24),
        recut(tmp, "zb-v-6.2b", 24, 48),
        recut(tmp, "zb-v-6.2b", 12, 36, transfer=4025),
    ]


UNEVEN = {0: (1.4, 1.2, 1.0), -1: (1.3, 1.5, 1.2)}
"""`uneven_row`'s stages that cost more than the others: stage -> factors of its F, I and W times (the
first stage also embeds, the last computes the head and the loss)."""


def uneven_row(
    tmp: Path, ranks: int = 4, microbatches: int = 16, activations: int | None = None, stages_per_rank: int = 2
) -> Path:
    """The interleaved row re-cut (`recut`; by default to p=4, m=16, two stages per rank, 1F1B's memory)
    with the first and the last stage slower by `UNEVEN`: the last rank is the bottleneck, and no
    template is made for it."""
    path = recut(tmp, "zb-interleaved-1.5b", ranks, microbatches, activations, stages_per_rank=stages_per_rank)
    doc = yaml.safe_load(path.read_text())
    p = doc["pipeline"]
    for key, k in (("forward", 0), ("backward_input", 1), ("backward_weight", 2)):
        times = [int(p[key])] * p["stages"]
        for stage, factors in UNEVEN.items():
            times[stage] = int(times[stage] * factors[k])
        p[key] = times
    doc["name"] += "-uneven"
    doc["description"] += ", the first and the last stage slower"
    return _write(tmp, doc)


def uneven_rows(tmp: Path) -> list[Path]:
    """Rows of stages of unequal cost, as real models have them (``--rows uneven``): `uneven_row`, and
    since session 78 the same re-cut at p=3 (m=12, two stages per rank, 8 stage activations), p=4 (m=8
    and m=12 under 9, three stages per rank) and p=5 (m=10, two)."""
    return [
        uneven_row(tmp),
        uneven_row(tmp, 3, 12, 8),
        uneven_row(tmp, 4, 8, stages_per_rank=3),
        uneven_row(tmp, 5, 10),
        uneven_row(tmp, 4, 12, 9, stages_per_rank=3),
    ]


def unseen_rows(tmp: Path) -> list[Path]:
    """Rows of the same kinds first run after the search was tuned (``--rows unseen``)."""
    return [
        recut(tmp, "zb-interleaved-1.5b", 6, 18),
        recut(tmp, "zb-interleaved-1.5b", 10, 20),
        recut(tmp, "zb-interleaved-1.5b", 4, 16, stages_per_rank=2),
        recut(tmp, "zb-interleaved-1.5b", 12, 24, stages_per_rank=2),
        recut(tmp, "zb-interleaved-1.5b", 6, 12, activations=14),
        recut(tmp, "zb-v-6.2b", 6, 18),
        recut(tmp, "zb-v-6.2b", 10, 40),
        recut(tmp, "zb-v-6.2b", 12, 36, activations=16),
        uneven_row(tmp),
    ]


def fresh_rows(tmp: Path) -> list[Path]:
    """Rows of the same kinds first run in session 54, long after the search was last tuned (``--rows
    fresh``): the interleaved row at p=5 (m=15), p=8 (m=32), with two stages per rank at p=7 (m=14),
    p=16 (m=32) and at p=6 (m=24) over links 1.7 times slower (transfer 3000); the V row at p=4
    (m=12), p=7 (m=21) and p=16 (m=64)."""
    return [
        recut(tmp, "zb-interleaved-1.5b", 5, 15),
        recut(tmp, "zb-interleaved-1.5b", 7, 14, stages_per_rank=2),
        recut(tmp, "zb-interleaved-1.5b", 8, 32),
        recut(tmp, "zb-v-6.2b", 4, 12),
        recut(tmp, "zb-v-6.2b", 7, 21),
        recut(tmp, "zb-interleaved-1.5b", 6, 24, stages_per_rank=2, transfer=3000),
        recut(tmp, "zb-interleaved-1.5b", 16, 32, stages_per_rank=2),
        recut(tmp, "zb-v-6.2b", 16, 64),
    ]


def random_rows(tmp: Path, seed: int = 0, count: int = 12) -> list[Path]:
    """``count`` distinct rows of the issue's two kinds drawn with ``seed`` (``--rows random``): the
    interleaved row (loop placement, 2 or 3 stages per rank) or the V row, on 3 to 12 ranks, with 2 to
    4 micro-batches per rank (a quarter of the rows 1 or 3 more, where torch's orders may not
    apply), under 1F1B's memory, 3/4 of it or one stage activation per chunk more, over links as
    fast or 1.5 times slower."""
    rng, out, names = random.Random(seed), [], set()
    for _ in range(100 * count):
        if len(out) == count:
            break
        base = rng.choice(("zb-interleaved-1.5b", "zb-v-6.2b"))
        v = rng.choice((2, 3)) if base == "zb-interleaved-1.5b" else 2
        p = rng.randint(3, 12)
        m = p * rng.randint(2, 4) + (rng.choice((1, 3)) if rng.random() < 0.25 else 0)
        held = rng.choice((v * p, v * p, (3 * v * p) // 4, v * p + v))
        transfer = None
        if rng.random() < 0.25:
            doc = yaml.safe_load((ROOT / "problems" / f"{base}.yaml").read_text())
            transfer = int(1.5 * doc["pipeline"]["transfer"])
        path = recut(tmp, base, p, m, None if held == v * p else held, stages_per_rank=v, transfer=transfer)
        if path.stem not in names:
            names.add(path.stem)
            out.append(path)
    return out


def beats_peers(bubble: float, listed: list[tuple[str, str]]) -> bool | None:
    """Whether ``bubble`` is at most every peer's bubble in ``listed`` (`peers`' rows; those that do
    not fit, e.g. "n/a: over the memory limit", do not count), or None where no peer fits. The peers'
    figures are given to 4 decimals (the published one too), so ``bubble`` is compared as rounded to 4."""
    figures = []
    for _, value in listed:
        try:
            figures.append(float(value.split()[0]))
        except (ValueError, IndexError):
            continue
    return None if not figures else round(bubble, 4) <= min(figures)


TARGETS = ((lambda p: p <= 8, "p <= 8", 0.01), (lambda p: p == 16, "p = 16", 0.02))
"""The optimizer issue's proven-gap targets within 60 s: (which ranks, label, largest gap)."""


def target_line(gaps: list[tuple[int, float]]) -> str:
    """How many rows meet the issue's proven-gap target for their rank count (`TARGETS`), from
    (ranks, the longest run's gap) per row; rows of other rank counts have no target."""
    parts = []
    for applies, label, most in TARGETS:
        mine = [gap for p, gap in gaps if applies(p)]
        if mine:
            parts.append(f"{label}: within {most:.0%} on {sum(gap <= most for gap in mine)} of {len(mine)}")
    return "proven gap targets (longest run): " + ("; ".join(parts) if parts else "no row with a target")


def rows(tmp: Path) -> list[Path]:
    return [
        ROOT / "problems" / "zb-v-6.2b.yaml",
        ROOT / "problems" / "zb-interleaved-1.5b.yaml",
        recut(tmp, "zb-v-6.2b", 32, 256),
        recut(tmp, "zb-interleaved-1.5b", 4, 8),
        recut(tmp, "zb-interleaved-1.5b", 6, 12),
        recut(tmp, "zb-interleaved-1.5b", 8, 24, activations=18),
        recut(tmp, "zb-v-6.2b", 16, 48, activations=18),
        recut(tmp, "zb-v-6.2b", 8, 24, activations=10),
    ]


def peers(path: Path) -> list[tuple[str, str]]:
    """(peer, bubble rate or why not) for torch's schedules on this problem."""
    try:
        from layersched.runtime.torch_orders import TORCH_SCHEDULES, TorchOrderError, peer_orders
    except ImportError:
        return [("torch", "needs torch")]
    from solvers import InvalidSchedule

    pipe = pipeline_from_spec(load_problem(path))
    out = []
    if pipe.capacity is not None and pipe.placement == "v" and pipe.capacity < 2 * pipe.num_ranks * pipe.mem_forward[0]:
        for name in ("v-half", "v-min"):  # under ZB-V's memory: our controllable-memory templates beside
            try:
                out.append((f"our {name}", f"{solve_pipeline(pipe, schedule=name).metrics['bubble_rate']:.4f}"))
            except InvalidSchedule:
                out.append((f"our {name}", "n/a: over the memory limit"))
    for name in ("interleaved-zb", "zb-v", "dualpipev"):
        label = f"torch {TORCH_SCHEDULES[name].cls}"
        try:
            orders, split, stage_to_rank = peer_orders(name, pipe)
            sol = solve_orders(pipe, orders, split_backward=split, stage_to_rank=stage_to_rank, method=name)
            out.append((label, f"{sol.metrics['bubble_rate']:.4f}"))
        except InvalidSchedule as exc:
            over = "over the memory limit" if str(exc).startswith("memory") else str(exc)[:60]
            out.append((label, f"n/a: {over}"))
        except TorchOrderError as exc:
            out.append((label, f"n/a: {str(exc).split(';')[0].replace('torch' + chr(39) + 's ', '')[:60]}"))
    return out


def best_run(path: Path, limit: float, out: Path) -> dict:
    """One ``solve --solver best`` in its own process: the result and the process's wall and peak memory."""
    code = (
        "import resource, sys, time; t = time.perf_counter(); from layersched.cli.main import main; "
        f"rc = main(['solve', {str(path)!r}, '--solver', 'best', '--time-limit', '{limit}', '--out', "
        f"{str(out)!r}, '--quiet']); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall, rss_kb = done.stdout.split()[-2:]
    doc = json.loads(out.read_text())
    m = doc["metrics"]
    return {
        "bubble": m["bubble_rate"],
        "gap": (m["value"] - m["lower_bound"]) / m["value"],
        "wall": float(wall),
        "rss_mb": int(rss_kb) / 1024,
    }


def spread(xs: list[float], fmt: str) -> str:
    return " / ".join(format(x, fmt) for x in (min(xs), statistics.median(xs), max(xs)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=positive_int, default=3, help="solve runs per row (default 3)")
    ap.add_argument(
        "--time-limit", type=positive_float, default=60.0, help="best's --time-limit in seconds (default 60)"
    )
    ap.add_argument(
        "--rows",
        choices=("issue", "more", "unseen", "fresh", "random", "uneven"),
        default="issue",
        help="issue: the rows the optimizer issue names and their re-cuts; more, unseen: rows of the same kinds never "
        "tuned on (unseen: first run in session 28, one with stages of unequal cost; fresh: first run in session 54); "
        "random: --count rows of those kinds drawn with --seed; uneven: the interleaved row re-cut five ways with "
        "its first and last stage slower",
    )
    ap.add_argument("--seed", type=int, default=0, help="--rows random: the seed the rows are drawn with (default 0)")
    ap.add_argument("--count", type=positive_int, default=12, help="--rows random: how many rows (default 12)")
    args = ap.parse_args()
    console = Console(width=140)
    before = speed()
    console.print(f"{HEADING}: {describe(before)}", style="dim")
    peer_table = Table(title="peers at the same memory limit (timed on our graph, validated)")
    best_table = Table(title=f"best, {args.runs} runs, min / median / max (--time-limit {args.time_limit:g})")
    for col in ("row", "peer", "bubble"):
        peer_table.add_column(col)
    for col in ("row", "bubble", "proven gap %", "wall s", "peak MB"):
        best_table.add_column(col)
    listed_rows = {
        "issue": rows,
        "more": more_rows,
        "unseen": unseen_rows,
        "fresh": fresh_rows,
        "random": lambda tmp: random_rows(tmp, args.seed, args.count),
        "uneven": uneven_rows,
    }[args.rows]
    verdicts, gaps = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for path in listed_rows(Path(tmp)):
            name = path.stem
            listed = peers(path)
            if name in PUBLISHED:
                listed.append((PUBLISHED[name][0], f"{PUBLISHED[name][1]:.4f} (published)"))
            for peer, value in listed:
                peer_table.add_row(name, peer, value)
            runs = []
            for k in range(args.runs):
                runs.append(best_run(path, args.time_limit, Path(tmp) / f"{name}-{k}.json"))
                console.print(f"{name}: run {k + 1}/{args.runs}, bubble {runs[-1]['bubble']:.4f}", style="dim")
            verdicts.append(beats_peers(max(r["bubble"] for r in runs), listed))
            gaps.append((pipeline_from_spec(load_problem(path)).num_ranks, max(r["gap"] for r in runs)))
            best_table.add_row(
                name,
                spread([r["bubble"] for r in runs], ".4f"),
                spread([r["gap"] * 100 for r in runs], ".2f"),
                spread([r["wall"] for r in runs], ".1f"),
                spread([r["rss_mb"] for r in runs], ".0f"),
            )
    console.print(peer_table)
    console.print(best_table)
    fits = [v for v in verdicts if v is not None]
    console.print(
        f"best (its longest run) at or below the best peer that fits on {sum(fits)} of {len(fits)} rows "
        f"with one; no peer fits on {len(verdicts) - len(fits)}"
    )
    console.print(target_line(gaps))
    console.print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; wall and peak "
        "memory of each solve process (after Python starts)"
    )
    console.print(f"{HEADING}: {describe(before)} before the rows, {describe(speed())} after them")


if __name__ == "__main__":
    main()
